import Foundation
import Logging
import PostgresNIO
import ServiceKitCore
import ServiceLifecycle
import Synchronization

/// The keys whose data changed, as PostgreSQL announces them at each commit (a trigger's
/// `pg_notify(channel, key)`), so that a process can keep what it read and serve it again without
/// asking the database anything, until it is told the key changed.
///
/// `vouches` says whether that is safe now: only while the feed listens on a connection of its own
/// and has, within `2 × heartbeat`, received its own ping, which goes through the same queue after
/// every change committed before it. Each heartbeat the feed sends one from a pooled connection (a
/// session other than the listening one, so a pooler that hands the listening session's server
/// connection to others cannot echo it back); keys must not start with `ping `. A lost connection
/// or a feed that falls behind stops the vouching within `2 × heartbeat`, and the callers read
/// versions again. A new connection calls `gap` once it listens, since changes may have been missed
/// in between; one whose pings stop coming back for `10 × heartbeat` is replaced.
///
/// Every notifying commit takes PostgreSQL's one notification lock, so commits that notify are
/// serialized with each other (thousands a second here): only for data that changes far less
/// often than it is read.
public final class ChangeFeed: Service, Sendable {
    public let channel: String
    private let configuration: PostgresConnection.Configuration
    private let pool: PostgresClient
    private let heartbeat: Duration
    private let logger: Logger
    private let changed: @Sendable (String) -> Void
    private let gap: @Sendable () -> Void
    private let pingPrefix = "ping \(UUID().uuidString) "
    private let pings = Mutex(Pings())

    private struct Pings {
        var next = 0
        var sentAt: [Int: ContinuousClock.Instant] = [:]
        var vouchedUntil: ContinuousClock.Instant?
        /// When a ping last came back, or the feed last started listening.
        var heardAt = ContinuousClock.now
    }

    /// PostgreSQL's longest channel name, in bytes.
    package static let longestChannel = 63

    /// - Parameters:
    ///   - channel: the channel, at most `longestChannel` bytes (PostgreSQL refuses a longer one).
    ///   - pool: sends the pings.
    ///   - changed: called with each key announced, in commit order.
    ///   - gap: called when changes may have been missed (the feed starts listening, or stops).
    public init(
        channel: String, database config: DatabaseConfig, pool: PostgresClient, heartbeat: Duration = .seconds(1), logger: Logger,
        changed: @escaping @Sendable (String) -> Void, gap: @escaping @Sendable () -> Void
    ) throws {
        precondition(channel.utf8.count <= Self.longestChannel, "a channel name is at most \(Self.longestChannel) bytes")
        var configuration = try config.singleConnection(connectTimeout: .seconds(2))
        // Named, so an operator sees which connection in `pg_stat_activity` is the feed.
        configuration.options.additionalStartupParameters = [("application_name", String("feed \(channel)".prefix(63)))]
        self.configuration = configuration
        self.channel = channel
        self.pool = pool
        self.heartbeat = heartbeat
        self.logger = logger
        self.changed = changed
        self.gap = gap
    }

    /// Whether every change committed more than `2 × heartbeat` ago has reached `changed`, and the
    /// feed is keeping up: what was kept and not forgotten may be served as it is.
    public var vouches: Bool {
        pings.withLock { $0.vouchedUntil.map { ContinuousClock.now < $0 } ?? false }
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var failing = false
            while !Task.isCancelled {
                do {
                    try await self.listen {
                        if failing { self.logger.notice("change feed back", metadata: ["channel": "\(self.channel)"]) }
                        failing = false
                    }
                } catch  where !Task.isCancelled {
                    if !failing { self.logger.warning("change feed lost; reading versions until it is back", metadata: ["channel": "\(self.channel)", "error": "\(String(reflecting: error))"]) }
                    failing = true
                } catch {}
                self.stopVouching()
                try? await Task.sleep(for: self.heartbeat)
            }
        }
    }

    private func listen(listening: () -> Void) async throws {
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
        // Closed off to the side: a connection whose server went away may not answer even that.
        defer { Task { try? await connection.close() } }
        try await connection.listen(on: channel) { notifications in
            // Listening from here on: whatever was kept before may have missed a change.
            pings.withLock { $0.heardAt = .now }
            gap()
            listening()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await notification in notifications { self.received(notification.payload) }
                    throw ChangeFeedEnded(reason: "its notifications ended")
                }
                group.addTask { try await self.keepPinging() }
                defer { group.cancelAll() }
                try await group.next()
            }
        }
    }

    /// A ping each heartbeat; throws when none has come back for ten.
    private func keepPinging() async throws {
        while true {
            let started = ContinuousClock.now
            let payload = pings.withLock { pings in
                defer { pings.next += 1 }
                pings.sentAt[pings.next] = started
                pings.sentAt.removeValue(forKey: pings.next - 16)
                return "\(pingPrefix)\(pings.next)"
            }
            do {
                try await withTimeout(heartbeat * 10, what: "change feed ping") { [pool, channel, logger] in
                    try await pool.withConnectionOnItsLoop { connection in
                        try await connection.checkedRun("SELECT pg_notify(\(channel), \(payload))", logger: logger)
                    }
                }
            } catch {
                logger.debug("change feed ping not sent", metadata: ["error": "\(String(reflecting: error))"])
            }
            if pings.withLock({ ContinuousClock.now - $0.heardAt }) > heartbeat * 10 { throw ChangeFeedEnded(reason: "its pings stopped coming back") }
            try await Task.sleep(until: started + heartbeat)
        }
    }

    private func received(_ payload: String) {
        guard payload.hasPrefix("ping ") else { return changed(payload) }
        guard payload.hasPrefix(pingPrefix), let number = Int(payload.dropFirst(pingPrefix.count)) else { return }
        // Everything committed before this ping was sent has been handed to `changed`.
        pings.withLock { pings in
            guard let sentAt = pings.sentAt[number] else { return }
            pings.sentAt = pings.sentAt.filter { $0.key > number }
            pings.vouchedUntil = sentAt + heartbeat * 2
            pings.heardAt = .now
        }
    }

    private func stopVouching() {
        pings.withLock { pings in
            pings.vouchedUntil = nil
            pings.sentAt = [:]
        }
        gap()
    }
}

extension ChangeFeed {
    /// The channel a migration's `pg_notify(left(current_schema() || '_<suffix>', 63), …)` names in
    /// `schema`, cut as PostgreSQL cuts it.
    public static func channel(schema: String, _ suffix: String) -> String {
        String(decoding: "\(schema)_\(suffix)".utf8.prefix(longestChannel), as: UTF8.self)
    }

    /// A feed whose keys are users' ids, each forgotten from `kept` as it is announced. A key that is
    /// no user's id (a `TRUNCATE`'s `*`) names no one, and a gap may have hidden anyone's change:
    /// both forget everything.
    public convenience init<Value: Sendable>(
        forgetting kept: VersionedCache<UUID, Value>, channel: String, database config: DatabaseConfig, pool: PostgresClient, logger: Logger
    ) throws {
        try self.init(
            channel: channel, database: config, pool: pool, logger: logger,
            changed: { key in
                if let user = UUID(uuidString: key) { kept.forget(user) } else { kept.forgetAll() }
            }, gap: kept.forgetAll)
    }
}

struct ChangeFeedEnded: Error, CustomStringConvertible {
    var reason: String
    var description: String { "the change feed stopped: \(reason)" }
}
