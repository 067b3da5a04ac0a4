import Models
import ServiceKitCore
import Synchronization

/// Ids for requests that arrive without one, shaped as lowercase version-4 UUIDs.
///
/// Foundation's `UUID()` opens, reads and closes `/dev/urandom` for every id on Linux: three system
/// calls and a path lookup, 2–3% of the CPU of a request through the gateway (measured with `perf`).
/// A request id must be unique, not secret: the high half is drawn once per process; the low half
/// is the variant's two bits over a per-process counter (starting at a random point) passed through
/// SplitMix64's finalizer taken modulo 2^62, still a bijection there, so that ids do not look
/// sequential and no two of 2^62 in a row are alike.
package enum RequestIDs {
    private static let high = UInt64.random(in: .min ... .max) & 0xFFFF_FFFF_FFFF_0FFF | 0x0000_0000_0000_4000
    private static let counter = Atomic<UInt64>(UInt64.random(in: .min ... .max))
    private static let low62: UInt64 = (1 << 62) - 1

    /// The caller's `X-Request-ID` when it is up to 128 visible ASCII characters; a new id otherwise,
    /// so that logs stay clean.
    package static func id(from header: String?) -> String {
        if let header, !header.isEmpty, header.utf8.count <= 128, header.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) {
            return header
        }
        return next()
    }

    package static func next() -> String {
        format(high: high, low: 0x8000_0000_0000_0000 | scramble(counter.add(1, ordering: .relaxed).newValue))
    }

    /// SplitMix64's output function on the low 62 bits: each step (xor with a right shift, product
    /// with an odd number) is invertible modulo 2^62, so distinct inputs give distinct outputs.
    static func scramble(_ value: UInt64) -> UInt64 {
        var z = value & low62
        z = ((z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9) & low62
        z = ((z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB) & low62
        return z ^ (z >> 31)
    }

    /// Lowercase hex in groups of 8, 4, 4, 4 and 12 digits, high half first.
    static func format(high: UInt64, low: UInt64) -> String {
        String(unsafeUninitializedCapacity: 36) { buffer in
            UUIDText.write(high: high, low: low, uppercase: false, into: buffer)
            return 36
        }
    }
}
