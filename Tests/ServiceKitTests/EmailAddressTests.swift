import Models
import Testing

/// `EmailAddress`'s rule as a table: what is accepted and its canonical form, what is refused.
@Suite struct EmailAddressTests {
    static let accepted: [(typed: String, canonical: String, mailbox: String)] = [
        ("alice@example.com", "alice@example.com", "alice@example.com"),
        ("Alice@Example.COM", "alice@example.com", "Alice@example.com"),
        ("  bob@example.com\n", "bob@example.com", "bob@example.com"),
        ("o'brien+tag@mail.example.org", "o'brien+tag@mail.example.org", "o'brien+tag@mail.example.org"),
        ("x@privaterelay.appleid.com", "x@privaterelay.appleid.com", "x@privaterelay.appleid.com"),
        ("kate@b\u{FC}cher.de", "kate@xn--bcher-kva.de", "kate@xn--bcher-kva.de"),
        ("kate@B\u{DC}CHER.de", "kate@xn--bcher-kva.de", "kate@xn--bcher-kva.de"),
        ("kate@XN--BCHER-KVA.de", "kate@xn--bcher-kva.de", "kate@xn--bcher-kva.de"),
        ("\u{C9}mile@corp.com", "\u{E9}mile@corp.com", "\u{C9}mile@corp.com"),
        ("\u{3A3}\u{39F}\u{3A6}\u{399}\u{391}@corp.gr", "\u{3C3}\u{3BF}\u{3C6}\u{3B9}\u{3B1}@corp.gr", "\u{3A3}\u{39F}\u{3A6}\u{399}\u{391}@corp.gr"),
        ("\u{7528}\u{6237}@\u{4F8B}\u{5B50}.com", "\u{7528}\u{6237}@xn--fsqu00a.com", "\u{7528}\u{6237}@xn--fsqu00a.com"),
        (String(repeating: "a", count: 64) + "@c.com", String(repeating: "a", count: 64) + "@c.com", String(repeating: "a", count: 64) + "@c.com"),
    ]

    static let refused: [(typed: String, why: String)] = [
        ("\u{212A}ate@corp.com", "KELVIN SIGN: NFKC makes it K"),
        ("\u{FF4B}ate@corp.com", "a fullwidth letter"),
        ("kate@\u{FF43}orp.com", "a fullwidth letter in the domain"),
        ("\u{FB01}ona@corp.com", "a ligature"),
        ("kate\u{B2}@corp.com", "a superscript"),
        ("E\u{301}mile@corp.com", "a decomposed accent (NFKC composes it)"),
        ("\u{212B}sa@corp.com", "ANGSTROM SIGN"),
        ("stra\u{DF}e@corp.com", "sharp s folds to ss"),
        ("kate@stra\u{DF}e.de", "sharp s in the domain"),
        ("kate@xn--strae-oqa.de", "an A-label of sharp s"),
        ("STRA\u{1E9E}E@corp.com", "capital sharp s"),
        ("\u{3C3}\u{3BF}\u{3C6}\u{3B9}\u{3B1}\u{3C2}@corp.gr", "final sigma folds to sigma"),
        ("\u{130}smail@corp.com", "dotted capital I lowercases to two code points"),
        ("\u{13A0}@corp.com", "a Cherokee capital is its own case folding"),
        ("\u{AB70}@corp.com", "a Cherokee small letter folds to the capital"),
        ("a\u{200D}b@corp.com", "a zero-width joiner"),
        ("a\u{202E}b@corp.com", "a bidirectional override"),
        ("\u{301}a@corp.com", "a leading combining mark"),
        ("a\u{2603}@corp.com", "a symbol"),
        ("a@corp\u{3002}com", "an ideographic full stop"),
        ("kate@xn--zz.com", "an A-label that does not decode"),
        ("a b@c.com", "a space"),
        ("\"ab\"@c.com", "a quoted local part"),
        ("a<b@c.com", "an angle bracket"),
        ("a..b@c.com", "two dots"),
        (".a@c.com", "a leading dot"),
        ("a.@c.com", "a trailing dot"),
        ("a@b@c.com", "two at signs"),
        ("@c.com", "no local part"),
        ("a@", "no domain"),
        ("a@b", "one label"),
        ("a@1.2.3.4", "an all-digit top-level label"),
        ("a@-b.com", "a leading hyphen"),
        ("a@b_c.com", "an underscore in the domain"),
        ("a@b..com", "an empty label"),
        (String(repeating: "a", count: 65) + "@c.com", "a local part over 64 bytes"),
        ("a@" + String(repeating: "b", count: 64) + ".com", "a label over 63 bytes"),
        ("", "nothing"),
    ]

    @Test(arguments: accepted) func accepts(_ row: (typed: String, canonical: String, mailbox: String)) throws {
        let address = try #require(EmailAddress(row.typed), "\(row.typed)")
        // Scalar by scalar: String's `==` holds canonically equivalent text equal.
        #expect(Array(address.canonical.unicodeScalars) == Array(row.canonical.unicodeScalars), "\(row.typed) → \(address.canonical)")
        #expect(Array(address.mailbox.unicodeScalars) == Array(row.mailbox.unicodeScalars), "\(row.typed) → \(address.mailbox)")
        #expect(EmailAddress.isValid(row.typed))
        #expect(EmailAddress.normalize(row.typed) == address.canonical)
        // Both forms are addresses of their own, with the same canonical form.
        #expect(EmailAddress(address.canonical) == address && EmailAddress(address.mailbox) == address)
    }

    @Test(arguments: refused) func refuses(_ row: (typed: String, why: String)) {
        #expect(EmailAddress(row.typed) == nil, "\(row.why): \(row.typed)")
        #expect(!EmailAddress.isValid(row.typed), "\(row.why)")
    }

    /// Text that is no address is only trimmed, so it equals no canonical form and finds nothing.
    @Test func normalizingTextThatIsNoAddress() {
        #expect(Array(EmailAddress.normalize(" \u{212A}ate@corp.com ").unicodeScalars) == Array("\u{212A}ate@corp.com".unicodeScalars))
        #expect(EmailAddress("\u{212A}ate@corp.com") != EmailAddress("kate@corp.com"))
    }
}
