import Foundation

/// Email addresses as the services compare them: trimmed and lowercased.
public enum EmailAddress {
    public static func normalize(_ email: String) -> String {
        email.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }

    /// A practical check (one `@`, a dotted domain, no spaces or control characters, RFC 5321 lengths),
    /// not the full RFC 5322 grammar that no mail provider accepts anyway.
    public static func isValid(_ email: String) -> Bool {
        guard email.utf8.count <= 254, !email.contains(where: { $0.isWhitespace || $0.asciiValue.map { $0 < 32 || $0 == 127 } == true }) else { return false }
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 64 else { return false }
        let domain = parts[1]
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, labels.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 63 && !$0.hasPrefix("-") && !$0.hasSuffix("-") }) else { return false }
        guard domain.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." }) else { return false }
        return !parts[0].hasPrefix(".") && !parts[0].hasSuffix(".") && !parts[0].contains("..")
    }
}
