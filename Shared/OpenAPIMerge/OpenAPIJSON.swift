import Models

/// Writes a `JSONValue` with its object keys sorted (by code point, as Python's `sort_keys`), so one
/// document is always the same bytes. `pretty` indents by two spaces as Python's
/// `json.dumps(indent=2, sort_keys=True, ensure_ascii=False)` does, which is how `docs/openapi.json`
/// is written; the compact form has no spaces at all.
public enum OpenAPIJSON {
    public static func encode(_ value: JSONValue, pretty: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 * 1024)
        write(value, into: &out, pretty: pretty, depth: 0)
        return out
    }

    public static func string(_ value: JSONValue, pretty: Bool = false) -> String {
        String(decoding: encode(value, pretty: pretty), as: UTF8.self)
    }

    static func write(_ value: JSONValue, into out: inout [UInt8], pretty: Bool, depth: Int) {
        switch value {
        case .null:
            out.append(contentsOf: "null".utf8)
        case .bool(let flag):
            out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let number):
            out.append(contentsOf: text(of: number).utf8)
        case .string(let string):
            writeString(string, into: &out)
        case .array(let items):
            guard !items.isEmpty else { return out.append(contentsOf: "[]".utf8) }
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(into: &out, pretty: pretty, depth: depth + 1)
                write(item, into: &out, pretty: pretty, depth: depth + 1)
            }
            newline(into: &out, pretty: pretty, depth: depth)
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            guard !members.isEmpty else { return out.append(contentsOf: "{}".utf8) }
            out.append(UInt8(ascii: "{"))
            for (index, key) in sortedKeys(members).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(into: &out, pretty: pretty, depth: depth + 1)
                writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                if pretty { out.append(UInt8(ascii: " ")) }
                write(members[key]!, into: &out, pretty: pretty, depth: depth + 1)
            }
            newline(into: &out, pretty: pretty, depth: depth)
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Keys in code-point order.
    static func sortedKeys(_ members: [String: JSONValue]) -> [String] {
        members.keys.sorted { $0.unicodeScalars.lexicographicallyPrecedes($1.unicodeScalars) }
    }

    /// Whole numbers as integers (YAML's `1` and `1.0` are one number here); others in Swift's
    /// shortest form, which JSON reads back exactly. JSON has no infinity or NaN: those are null.
    static func text(of number: Double) -> String {
        guard number.isFinite else { return "null" }
        if number.rounded() == number, abs(number) < 1e15 { return String(Int64(number)) }
        return "\(number)"
    }

    private static func newline(into out: inout [UInt8], pretty: Bool, depth: Int) {
        guard pretty else { return }
        out.append(UInt8(ascii: "\n"))
        out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
    }

    /// Quotes, backslashes and control characters escaped; everything else as its UTF-8.
    private static func writeString(_ string: String, into out: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0C: out.append(contentsOf: #"\f"#.utf8)
            case 0..<0x20: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
