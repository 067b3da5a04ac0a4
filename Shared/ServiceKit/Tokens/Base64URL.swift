import Foundation

/// base64url (RFC 4648 §5) without padding, through Foundation's base64 with the alphabet swapped
/// byte by byte: this runs on every request that carries a token, where string replacing (through
/// NSString) would cost more than the signature check.
public enum Base64URL {
    /// The bytes `text` spells. Plain base64 (`+`, `/`) and `=` padding are taken too; where the
    /// text itself counts, check `isCanonical`.
    public static func decode(_ text: some StringProtocol) -> Data? {
        var bytes = Array(text.utf8)
        while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
        // A lone 6-bit group is not a byte.
        guard bytes.count % 4 != 1 else { return nil }
        for index in bytes.indices {
            switch bytes[index] {
            case UInt8(ascii: "-"): bytes[index] = UInt8(ascii: "+")
            case UInt8(ascii: "_"): bytes[index] = UInt8(ascii: "/")
            default: break
            }
        }
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "="), count: (4 - bytes.count % 4) % 4))
        return Data(base64Encoded: Data(bytes))
    }

    public static func encode(_ data: some DataProtocol) -> String {
        var bytes = Array(Data(data).base64EncodedData())
        while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
        for index in bytes.indices {
            switch bytes[index] {
            case UInt8(ascii: "+"): bytes[index] = UInt8(ascii: "-")
            case UInt8(ascii: "/"): bytes[index] = UInt8(ascii: "_")
            default: break
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether `text` is the one unpadded base64url spelling of what it decodes to. `decode` also
    /// takes `+`, `/` and `=` padding, and ignores set bits after the last byte, so one value has
    /// several spellings; where the text itself is recorded (a spent token), only this one may be
    /// accepted.
    public static func isCanonical(_ text: some StringProtocol) -> Bool {
        guard let data = decode(text) else { return false }
        return encode(data).utf8.elementsEqual(text.utf8)
    }
}
