import CIDN2
import Foundation

/// An email address as every service accepts, compares and mails it: one rule, so that two spellings
/// of one address are one account, one invitation and one mailbox everywhere, and a look-alike
/// spelling is refused rather than quietly made into someone else's address.
///
/// The rule, applied to the text trimmed of surrounding whitespace:
/// 1. Exactly one `@`, a local part before it and a domain after it.
/// 2. The whole address is in Unicode NFKC already, code point for code point: compatibility
///    characters (KELVIN SIGN, fullwidth letters, ligatures, superscripts) and decomposed accents
///    are refused, not mapped.
/// 3. Every character outside ASCII is a letter, a mark or a number (no symbols, punctuation,
///    spaces, controls, format characters, default-ignorables, private-use or unassigned code
///    points), and its full case folding is its lowercase mapping, one code point: `É` is fine
///    (`é`), while `ß` (folds to `ss`), `ẞ`, `ς`, `İ` and Cherokee small letters are refused.
/// 4. The local part is 1 to 64 bytes of UTF-8; its ASCII characters are letters, digits and
///    ``!#$%&'*+-/=?^_`{|}~``; dots separate non-empty parts (none first, last or doubled); it does
///    not start with a mark.
/// 5. The domain, lowercased, converts by IDNA2008 (libidn2, without UTS #46 mapping) to its ASCII
///    form: at least two labels of letters, digits and hyphens (no hyphen first or last), at most
///    63 bytes each and 253 in all, a top-level label that is not all digits. A label written as an
///    A-label (`xn--…`) must decode to one that passes rule 3 as it is.
///
/// The canonical form is the local part lowercased (which, by rule 3, is its case folding, and
/// NFKC-stable), `@`, and the domain's ASCII form: `Alice@Example.com` is `alice@example.com`,
/// `kate@bücher.de` is `kate@xn--bcher-kva.de`. `mailbox` keeps the local part as typed, with the
/// same ASCII domain: mail goes there, and it canonicalises to the same `canonical`.
public struct EmailAddress: Sendable, Hashable, CustomStringConvertible {
    /// What addresses are compared, unique and looked up by.
    public let canonical: String
    /// What mail is sent to: the local part as typed, the domain in its ASCII form.
    public let mailbox: String

    /// Nil when the text breaks the rule above.
    public init?(_ text: String) {
        let typed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        // No address SMTP carries (254 bytes) has more code points; longer text is not looked at further.
        guard typed.unicodeScalars.count <= 254 else { return nil }
        let scalars = Array(typed.unicodeScalars)
        guard let at = scalars.firstIndex(of: "@"), scalars.lastIndex(of: "@") == at else { return nil }
        let typedLocal = scalars[..<at]
        if !typed.utf8.allSatisfy({ $0 < 0x80 }) {
            // Scalar by scalar: Swift's `==` holds canonically equivalent strings equal (KELVIN SIGN
            // and `K` among them), which is exactly the difference looked for here.
            guard typed.precomposedStringWithCompatibilityMapping.unicodeScalars.elementsEqual(typed.unicodeScalars) else { return nil }
        }
        guard let local = Self.foldedLocalPart(typedLocal), let domain = Self.asciiDomain(scalars[(at + 1)...]) else { return nil }
        var mailboxText = String.UnicodeScalarView()
        mailboxText.append(contentsOf: typedLocal)
        canonical = local + "@" + domain
        mailbox = String(mailboxText) + "@" + domain
        guard canonical.utf8.count <= 254, mailbox.utf8.count <= 254 else { return nil }
    }

    /// The domain of the canonical form (ASCII, lowercase).
    public var domain: Substring {
        canonical[canonical.index(after: canonical.lastIndex(of: "@")!)...]
    }

    public var description: String { mailbox }

    // Compared as bytes: String's own equality and hashing hold canonically equivalent text equal.
    public static func == (lhs: EmailAddress, rhs: EmailAddress) -> Bool {
        lhs.canonical.utf8.elementsEqual(rhs.canonical.utf8)
    }

    public func hash(into hasher: inout Hasher) {
        for byte in canonical.utf8 { hasher.combine(byte) }
    }

    /// The canonical form of `email`; text that breaks the rule comes back only trimmed, which is
    /// the canonical form of no address (every canonical form passes the rule), so a lookup by it
    /// finds nothing.
    public static func normalize(_ email: String) -> String {
        EmailAddress(email)?.canonical ?? email.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Whether `email` passes the rule.
    package static func isValid(_ email: String) -> Bool {
        EmailAddress(email) != nil
    }

    // MARK: the rule's parts

    /// ASCII characters a local part may hold besides letters, digits and the dots between its parts.
    private static let localSymbols = Set("!#$%&'*+-/=?^_`{|}~".unicodeScalars)

    /// The lowercase of a character outside ASCII when rule 3 accepts it, else nil.
    static func folded(_ scalar: Unicode.Scalar) -> Unicode.Scalar? {
        let properties = scalar.properties
        switch properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
            .nonspacingMark, .spacingMark, .enclosingMark,
            .decimalNumber, .letterNumber, .otherNumber:
            break
        default:
            return nil
        }
        guard !properties.isDefaultIgnorableCodePoint else { return nil }
        let lower = properties.lowercaseMapping.unicodeScalars
        guard lower.count == 1, let lowered = lower.first else { return nil }
        if lowered == scalar {
            // Its own lowercase, and so accepted only as its own case folding too (not `ß`, `ς`, or
            // the Cherokee small letters, which fold to the capitals).
            return properties.changesWhenCaseFolded ? nil : scalar
        }
        // A capital: accepted only if its case folding is its lowercase (not `ẞ`, or the Cherokee
        // capitals, which are their own folding).
        guard properties.changesWhenCaseFolded else { return nil }
        let folding = String(scalar).folding(options: .caseInsensitive, locale: nil).unicodeScalars
        guard folding.count == 1, folding.first == lowered else { return nil }
        return lowered
    }

    private static func foldedLocalPart(_ scalars: ArraySlice<Unicode.Scalar>) -> String? {
        guard let first = scalars.first, let last = scalars.last, first != ".", last != "." else { return nil }
        guard !first.properties.generalCategory.isMark else { return nil }
        var local = String.UnicodeScalarView()
        var previous: Unicode.Scalar?
        for scalar in scalars {
            if scalar.isASCII {
                if scalar == "." {
                    guard previous != "." else { return nil }
                } else if !(scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || localSymbols.contains(scalar)) {
                    return nil
                }
                local.append(("A"..."Z").contains(scalar) ? Unicode.Scalar(scalar.value + 32)! : scalar)
            } else {
                guard let folded = folded(scalar) else { return nil }
                local.append(folded)
            }
            previous = scalar
        }
        let text = String(local)
        guard text.utf8.count <= 64, scalars.reduce(0, { $0 + UTF8.width($1) }) <= 64 else { return nil }
        return text
    }

    private static func asciiDomain(_ scalars: ArraySlice<Unicode.Scalar>) -> String? {
        var lowered = String.UnicodeScalarView()
        var ascii = true
        for scalar in scalars {
            if scalar.isASCII {
                guard ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar) || scalar == "-" || scalar == "." else { return nil }
                lowered.append(("A"..."Z").contains(scalar) ? Unicode.Scalar(scalar.value + 32)! : scalar)
            } else {
                guard let folded = folded(scalar) else { return nil }
                lowered.append(folded)
                ascii = false
            }
        }
        let text = String(lowered)
        let result: String
        if ascii && !text.hasPrefix("xn--") && !text.contains(".xn--") {
            result = text
        } else {
            guard let converted = idnaASCII(text), let unicode = idnaUnicode(converted) else { return nil }
            // An A-label must stand for what rule 3 accepts as typed.
            guard unicode.precomposedStringWithCompatibilityMapping.unicodeScalars.elementsEqual(unicode.unicodeScalars),
                unicode.unicodeScalars.allSatisfy({ $0 == "." || $0 == "-" || ($0.isASCII ? ($0.properties.isAlphabetic || ("0"..."9").contains($0)) : folded($0) == $0) })
            else { return nil }
            result = converted
        }
        return isHostName(result) ? result : nil
    }

    /// Letters, digits and hyphens in at least two labels, as DNS names mail domains.
    private static func isHostName(_ domain: String) -> Bool {
        guard domain.utf8.count <= 253 else { return false }
        let labels = domain.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard labels.count >= 2, let top = labels.last, !top.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return false }
        return labels.allSatisfy { label in
            !label.isEmpty && label.count <= 63 && label.first != UInt8(ascii: "-") && label.last != UInt8(ascii: "-")
                && label.allSatisfy { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: "-") }
        }
    }

    /// IDNA2008 lookup without UTS #46 mapping: the lowercasing above is the only mapping allowed.
    private static func idnaASCII(_ domain: String) -> String? {
        var output: UnsafeMutablePointer<UInt8>?
        let code = domain.withCString { input in
            input.withMemoryRebound(to: UInt8.self, capacity: domain.utf8.count + 1) { idn2_lookup_u8($0, &output, Int32(IDN2_NO_TR46.rawValue)) }
        }
        defer { idn2_free(output) }
        guard code == Int32(IDN2_OK.rawValue), let output else { return nil }
        return String(cString: output)
    }

    private static func idnaUnicode(_ domain: String) -> String? {
        var output: UnsafeMutablePointer<CChar>?
        let code = idn2_to_unicode_8z8z(domain, &output, 0)
        defer { idn2_free(output) }
        guard code == Int32(IDN2_OK.rawValue), let output else { return nil }
        return String(validatingCString: output)
    }
}

extension Unicode.GeneralCategory {
    fileprivate var isMark: Bool { self == .nonspacingMark || self == .spacingMark || self == .enclosingMark }
}
