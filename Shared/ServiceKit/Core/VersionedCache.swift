import Synchronization

/// Values kept in memory with the version of the data they were made from: a value is given back
/// only for that same version, so whoever changes the data only has to change its version (in the
/// same transaction, where every replica reads it), and no replica can serve what another has made
/// stale.
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

    /// The value kept for `key` if it was made from `version`.
    public func value(for key: Key, version: Int64) -> Value? {
        generations.withLock { generations in
            if let entry = generations.newer[key] { return entry.version == version ? entry.value : nil }
            guard let entry = generations.older.removeValue(forKey: key), entry.version == version else { return nil }
            generations.put(entry, for: key, capacity: capacity)
            return entry.value
        }
    }

    /// Keeps `value`, made from `version`, in place of what `key` had.
    public func store(_ value: Value, for key: Key, version: Int64) {
        generations.withLock { generations in
            generations.older.removeValue(forKey: key)
            generations.put(Entry(version: version, value: value), for: key, capacity: capacity)
        }
    }

    /// The value kept for `key` at `version`, or the one `make` makes, kept for it. Without a
    /// version (the data has none yet) the value is made and not kept.
    public func value(for key: Key, version: Int64?, orMake make: () async throws -> Value) async rethrows -> Value {
        guard let version else { return try await make() }
        if let kept = value(for: key, version: version) { return kept }
        let made = try await make()
        store(made, for: key, version: version)
        return made
    }

    /// How many values are kept (both generations).
    public var count: Int { generations.withLock { $0.newer.count + $0.older.count } }
}
