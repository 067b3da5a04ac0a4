import Logging
import PostgresNIO
import ServiceLifecycle

/// The loop shared by the outbox relay and the mail sender (in Mailer): run `work` whenever a `NOTIFY` arrives
/// on `channel` and, as a safety net, every `pollInterval`; retry with backoff while it fails; stop
/// on graceful shutdown. `work` returns how much it did; it is called again at once while it is busy.
public struct NotifiedWorker: Sendable {
    let client: PostgresClient
    let channel: String
    let pollInterval: Duration
    let logger: Logger
    public var onTick: (@Sendable () async -> Void)? = nil

    public init(client: PostgresClient, channel: String, pollInterval: Duration, logger: Logger) {
        self.client = client
        self.channel = channel
        self.pollInterval = pollInterval
        self.logger = logger
    }

    public func run(_ work: @escaping @Sendable () async throws -> Int) async throws {
        let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        await withDiscardingTaskGroup { group in
            group.addTask { await self.listen(wake: wake) }
            group.addTask {
                while !Task.isCancelled {
                    wake.yield()
                    await self.onTick?()
                    try? await Task.sleep(for: self.pollInterval)
                }
            }
            group.addTask {
                var failures = 0
                for await _ in wakes {
                    while !Task.isCancelled {
                        do {
                            let done = try await work()
                            if failures > 0 { self.logger.info("\(self.channel) worker recovered", metadata: ["after_failures": "\(failures)"]) }
                            failures = 0
                            if done == 0 { break }
                        } catch {
                            failures += 1
                            if failures == 1 || failures % 50 == 0 {
                                self.logger.warning("\(self.channel) worker failing; will retry", metadata: ["error": "\(error)", "failures": "\(failures)"])
                            }
                            try? await Task.sleep(for: min(Duration.milliseconds(50) * (1 << min(failures - 1, 6)), .seconds(2)))
                        }
                    }
                }
            }
            try? await gracefulShutdown()
            group.cancelAll()
            wake.finish()
        }
    }

    /// Holds one pooled connection in `LISTEN`, coming back after a lost connection.
    private func listen(wake: AsyncStream<Void>.Continuation) async {
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        wake.yield()  // anything committed while we were not listening
                        for try await _ in notifications { wake.yield() }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("LISTEN \(channel) lost; polling until it is back", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}
