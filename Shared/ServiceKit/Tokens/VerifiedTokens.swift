import Foundation
import Models
import ServiceKitHTTP
import Synchronization

/// Tokens that passed every check recently, by their exact text. An entry lives a minute at most, so
/// a key the issuer withdraws stops being honoured within a minute even for a token seen before; the
/// table is bounded (cleared when full) so a flood of distinct tokens cannot grow it.
final class VerifiedTokens: Sendable {
    static let lifetime: Duration = .seconds(60)
    static let capacity = 10_000

    private struct Entry {
        var caller: Caller
        var expiresAt: Date
        var until: ContinuousClock.Instant
    }

    /// A token as a key: hashed on its last 32 bytes (part of its signature) and compared byte for
    /// byte, not as Unicode text, under which a token with a letter swapped for an equivalent one
    /// (K and the Kelvin sign) would match. Hashing all of a 600-byte token was most of a lookup.
    /// Only verified tokens are stored, so a forged token that hashes alike costs a comparison but
    /// never matches.
    private struct Key: Hashable {
        let token: String

        func hash(into hasher: inout Hasher) {
            let hashed: Void? = token.utf8.withContiguousStorageIfAvailable { bytes in
                hasher.combine(bytes: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes.suffix(32))))
            }
            if hashed == nil {
                // A bridged or foreign string: the same bytes, copied.
                Array(token.utf8.suffix(32)).withUnsafeBytes { hasher.combine(bytes: $0) }
            }
        }

        static func == (a: Key, b: Key) -> Bool {
            let compared = a.token.utf8.withContiguousStorageIfAvailable { x in
                b.token.utf8.withContiguousStorageIfAvailable { y in
                    x.count == y.count && (x.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0)
                }
            }
            if let compared = compared ?? nil { return compared }
            return a.token.utf8.elementsEqual(b.token.utf8)
        }
    }

    private let entries = Mutex<[Key: Entry]>([:])

    func lookup(_ token: String) -> (Caller, Date)? {
        let now = ContinuousClock.now
        let key = Key(token: token)
        return entries.withLock { entries in
            guard let entry = entries[key] else { return nil }
            guard entry.until > now else {
                entries[key] = nil
                return nil
            }
            return (entry.caller, entry.expiresAt)
        }
    }

    func store(_ token: String, caller: Caller, expiresAt: Date) {
        let now = ContinuousClock.now
        entries.withLock { entries in
            if entries.count >= Self.capacity {
                entries = entries.filter { $0.value.until > now }
                if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[Key(token: token)] = Entry(caller: caller, expiresAt: expiresAt, until: now + Self.lifetime)
        }
    }
}
