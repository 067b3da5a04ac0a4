import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import Synchronization
import Testing
import TestSupport

@Suite struct ChangeFeedTests {
    /// Keys come in commit order and not from a transaction rolled back; the feed vouches once its
    /// own ping has come back through the same queue; a lost connection stops the vouching and calls
    /// `gap`, and the feed listens again on a new one (another `gap`) and vouches again.
    @Test(.timeLimit(.minutes(1))) func keysArriveInOrderAndALostConnectionStopsTheVouching() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let config = database.config(for: "social")
        let channel = TestEnvironment.uniqueName("feed")
        let seen = Mutex<[String]>([])
        let gaps = Atomic<Int>(0)
        try await withClient(config) { client in
            let logger = TestEnvironment.logger
            let feed = try ChangeFeed(
                channel: channel, database: config, pool: client, heartbeat: .milliseconds(500), logger: logger,
                changed: { key in seen.withLock { $0.append(key) } }, gap: { gaps.add(1, ordering: .relaxed) })
            #expect(!feed.vouches, "not before it listens")
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await feed.run() }
                defer { group.cancelAll() }
                try await waitUntil { feed.vouches }
                #expect(gaps.load(ordering: .relaxed) >= 1, "once listening: what was kept before may have missed changes")
                try await client.query("SELECT pg_notify(\(channel), 'one')", logger: logger)
                try await client.withConnection { connection in
                    try await connection.query("BEGIN", logger: logger)
                    try await connection.query("SELECT pg_notify(\(channel), 'rolled back')", logger: logger)
                    try await connection.query("ROLLBACK", logger: logger)
                }
                try await client.query("SELECT pg_notify(\(channel), 'ping of another feed 3')", logger: logger)
                try await client.query("SELECT pg_notify(\(channel), 'two')", logger: logger)
                try await waitUntil { seen.withLock { $0.count } >= 2 }
                #expect(seen.withLock { $0 } == ["one", "two"], "in order; nothing rolled back; no ping")

                let before = gaps.load(ordering: .relaxed)
                try await withClient(try database.adminConfig()) { admin in
                    try await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = \("feed \(channel)")", logger: logger)
                }
                // Not vouching from the loss until the new connection's first ping is back (at least a
                // heartbeat: the feed waits one before it connects again).
                try await waitUntil { !feed.vouches }
                // One `gap` when the connection is lost, one when a new one listens.
                try await waitUntil { gaps.load(ordering: .relaxed) >= before + 2 }
                try await waitUntil { feed.vouches }
                try await client.query("SELECT pg_notify(\(channel), 'three')", logger: logger)
                try await waitUntil { seen.withLock { $0.last } == "three" }
            }
        }
    }

    /// A feed that falls behind (here, a key whose handling stalls) stops vouching within two
    /// heartbeats, though its connection is fine, and vouches again once it has caught up.
    @Test(.timeLimit(.minutes(1))) func aFeedThatFallsBehindStopsVouching() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let config = database.config(for: "social")
        let channel = TestEnvironment.uniqueName("feed")
        let stalled = Mutex(false)
        try await withClient(config) { client in
            let logger = TestEnvironment.logger
            let feed = try ChangeFeed(
                channel: channel, database: config, pool: client, heartbeat: .milliseconds(300), logger: logger,
                changed: { key in
                    guard key == "stall" else { return }
                    stalled.withLock { $0 = true }
                    while stalled.withLock({ $0 }) { usleep(10_000) }
                }, gap: {})
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await feed.run() }
                defer {
                    stalled.withLock { $0 = false }
                    group.cancelAll()
                }
                try await waitUntil { feed.vouches }
                try await client.query("SELECT pg_notify(\(channel), 'stall')", logger: logger)
                try await waitUntil { stalled.withLock { $0 } }
                try await waitUntil(.seconds(5)) { !feed.vouches }
                stalled.withLock { $0 = false }
                try await waitUntil { feed.vouches }
            }
        }
    }
}
