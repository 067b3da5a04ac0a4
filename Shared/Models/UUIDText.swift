import Foundation

/// A UUID's canonical text (8-4-4-4-12 hex digits) without Foundation's C helpers, which parse with
/// `sscanf` and format with `snprintf` (thousands of instructions each, on every request that has an
/// id in its path, its response or its request id). A UUID is handled as its two 64-bit halves.
package enum UUIDText {
    /// Writes the 36 characters into `buffer` (which holds at least 36 bytes).
    package static func write(high: UInt64, low: UInt64, uppercase: Bool, into buffer: UnsafeMutableBufferPointer<UInt8>) {
        let digits: StaticString = uppercase ? "0123456789ABCDEF" : "0123456789abcdef"
        var index = 0
        for nibble in 0..<32 {
            if nibble == 8 || nibble == 12 || nibble == 16 || nibble == 20 {
                buffer[index] = UInt8(ascii: "-")
                index += 1
            }
            let word = nibble < 16 ? high : low
            buffer[index] = digits.utf8Start[Int((word >> UInt64(60 - 4 * (nibble % 16))) & 0xF)]
            index += 1
        }
    }

    /// The halves of the canonical text: 36 characters, hex digits in either case, dashes at offsets
    /// 8, 13, 18 and 23; nil for anything else.
    package static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> (high: UInt64, low: UInt64)? {
        guard bytes.count == 36 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        var digits = 0
        for offset in 0..<36 {
            let byte = bytes[offset]
            if offset == 8 || offset == 13 || offset == 18 || offset == 23 {
                guard byte == UInt8(ascii: "-") else { return nil }
                continue
            }
            let nibble: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = byte &- UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = byte &- UInt8(ascii: "a") &+ 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = byte &- UInt8(ascii: "A") &+ 10
            default: return nil
            }
            if digits < 16 { high = high << 4 | UInt64(nibble) } else { low = low << 4 | UInt64(nibble) }
            digits += 1
        }
        return (high, low)
    }
}

extension UUID {
    /// `UUID(uuidString:)` without its cost (`UUIDText`): the same canonical text is accepted.
    public init?(parsing text: String) {
        var text = text
        guard let (high, low) = text.withUTF8({ UUIDText.parse($0) }) else { return nil }
        self.init(high: high, low: low)
    }

    public init(high: UInt64, low: UInt64) {
        self.init(
            uuid: (
                UInt8(truncatingIfNeeded: high >> 56), UInt8(truncatingIfNeeded: high >> 48), UInt8(truncatingIfNeeded: high >> 40), UInt8(truncatingIfNeeded: high >> 32),
                UInt8(truncatingIfNeeded: high >> 24), UInt8(truncatingIfNeeded: high >> 16), UInt8(truncatingIfNeeded: high >> 8), UInt8(truncatingIfNeeded: high),
                UInt8(truncatingIfNeeded: low >> 56), UInt8(truncatingIfNeeded: low >> 48), UInt8(truncatingIfNeeded: low >> 40), UInt8(truncatingIfNeeded: low >> 32),
                UInt8(truncatingIfNeeded: low >> 24), UInt8(truncatingIfNeeded: low >> 16), UInt8(truncatingIfNeeded: low >> 8), UInt8(truncatingIfNeeded: low)
            ))
    }

    /// The first and last 8 bytes, big-endian.
    package var halves: (high: UInt64, low: UInt64) {
        withUnsafeBytes(of: uuid) { raw in
            (
                UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            )
        }
    }
}
