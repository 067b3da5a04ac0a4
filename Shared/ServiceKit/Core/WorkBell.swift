import Synchronization

/// Wakes this process's background workers (the outbox relay, the mail sender) when a transaction
/// that gave them work has committed, and runs what else must follow the commit in this process
/// (`runAfterCommit`: forgetting what the commit made stale in memory). It stands in for the `NOTIFY` the outbox triggers used to send:
/// PostgreSQL takes one database-wide lock per notifying commit and holds it through the commit's
/// WAL flush, so every event-writing transaction of every service queued behind every other (64
/// clients inserting one row each: 8,170 commits/s without `NOTIFY`, 3,750 with), and the relay
/// process read a notification per commit. The worker that moves the rows runs in the process that
/// wrote them, so it can be told in memory; its poll stays the net for rows written elsewhere (an
/// administrator's command, a replica that stopped before relaying).
public enum WorkBell {
    /// The bells to ring when the transaction this task runs in commits.
    @TaskLocal static var pending: PendingRings?

    private static let listeners = Mutex<[String: [Int: AsyncStream<Void>.Continuation]]>([:])
    private static let nextListener = Atomic<Int>(0)

    /// Rings `name` once the current `PostgresClient.transaction` commits, and not at all if it rolls
    /// back. Outside one (the caller commits on its own) nothing is rung: the worker's poll finds the rows.
    public static func ringAfterCommit(_ name: String) {
        pending?.add(name)
    }

    /// Runs `action` once the current `PostgresClient.transaction` commits, and not at all if it rolls
    /// back; outside one, now (call it after the write). For what a commit makes stale in this
    /// process's memory, which must be dropped before the request that wrote answers.
    public static func runAfterCommit(_ action: @escaping @Sendable () -> Void) {
        if let pending { pending.add(action) } else { action() }
    }

    /// Whether this task runs inside a `PostgresClient.transaction`: what it reads there may be its
    /// own writes, not committed yet, and must not be kept for others.
    public static var inTransaction: Bool { pending != nil }

    /// Wakes every worker waiting on `name` now.
    package static func ring(_ name: String) {
        for listener in listeners.withLock({ Array(($0[name] ?? [:]).values) }) { listener.yield() }
    }

    /// Each ring of `name` from now on, rings that come while one is pending merged into it.
    package static func wakes(_ name: String) -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let id = nextListener.wrappingAdd(1, ordering: .relaxed).oldValue
        listeners.withLock { $0[name, default: [:]][id] = continuation }
        continuation.onTermination = { _ in listeners.withLock { _ = $0[name]?.removeValue(forKey: id) } }
        return stream
    }

    /// Runs `body` as a transaction's scope: bells asked for inside it ring when it returns.
    package static func afterCommit<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        let rings = PendingRings()
        let result = try await $pending.withValue(rings) { try await body() }
        for action in rings.actions { action() }
        for name in rings.names { ring(name) }
        return result
    }

    final class PendingRings: Sendable {
        private let collected = Mutex<Set<String>>([])
        private let collectedActions = Mutex<[@Sendable () -> Void]>([])
        func add(_ name: String) { _ = collected.withLock { $0.insert(name) } }
        func add(_ action: @escaping @Sendable () -> Void) { collectedActions.withLock { $0.append(action) } }
        var names: Set<String> { collected.withLock { $0 } }
        var actions: [@Sendable () -> Void] { collectedActions.withLock { $0 } }
    }
}
