import ServiceKitCore
/// Splits an SQL script into statements. PostgresNIO sends every query through the extended protocol,
/// which takes one statement at a time, so a migration file is run statement by statement (inside one
/// transaction). Semicolons inside quotes, dollar-quoted bodies and comments do not split.
package enum SQLScript {
    package static func statements(_ script: String) -> [String] {
        let chars = Array(script.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var index = 0
        func peek(_ offset: Int) -> Unicode.Scalar? { index + offset < chars.count ? chars[index + offset] : nil }
        func flush() {
            let text = String(current).trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty, !isOnlyComments(text) { statements.append(text) }
            current = .init()
        }
        while index < chars.count {
            let c = chars[index]
            if c == "-", peek(1) == "-" {
                while index < chars.count, chars[index] != "\n" { current.append(chars[index]); index += 1 }
                continue
            }
            if c == "/", peek(1) == "*" {
                while index < chars.count, !(chars[index] == "*" && peek(1) == "/") { current.append(chars[index]); index += 1 }
                if index < chars.count { current.append("*"); current.append("/"); index += 2 }
                continue
            }
            if c == "'" || c == "\"" {
                current.append(c); index += 1
                while index < chars.count {
                    current.append(chars[index])
                    if chars[index] == c {
                        if peek(1) == c { index += 1; current.append(chars[index]) } else { index += 1; break }
                    }
                    index += 1
                }
                continue
            }
            if c == "$", let tag = dollarTag(chars, at: index) {
                current.append(contentsOf: tag.unicodeScalars); index += tag.unicodeScalars.count
                while index < chars.count {
                    if chars[index] == "$", dollarTag(chars, at: index) == tag {
                        current.append(contentsOf: tag.unicodeScalars); index += tag.unicodeScalars.count
                        break
                    }
                    current.append(chars[index]); index += 1
                }
                continue
            }
            if c == ";" {
                flush(); index += 1
                continue
            }
            current.append(c); index += 1
        }
        flush()
        return statements
    }

    /// `$$` or `$tag$` starting at `index`, if there is one.
    private static func dollarTag(_ chars: [Unicode.Scalar], at index: Int) -> String? {
        var end = index + 1
        while end < chars.count, chars[end] == "_" || chars[end].properties.isAlphabetic || (end > index + 1 && ("0"..."9").contains(chars[end])) {
            end += 1
        }
        guard end < chars.count, chars[end] == "$" else { return nil }
        return String(String.UnicodeScalarView(chars[index...end]))
    }

    private static func isOnlyComments(_ text: String) -> Bool {
        text.split(separator: "\n").allSatisfy { $0.trimmingCharacters(in: .whitespaces).hasPrefix("--") || $0.trimmingCharacters(in: .whitespaces).isEmpty }
    }
}
