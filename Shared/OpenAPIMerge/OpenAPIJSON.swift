import Models

/// A `JSONValue` as the API's JSON (`APIJSON`: keys sorted by code point, whole numbers without a
/// fraction), so one document is always the same bytes. `pretty` lays those bytes out with two
/// spaces of indent, `"key": value`, as `docs/openapi.json` is written.
public enum OpenAPIJSON {
    public static func encode(_ value: JSONValue, pretty: Bool = false) throws -> [UInt8] {
        let compact = try APIJSON.encode(value)
        return pretty ? indented(compact) : compact
    }

    public static func string(_ value: JSONValue, pretty: Bool = false) throws -> String {
        String(decoding: try encode(value, pretty: pretty), as: UTF8.self)
    }

    /// As `docs/openapi.json` holds a document: indented, with a final newline.
    public static func snapshot(_ value: JSONValue) throws -> [UInt8] {
        try encode(value, pretty: true) + [UInt8(ascii: "\n")]
    }

    /// Compact JSON laid out with a line per member and element; an empty object or array stays `{}`
    /// or `[]`. Only the bytes outside strings are looked at.
    static func indented(_ compact: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(compact.count * 2)
        var depth = 0
        var inString = false
        var escaped = false
        func newline() {
            out.append(UInt8(ascii: "\n"))
            out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
        }
        var index = 0
        while index < compact.count {
            let byte = compact[index]
            index += 1
            if inString {
                out.append(byte)
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""):
                inString = true
                out.append(byte)
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                out.append(byte)
                if index < compact.count, compact[index] == UInt8(ascii: "}") || compact[index] == UInt8(ascii: "]") {
                    out.append(compact[index])
                    index += 1
                } else {
                    depth += 1
                    newline()
                }
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                newline()
                out.append(byte)
            case UInt8(ascii: ","):
                out.append(byte)
                newline()
            case UInt8(ascii: ":"):
                out.append(contentsOf: [UInt8(ascii: ":"), UInt8(ascii: " ")])
            default:
                out.append(byte)
            }
        }
        return out
    }
}
