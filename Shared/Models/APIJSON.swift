import Foundation

/// The API's JSON, for response bodies and event payloads alike: what `JSONEncoder.api` writes (keys
/// sorted by their UTF-8 bytes, slashes unescaped, RFC 3339 dates, `1.0` as `1`), with its UUIDs
/// in lowercase, as RFC 9562 asks of output (Foundation writes them uppercase).
public enum APIJSON {
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        try encode(value, keeping: nil)
    }

    /// `encode`, with `verbatim` left as it is wherever it is a whole string value: the caller's
    /// own text that may be shaped as an uppercase UUID (an `X-Request-ID` an app made with
    /// `UUID().uuidString`), which the response's header echoes unchanged.
    public static func encode<T: Encodable>(_ value: T, keeping verbatim: String?) throws -> [UInt8] {
        var bytes = Array(try JSONEncoder.api.encode(value))
        lowercaseUUIDs(in: &bytes, keeping: verbatim)
        return bytes
    }

    /// Every string that is exactly an uppercase UUID (`"8-4-4-4-12"` hex digits), lowercased, but
    /// for `verbatim`. Foundation writes a `UUID` no other way; a string value of that shape is taken
    /// for one. A string opens after `[`, `{`, `,` or `:` in the compact JSON Foundation writes; a
    /// quote inside one is escaped, so text in a longer string is never taken for one.
    static func lowercaseUUIDs(in bytes: inout [UInt8], keeping verbatim: String? = nil) {
        let quote = UInt8(ascii: "\""), dash = UInt8(ascii: "-")
        let kept = verbatim.map { Array($0.utf8) }.flatMap { $0.count == 36 ? $0 : nil }
        func opensString(after byte: UInt8) -> Bool { byte == UInt8(ascii: "[") || byte == UInt8(ascii: "{") || byte == UInt8(ascii: ",") || byte == UInt8(ascii: ":") }
        func isHex(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte) }
        var index = 0
        while index + 37 < bytes.count {
            guard bytes[index] == quote, index == 0 || opensString(after: bytes[index - 1]), bytes[index + 37] == quote, bytes[index + 9] == dash, bytes[index + 14] == dash, bytes[index + 19] == dash,
                bytes[index + 24] == dash,
                (1...36).allSatisfy({ [9, 14, 19, 24].contains($0) || isHex(bytes[index + $0]) })
            else {
                index += 1
                continue
            }
            if let kept, bytes[(index + 1)...(index + 36)].elementsEqual(kept) {
                index += 38
                continue
            }
            for offset in 1...36 where (0x41...0x46).contains(bytes[index + offset]) { bytes[index + offset] += 0x20 }
            index += 38
        }
    }
}
