import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitRedis

/// Another service as its events reach the service under test: its outbox in a database of its own,
/// written in transactions by the kit's `EventOutbox`, moved to the stream the service reads by the
/// kit's `OutboxRelay`, which numbers each envelope as it sends it. Each event is written by a
/// process whose clock a test chooses, so that a skewed one can be shown to decide nothing.
public struct RelayedProducer: Sendable {
    public let name: String
    let client: PostgresClient

    /// Runs `body` with a producer named `name` (its schema and its envelopes' `producer`) relaying
    /// to `stream` while `body` runs.
    public static func run(_ name: String, stream: String, _ body: @Sendable (RelayedProducer) async throws -> Void) async throws {
        let database = try await TestDatabase.create(services: [name])
        let client = PostgresClient(database: database.config(for: name, poolSize: 2), logger: TestEnvironment.poolLogger)
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        let relay = OutboxRelay(
            client: client, redis: redis,
            config: EventBusConfig(stream: stream, group: name, consumerName: "\(name)-relay", relayPollInterval: .milliseconds(200)),
            schema: name, metrics: EventBusMetrics(registry: MetricsRegistry()), logger: TestEnvironment.logger)
        let running = Task { await client.run() }
        var relaying: Task<Void, any Error>?
        let result: Result<Void, any Error>
        do {
            try await MigrationRunner(client: client, schema: name, migrations: EventBusSchema.migrations, logger: TestEnvironment.logger).run()
            relaying = Task { try await relay.run() }
            try await body(RelayedProducer(name: name, client: client))
            result = .success(())
        } catch {
            result = .failure(error)
        }
        relaying?.cancel()
        _ = await relaying?.result
        await redis.close()
        running.cancel()
        try result.get()
    }

    /// Commits one event written by a process whose clock is `skew` off, and returns it as written
    /// (without the number the relay gives it).
    @discardableResult
    public func emit<Payload: EventPayload>(_ payload: Payload, userID: UUID?, clockSkew skew: TimeInterval = 0) async throws -> EventEnvelope {
        let outbox = EventOutbox(producer: name, now: { Date() + skew })
        return try await client.transaction(logger: TestEnvironment.logger) { connection in
            try await outbox.write(payload, userID: userID, on: connection, logger: TestEnvironment.logger)
        }
    }
}
