import Logging
import PostgresNIO
import ServiceKitCore
import ServiceLifecycle
import Synchronization

/// Knows, within a couple of probe intervals, whether PostgreSQL can be reached, so that requests
/// are refused with 503 at once during an outage. Without it they would wait in PostgresNIO's pool,
/// which holds new requests for up to 60 s while it retries its connections before it fails them.
///
/// It probes with `SELECT 1` on a connection of its own (not the pool's: a pool request would wait
/// in that same queue), each probe bounded by two seconds (a query on a connection whose server was
/// stopped can hang, so a probe that runs over is abandoned and its connection replaced); two
/// failures in a row mark the database unreachable, one success marks it reachable again.
package final class DatabaseWatch: Service, Sendable {
    private let configuration: PostgresConnection.Configuration
    private let interval: Duration
    private let logger: Logger
    private let failures = Atomic<Int>(0)

    package init(database config: DatabaseConfig, interval: Duration, logger: Logger) throws {
        configuration = try config.singleConnection(connectTimeout: .seconds(2))
        self.interval = interval
        self.logger = logger
    }

    /// False once two probes in a row have failed, until one succeeds.
    package var isReachable: Bool { failures.load(ordering: .relaxed) < 2 }

    package func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await self.probe()
                try? await Task.sleep(for: self.interval)
            }
        }
        if let open = connection.withLock({ slot in
            defer { slot = nil }; return slot
        }) {
            try? await open.close()
        }
    }

    /// The probe's connection. A probe that connects keeps it here at once, so that even a probe
    /// given up on (it ran over) leaves it where the next probe uses it or a failure closes it.
    private let connection = Mutex<PostgresConnection?>(nil)

    private func probe() async {
        do {
            try await withTimeout(.seconds(2), what: "database probe") { [self] in
                let probed: PostgresConnection
                if let open = connection.withLock({ $0 }) {
                    probed = open
                } else {
                    probed = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
                    if let replaced = connection.withLock({ slot in
                        defer { slot = probed }; return slot
                    }) {
                        Task { try? await replaced.close() }
                    }
                }
                try await probed.onItsLoop { for try await _ in try await probed.checkedQuery("SELECT 1", logger: logger) {} }
            }
            if failures.exchange(0, ordering: .relaxed) >= 2 { logger.notice("database reachable again") }
        } catch {
            // Closed off to the side: a connection whose server went away may not answer even that.
            if let broken = connection.withLock({ slot in
                defer { slot = nil }; return slot
            }) {
                Task { try? await broken.close() }
            }
            if failures.add(1, ordering: .relaxed).newValue == 2 {
                logger.error("database unreachable: requests answer 503 until it is back", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }
}
