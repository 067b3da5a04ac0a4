import Synchronization

/// Values kept in memory with the version of the data they were made from: a value is given back
/// only for that same version, so whoever changes the data only has to change its version (in the
/// same transaction, where every replica reads it), and no replica can serve what another has made
/// stale.
///
/// A process told of changes as they commit (`ChangeFeed`) can also `forget` a key's value and, while
/// the feed vouches that nothing it missed has changed, serve the `latest` value without reading a
/// version at all. `Epoch` keeps a value read before its key's forgetting from being kept after it.
///
/// At most `capacity` values in each of two generations: when the newer fills up it becomes the
/// older and the oldest values go; a value asked for from the older moves back to the newer. What
/// is asked for often stays; what is not is gone within two fillings.
public final class VersionedCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry {
        var version: Int64
        var value: Value
    }

    private struct Generations {
        var newer: [Key: Entry] = [:]
        var older: [Key: Entry] = [:]
        var allForgotten = 0
        /// Forgettings of single keys, counted per stripe of keys (by hash): a key's forgetting
        /// refuses the values in flight for its stripe, not for every key.
        var stripes = [Int](repeating: 0, count: 256)

        func epoch(for key: Key) -> Epoch {
            Epoch(all: allForgotten, stripe: stripes[VersionedCache.stripe(of: key)])
        }

        mutating func take(_ key: Key, capacity: Int) -> Entry? {
            if let entry = newer[key] { return entry }
            guard let entry = older.removeValue(forKey: key) else { return nil }
            put(entry, for: key, capacity: capacity)
            return entry
        }

        mutating func put(_ entry: Entry, for key: Key, capacity: Int) {
            if newer.count >= capacity, newer[key] == nil {
                older = newer
                newer = [:]
            }
            newer[key] = entry
        }
    }

    public let capacity: Int
    private let generations = Mutex(Generations())

    public init(capacity: Int) {
        precondition(capacity > 0, "a cache holds at least one value")
        self.capacity = capacity
    }

    /// Where forgetting stands for a key: taken before reading the data its value is made from, it
    /// keeps that value out when the key (or one that shares its stripe, or everything) was forgotten
    /// meanwhile: the data may have changed after the read.
    public struct Epoch: Equatable, Sendable {
        fileprivate let all: Int
        fileprivate let stripe: Int
    }

    public func epoch(for key: Key) -> Epoch { generations.withLock { $0.epoch(for: key) } }

    fileprivate static func stripe(of key: Key) -> Int { Int(UInt(bitPattern: key.hashValue) % 256) }

    /// The value kept for `key` if it was made from `version`.
    public func value(for key: Key, version: Int64) -> Value? {
        generations.withLock { generations in
            guard let entry = generations.take(key, capacity: capacity), entry.version == version else { return nil }
            return entry.value
        }
    }

    /// The value kept for `key`, whatever version it was made from: only for a caller that knows
    /// every change since has been forgotten (a vouching `ChangeFeed`).
    public func latest(for key: Key) -> Value? {
        generations.withLock { $0.take(key, capacity: capacity)?.value }
    }

    /// Keeps `value`, made from `version`, in place of what `key` had; not when anything has been
    /// forgotten since `epoch`, taken before the data was read.
    public func store(_ value: Value, for key: Key, version: Int64, unlessForgottenSince epoch: Epoch? = nil) {
        generations.withLock { generations in
            if let epoch, epoch != generations.epoch(for: key) { return }
            generations.older.removeValue(forKey: key)
            generations.put(Entry(version: version, value: value), for: key, capacity: capacity)
        }
    }

    /// The value kept for `key` at `version`, or the one `make` makes, kept for it unless something
    /// was forgotten since `epoch`. Without a version (the data has none yet) the value is made and
    /// not kept.
    public func value(
        for key: Key, version: Int64?, unlessForgottenSince epoch: Epoch? = nil, orMake make: () async throws -> Value
    ) async rethrows -> Value {
        guard let version else { return try await make() }
        if let kept = value(for: key, version: version) { return kept }
        let made = try await make()
        store(made, for: key, version: version, unlessForgottenSince: epoch)
        return made
    }

    /// Drops the value kept for `key`: its data has changed.
    public func forget(_ key: Key) {
        generations.withLock { generations in
            generations.stripes[Self.stripe(of: key)] &+= 1
            generations.newer.removeValue(forKey: key)
            generations.older.removeValue(forKey: key)
        }
    }

    /// Drops every value: what changed is not known.
    package func forgetAll() {
        generations.withLock { generations in
            generations.allForgotten &+= 1
            generations.newer = [:]
            generations.older = [:]
        }
    }

    /// How many values are kept (both generations).
    public var count: Int { generations.withLock { $0.newer.count + $0.older.count } }
}
