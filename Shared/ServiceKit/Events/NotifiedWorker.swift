import Logging
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import ServiceLifecycle

/// The loop shared by the outbox relay and the mail sender (in Mailer): run `work` whenever the
/// `WorkBell` named `bell` rings (a transaction gave it work and committed) and, as a safety net,
/// every `pollInterval`; retry with backoff while it fails; stop on graceful shutdown. `work`
/// returns how much it did; it is called again at once while it is busy.
public struct NotifiedWorker: Sendable {
    let bell: String
    let pollInterval: Duration
    let logger: Logger
    package var onTick: (@Sendable () async -> Void)? = nil

    public init(bell: String, pollInterval: Duration, logger: Logger) {
        self.bell = bell
        self.pollInterval = pollInterval
        self.logger = logger
    }

    public func run(_ work: @escaping @Sendable () async throws -> Int) async throws {
        let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let rings = WorkBell.wakes(bell)
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await _ in rings { wake.yield() }
            }
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
                            if failures > 0 { self.logger.info("\(self.bell) worker recovered", metadata: ["after_failures": "\(failures)"]) }
                            failures = 0
                            if done == 0 { break }
                        } catch  where Task.isCancelled {
                            // Stopping: the work in hand was cancelled with it, and stays for the next start.
                            break
                        } catch {
                            failures += 1
                            if failures == 1 || failures % 50 == 0 {
                                self.logger.warning("\(self.bell) worker failing; will retry", metadata: ["error": "\(error)", "failures": "\(failures)"])
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
}
