import Logging
import PostgresNIO
import ServiceKitDatabase
import ServiceLifecycle

/// Deletes the kept answers of keys older than a day (`IdempotencyMiddleware`), which no retry
/// is answered with any more: they may hold what a user wrote, and are not kept longer than they
/// serve, whether or not requests come. A thousand rows a statement, so a large backlog goes
/// without one long one. Every replica may run it; the deletes skip rows another holds.
package struct IdempotencyJanitor: Service {
    let postgres: PostgresClient
    let logger: Logger
    var interval: Duration = .seconds(600)

    package init(postgres: PostgresClient, logger: Logger, interval: Duration = .seconds(600)) {
        self.postgres = postgres
        self.logger = logger
        self.interval = interval
    }

    static let batch = 1_000

    package func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                // A backlog (passes that failed while PostgreSQL was away) goes batch by batch, and
                // no further once shutdown begins: the services stopped after this one wait for it.
                while try await deleteExpired() == Self.batch, !Task.isCancelled, !Task.isShuttingDownGracefully {}
            } catch {
                logger.warning("idempotency key cleanup failed; will retry", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }

    /// One batch; how many rows went.
    package func deleteExpired() async throws -> Int {
        try await postgres.checkedQuery(
            """
            WITH gone AS (
                DELETE FROM idempotency_keys WHERE ctid IN (
                    SELECT ctid FROM idempotency_keys WHERE created_at < now() - interval '24 hours' LIMIT \(Self.batch) FOR UPDATE SKIP LOCKED)
                RETURNING 1)
            SELECT count(*)::int FROM gone
            """, decoding: Int.self, logger: logger
        ).first ?? 0
    }
}
