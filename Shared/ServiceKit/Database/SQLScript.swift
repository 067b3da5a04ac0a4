import ServiceKitCore
/// Splits an SQL script into statements. PostgresNIO sends every query through the extended protocol,
/// which takes one statement at a time, so a migration file is run statement by statement (inside one
/// transaction). Semicolons inside quotes, dollar-quoted bodies and comments do not split.
package enum SQLScript {
    /// Scans the script's UTF-8 bytes: every delimiter is ASCII, and no byte of a multi-byte
    /// character is, so the statements are cut where a scan of characters would cut them, far
    /// faster (a migration may hold a data set of megabytes).
    package static func statements(_ script: String) -> [String] {
        let bytes = Array(script.utf8)
        let count = bytes.count
        var statements: [String] = []
        var start = 0
        var index = 0
        func at(_ position: Int, _ ascii: Unicode.Scalar) -> Bool { position < count && bytes[position] == UInt8(ascii: ascii) }
        func flush(upTo end: Int) {
            let text = String(decoding: bytes[start..<end], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty, !isOnlyComments(text) { statements.append(text) }
        }
        while index < count {
            let byte = bytes[index]
            if at(index, "-"), at(index + 1, "-") {
                while index < count, !at(index, "\n") { index += 1 }
            } else if at(index, "/"), at(index + 1, "*") {
                index += 2
                while index < count, !(at(index, "*") && at(index + 1, "/")) { index += 1 }
                index = min(index + 2, count)
            } else if at(index, "'") || at(index, "\"") {
                index += 1
                while index < count {
                    if bytes[index] == byte {
                        // A doubled quote is one quote inside the string.
                        if index + 1 < count, bytes[index + 1] == byte { index += 2; continue }
                        index += 1
                        break
                    }
                    index += 1
                }
            } else if at(index, "$"), let length = dollarTagLength(bytes, at: index) {
                let tag = bytes[index..<index + length]
                index += length
                while index < count {
                    if at(index, "$"), index + length <= count, bytes[index..<index + length].elementsEqual(tag) {
                        index += length
                        break
                    }
                    index += 1
                }
            } else if at(index, ";") {
                flush(upTo: index)
                index += 1
                start = index
            } else {
                index += 1
            }
        }
        flush(upTo: count)
        return statements
    }

    /// The length of `$$` or `$tag$` starting at `index`, if there is one. A tag is letters (any
    /// byte of a non-ASCII character counts, as PostgreSQL counts it), underscores and, after the
    /// first, digits.
    private static func dollarTagLength(_ bytes: [UInt8], at index: Int) -> Int? {
        var end = index + 1
        while end < bytes.count {
            let byte = bytes[end]
            let letter = (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || byte >= 0x80
            let digit = byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
            guard letter || byte == UInt8(ascii: "_") || (digit && end > index + 1) else { break }
            end += 1
        }
        guard end < bytes.count, bytes[end] == UInt8(ascii: "$") else { return nil }
        return end - index + 1
    }

    private static func isOnlyComments(_ text: String) -> Bool {
        text.split(separator: "\n").allSatisfy { $0.trimmingCharacters(in: .whitespaces).hasPrefix("--") || $0.trimmingCharacters(in: .whitespaces).isEmpty }
    }
}
