import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitRedis
import ServiceLifecycle
import Synchronization

/// How long the consumer waits after a read before the next. As the relay does: after a small batch,
/// a moment for more to arrive, so a steady stream is handled in a few transactions rather than one
/// per event. After a batch of other services' events only, longer, and twice as long after each such
/// batch in a row, up to `othersLimit`: every service reads every event, a read costs a service a
/// wake-up and a round trip or two whatever it brings, far more than the entries it skips, so a
/// service that handles none of a busy stream's events (most services, for most events) wakes a few
/// times a second rather than dozens. An event for this service then waits at most `othersLimit`; a
/// read that finds the stream idle (its block ran out) or a batch with an event for this service
/// brings the others' wait back to `othersFirst`.
struct ReadPause {
    /// The most entries one read takes; after a full batch there is no wait.
    static let batch = 100
    static let own = Duration.milliseconds(5)
    static let othersFirst = Duration.milliseconds(20)
    static let othersLimit = Duration.milliseconds(160)
    private var others = othersFirst

    /// The wait after a read of `read` entries of which `handled` went to this service's handlers; nil for none.
    mutating func after(read: Int, handled: Int) -> Duration? {
        if read == 0 || handled > 0 { others = Self.othersFirst }
        guard read > 0, read < Self.batch else { return nil }
        if handled > 0 { return Self.own }
        defer { others = min(others * 2, Self.othersLimit) }
        return others
    }
}

/// Reads the event stream with the service's own consumer group and hands each event of a registered
/// type to its handler, inside one transaction with the event's inbox row; only after the commit is the
/// entry acknowledged. So an event is handled once in effect: a redelivery finds its inbox row and is
/// just acknowledged. Entries another consumer left pending (it crashed) are claimed after
/// `claimIdle`; an entry delivered more than `maxDeliveries` times goes to the dead-letter stream
/// with the last error and is acknowledged. Replicas of one service share the group and split the work.
package final class EventConsumer: Service, Sendable {
    private let client: PostgresClient
    private let redis: RedisClient
    private let config: EventBusConfig
    private let handlers: EventHandlers
    private let outbox: EventOutbox
    private let metrics: EventBusMetrics
    private let logger: Logger
    private let lastErrors = Mutex<[String: String]>([:])
    /// Deliveries taken off an entry's count for the database's trouble, by entry: at most
    /// `maxDeliveries`, so an event that itself makes the database fail (a statement that always
    /// times out) still reaches the dead letters, after twice the deliveries.
    private let forgiven = Mutex<[String: Int]>([:])
    /// Kinds of ignored event (reason, type, version) logged once already.
    private let reportedIgnored = Mutex<Set<String>>([])

    /// `redis` should be a client of its own: `XREADGROUP … BLOCK` holds its connection while waiting.
    package init(client: PostgresClient, redis: RedisClient, config: EventBusConfig, handlers: EventHandlers, producer: String, metrics: EventBusMetrics, logger: Logger) {
        self.client = client
        self.redis = redis
        self.config = config
        self.handlers = handlers
        self.outbox = EventOutbox(producer: producer)
        self.metrics = metrics
        var logger = logger
        logger[metadataKey: "consumer"] = "\(config.consumerName)"
        self.logger = logger
    }

    package func run() async throws {
        // A blocking XREADGROUP does not notice cancellation; closing its connection ends it at once.
        try await cancelWhenGracefulShutdown {
            await withTaskCancellationHandler {
                await self.loop()
            } onCancel: {
                Task { await self.redis.close() }
            }
        }
    }

    private func loop() async {
        var failures = 0
        var needsGroup = true
        var lastClaim = ContinuousClock.now - config.claimIdle
        var lastStats = ContinuousClock.now - .seconds(60)
        var lastSweep = ContinuousClock.now - Self.goneConsumerSweep
        var pause = ReadPause()
        while !Task.isCancelled {
            do {
                if needsGroup {
                    try await redis.xgroupCreate(config.stream, group: config.group)
                    needsGroup = false
                }
                if ContinuousClock.now - lastClaim >= config.claimIdle / 2 {
                    try await claimAbandoned()
                    lastClaim = .now
                }
                if ContinuousClock.now - lastStats >= .seconds(5) {
                    await updateLag()
                    lastStats = .now
                }
                if ContinuousClock.now - lastSweep >= Self.goneConsumerSweep {
                    await forgetGoneConsumers()
                    lastSweep = .now
                }
                let entries = try await redis.xreadgroup(
                    config.stream, group: config.group, consumer: config.consumerName,
                    count: ReadPause.batch, block: config.readBlock
                )
                let handled = try await processConcurrently(entries, reclaimed: false)
                if failures > 0 { logger.info("event consumer recovered") }
                failures = 0
                if let wait = pause.after(read: entries.count, handled: handled) { try? await Task.sleep(for: wait) }
            } catch let error as DatabaseUnavailable {
                // Not the event's fault: stop reading (so nothing is counted as a failed delivery)
                // until the database answers again.
                if Task.isCancelled { break }
                logger.warning("event consumer paused: database unavailable", metadata: ["error": "\(error.underlying)"])
                await waitForDatabase()
            } catch {
                if Task.isCancelled { break }
                // NOGROUP means the stream was lost (a Redis without persistence restarted): make the group again.
                needsGroup = true
                failures += 1
                if failures == 1 || failures % 50 == 0 {
                    logger.warning("event consumer cannot read the stream", metadata: ["error": "\(error)", "failures": "\(failures)"])
                }
                try? await Task.sleep(for: min(.milliseconds(50) * (1 << min(failures - 1, 6)), .seconds(2)))
            }
        }
    }

    /// Ensures the group exists; the service calls it at start so that no event is read before the group.
    package func prepare() async throws {
        try await redis.xgroupCreate(config.stream, group: config.group)
    }

    /// Takes over entries a replica left pending (it crashed, or a handler failed), one a claim.
    /// Each claim counts a delivery of what it takes: an entry that crashes the process handling it
    /// must reach the dead letters alone, not with every entry of its batch, which would be claimed
    /// and counted with it on each restart until they all got there.
    private func claimAbandoned() async throws {
        var start = "0-0"
        repeat {
            let (entries, next) = try await redis.xautoclaim(
                config.stream, group: config.group, consumer: config.consumerName, minIdle: config.claimIdle, start: start, count: 1
            )
            try await processConcurrently(entries, reclaimed: true)
            start = next
        } while start != "0-0" && !Task.isCancelled
    }

    /// At most this many transactions a batch is split into. Events about one user always land in the
    /// same shard, in stream order; shards commit side by side. A small batch is one transaction: each
    /// shard costs a BEGIN and a COMMIT, which at a steady trickle of events costs more than it saves.
    static let maxShards = 8
    static let eventsPerShard = 16

    /// Handles a batch read from the stream. Each shard is tried as one transaction, so a batch costs
    /// a few commits rather than one per event; if a handler fails, that shard is rolled back and its
    /// events are handled one transaction each, so only the failing event is left for redelivery.
    /// Throws `DatabaseUnavailable` when a transaction could not run at all. Returns how many entries
    /// went to this service's handlers (redeliveries and failures included): 0 when none was for it.
    @discardableResult
    func processConcurrently(_ entries: [StreamEntry], reclaimed: Bool) async throws -> Int {
        var accepted: [(StreamEntry, EventEnvelope, EventHandlers.Handler)] = []
        var skipped: [String] = []
        for entry in entries {
            // Another service's event: its producers and readers judge its envelope, not this service.
            if let type = entry.fields["type"], handlers.skips(type: type) {
                skipped.append(entry.id)
                continue
            }
            guard let json = entry.fields["envelope"],
                let envelope = try? EventEnvelope(json: json)
            else {
                await deadLetter(entry, error: "entry has no readable envelope", deliveries: 1)
                continue
            }
            let handler: EventHandlers.Handler
            switch handlers.lookup(envelope) {
            case .handle(let found):
                handler = found
            case .notConsumed:
                skipped.append(entry.id)
                continue
            case .ignored(let reason):
                skipped.append(entry.id)
                ignored(envelope, reason: reason)
                continue
            }
            if reclaimed {
                let deliveries = (try? await redis.deliveryCount(config.stream, group: config.group, id: entry.id)) ?? 0
                if deliveries > config.maxDeliveries {
                    _ = forgiven.withLock { $0.removeValue(forKey: entry.id) }
                    let lastError = lastErrors.withLock { $0.removeValue(forKey: entry.id) } ?? "unknown (the consumer that saw it may have crashed)"
                    await deadLetter(entry, error: lastError, deliveries: deliveries)
                    continue
                }
            }
            accepted.append((entry, envelope, handler))
        }
        if !skipped.isEmpty { try? await redis.xack(config.stream, group: config.group, ids: skipped) }
        // Sharded by what this service handles, not by the batch: others' events cost no transaction.
        let shards = max(1, min(Self.maxShards, accepted.count / Self.eventsPerShard))
        var work: [[(StreamEntry, EventEnvelope, EventHandlers.Handler)]] = Array(repeating: [], count: shards)
        for event in accepted {
            let key = event.1.userID?.uuidString ?? event.1.id.uuidString
            work[abs(key.hashValue % shards)].append(event)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for shard in work where !shard.isEmpty {
                group.addTask { try await self.process(shard) }
            }
            try await group.waitForAll()
        }
        return accepted.count
    }

    /// Events that delete what an account made, each handled in a transaction of its own, in its
    /// place in the shard's order: their handlers hold the account exclusively
    /// (`holdAccountForDeletion`), and in a transaction that had already held it, or another
    /// account, for an event before them, a request holding that account and waiting on a row the
    /// transaction wrote would deadlock with it.
    /// So are a link's acceptance and end: their handlers hold the coach and client pair
    /// (`CoachLinkStore`), and two processes each holding one pair for an event early in its batch
    /// would deadlock over the other's later in it. So is a block: its handler (entitlements') deletes
    /// invitations that requests holding their space or address wait on.
    static let handledAlone: Set<String> = [
        UserDeleted.eventType, UserPasswordChanged.eventType, InvitationAccepted.eventType, ClientUnlinked.eventType, BlockCreated.eventType,
    ]

    private func process(_ shard: [(StreamEntry, EventEnvelope, EventHandlers.Handler)]) async throws {
        var run: [(StreamEntry, EventEnvelope, EventHandlers.Handler)] = []
        for event in shard {
            if Self.handledAlone.contains(event.1.type) {
                try await processTogether(run)
                try await processTogether([event])
                run = []
            } else {
                run.append(event)
            }
        }
        try await processTogether(run)
    }

    private func processTogether(_ events: [(StreamEntry, EventEnvelope, EventHandlers.Handler)]) async throws {
        guard !events.isEmpty else { return }
        do {
            try await handle(events, together: events.count > 1)
        } catch is ShardFailed {
            for event in events { try await handle([event], together: false) }
        }
    }

    /// One transaction for `shard`. When `together`, a handler failure aborts it with `ShardFailed`;
    /// otherwise (a single event) the failure is recorded and the event left pending.
    private func handle(_ shard: [(StreamEntry, EventEnvelope, EventHandlers.Handler)], together: Bool) async throws {
        let started = ContinuousClock.now
        let logger = self.logger
        let outbox = self.outbox
        let outcomes: [(String, EventEnvelope, HandlerOutcome)]
        do {
            outcomes = try await client.transaction(logger: logger) { connection in
                // One statement records the whole shard in the inbox; the ids it returns are the events
                // not handled before (the others are redeliveries).
                let inserted = try await connection.checkedExecute(InboxRecord(ids: shard.map(\.1.id), types: shard.map(\.1.type)), logger: logger)
                var new: Set<UUID> = []
                for try await id in inserted { new.insert(id) }
                var outcomes: [(String, EventEnvelope, HandlerOutcome)] = []
                for (entry, envelope, handler) in shard {
                    // Removed once handled: an event in the shard twice (sent again after Redis lost
                    // the stream) is handled the first time only.
                    guard new.remove(envelope.id) != nil else {
                        outcomes.append((entry.id, envelope, .duplicate))
                        continue
                    }
                    var logger = logger
                    logger[metadataKey: "event_id"] = "\(envelope.id)"
                    logger[metadataKey: "event_type"] = "\(envelope.type)"
                    do {
                        try await handler(EventContext(envelope: envelope, connection: connection, outbox: outbox, logger: logger))
                        outcomes.append((entry.id, envelope, .handled))
                    } catch {
                        // The database's trouble (a connection dropped, a statement timeout, a full
                        // disk), not the event's: the consumer waits for the database instead.
                        if isDatabaseUnavailable(error) { throw DatabaseUnavailable(underlying: error) }
                        if together { throw ShardFailed() }
                        throw HandlerFailed(
                            entryID: entry.id, envelope: envelope, error: String(describing: error), notReadyYet: error is any EventNotReadyYet,
                            counted: error is any EventStillNotReady)
                    }
                }
                return outcomes
            }
        } catch let failure as HandlerFailed {
            outcomes = [(failure.entryID, failure.envelope, failure.notReadyYet ? .notReadyYet(failure.error, counted: failure.counted) : .failed(failure.error))]
        } catch let failure as ShardFailed {
            throw failure
        } catch {
            let unavailable = (error as? DatabaseUnavailable) ?? DatabaseUnavailable(underlying: error)
            await uncount(shard, error: unavailable.underlying)
            throw unavailable
        }
        let done = outcomes.filter {
            switch $0.2 {
            case .failed, .notReadyYet: false
            case .handled, .duplicate: true
            }
        }.map(\.0)
        // A failed XACK is harmless: the redelivery finds the inbox rows.
        try? await redis.xack(config.stream, group: config.group, ids: done)
        let elapsed = ContinuousClock.now - started
        for (id, envelope, outcome) in outcomes {
            switch outcome {
            case .handled:
                lastErrors.withLock { _ = $0.removeValue(forKey: id) }
                _ = forgiven.withLock { $0.removeValue(forKey: id) }
                metrics.handled.increment()
                metrics.handleDuration.record(elapsed)
                metrics.endToEnd.record(.nanoseconds(max(0, Int64(Date().timeIntervalSince(envelope.occurredAt) * 1e9))))
            case .duplicate:
                _ = forgiven.withLock { $0.removeValue(forKey: id) }
                metrics.duplicates.increment()
            case .failed(let error):
                // Left pending: after claimIdle it is claimed again and counts one more delivery.
                metrics.handlerErrors.increment()
                lastErrors.withLock { $0[id] = error }
                logger.warning(
                    "event handler failed; the event will be retried",
                    metadata: ["error": "\(error)", "stream_id": "\(id)", "event_id": "\(envelope.id)", "event_type": "\(envelope.type)"])
            case .notReadyYet(let reason, let counted):
                // Left pending, and this delivery not counted: the handler decides how long the
                // event may wait (by its age), not `maxDeliveries`. Past that, counted
                // (`EventStillNotReady`).
                lastErrors.withLock { $0[id] = reason }
                logger.info("event not ready yet; it will be retried", metadata: ["reason": "\(reason)", "stream_id": "\(id)", "event_id": "\(envelope.id)"])
                if !counted, let count = try? await redis.deliveryCount(config.stream, group: config.group, id: id), count > 0 {
                    try? await redis.setDeliveryCount(config.stream, group: config.group, consumer: config.consumerName, id: id, to: count - 1)
                }
            }
        }
    }

    /// A delivery that met the database's trouble is not the event's: each entry's count goes back
    /// by the one this delivery added, so an outage longer than `maxDeliveries` claims sends no
    /// healthy event to the dead letters; up to `maxDeliveries` times an entry (`forgiven`).
    private func uncount(_ shard: [(StreamEntry, EventEnvelope, EventHandlers.Handler)], error: any Error) async {
        for (entry, _, _) in shard {
            lastErrors.withLock { $0[entry.id] = "the database's trouble: \(error)" }
            let allowed = forgiven.withLock { (counts: inout [String: Int]) -> Bool in
                guard counts[entry.id, default: 0] < config.maxDeliveries else { return false }
                counts[entry.id, default: 0] += 1
                return true
            }
            guard allowed, let count = try? await redis.deliveryCount(config.stream, group: config.group, id: entry.id), count > 0 else { continue }
            try? await redis.setDeliveryCount(config.stream, group: config.group, consumer: config.consumerName, id: entry.id, to: count - 1)
        }
    }

    enum HandlerOutcome {
        case handled
        case duplicate
        case failed(String)
        case notReadyYet(String, counted: Bool)
    }

    /// Counts an event left alone because this release does not know its type or version, and logs
    /// the first of each kind: a newer release of its producer is running, and this service will
    /// not act on what it says until it is upgraded too.
    private func ignored(_ envelope: EventEnvelope, reason: String) {
        let type = String(envelope.type.prefix(64))
        metrics.ignored(type: type, reason: reason)
        let key = "\(reason) \(type) \(envelope.version)"
        guard reportedIgnored.withLock({ $0.insert(key).inserted }) else { return }
        logger.warning(
            "event left alone: this release does not read its type or version",
            metadata: ["event_type": "\(type)", "version": "\(envelope.version)", "reason": "\(reason)", "event_id": "\(envelope.id)"])
    }

    private func waitForDatabase() async {
        var wait = Duration.milliseconds(100)
        while !Task.isCancelled {
            try? await Task.sleep(for: wait)
            // Bounded: a probe that meets a connection closed under it could otherwise wait forever.
            let client = self.client
            let logger = self.logger
            if (try? await withTimeout(.seconds(5), what: "database probe") { try await client.checkedQuery("SELECT 1", logger: logger) }) != nil { return }
            wait = min(wait * 2, .seconds(5))
        }
    }

    private func deadLetter(_ entry: StreamEntry, error: String, deliveries: Int) async {
        do {
            var fields = entry.fields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            fields += [("stream_id", entry.id), ("group", config.group), ("error", error), ("deliveries", String(deliveries)), ("failed_at", RFC3339.string(from: Date()))]
            try await redis.xadd(config.deadLetterStream, maxLength: 100_000, fields: fields)
            try await redis.xack(config.stream, group: config.group, ids: [entry.id])
            metrics.deadLettered.increment()
            logger.error("event moved to the dead-letter stream", metadata: ["stream_id": "\(entry.id)", "dead_letter_stream": "\(config.deadLetterStream)", "error": "\(error)"])
        } catch {
            logger.warning("cannot dead-letter event yet", metadata: ["stream_id": "\(entry.id)", "error": "\(error)"])
        }
    }

    /// Pending and lag of the group, from `XINFO GROUPS`.
    /// How often, and after how long idle, the group's consumers that hold nothing are dropped.
    static let goneConsumerSweep = Duration.seconds(600)
    static let goneConsumerIdle = Duration.seconds(3_600)

    /// Drops the group's consumers idle for an hour that hold no entry: each process reads under a
    /// name of its own (host and pid), so every restart would leave one behind in Redis for good.
    /// One that holds entries stays for `claimAbandoned`; a live one dropped by mistake (a quiet
    /// stream) is made again by its next read, having held nothing. Returns the names dropped.
    @discardableResult
    func forgetGoneConsumers(idleAtLeast: Duration = goneConsumerIdle) async -> [String] {
        guard let reply = try? await redis.send("XINFO", "CONSUMERS", RedisArgument(config.stream), RedisArgument(config.group)), let consumers = reply.array
        else { return [] }
        let idleLimit = Int(idleAtLeast / .milliseconds(1))
        var dropped: [String] = []
        for consumer in consumers {
            let info = consumer.fields
            guard let name = info["name"]?.string, name != config.consumerName, info["pending"]?.int == 0, let idle = info["idle"]?.int, idle >= idleLimit
            else { continue }
            if (try? await redis.send("XGROUP", "DELCONSUMER", RedisArgument(config.stream), RedisArgument(config.group), RedisArgument(name))) != nil {
                dropped.append(name)
            }
        }
        if !dropped.isEmpty { logger.info("dropped the group's consumers gone for an hour", metadata: ["consumers": "\(dropped)"]) }
        return dropped
    }

    private func updateLag() async {
        guard let reply = try? await redis.send("XINFO", "GROUPS", RedisArgument(config.stream)), let groups = reply.array else { return }
        for group in groups {
            let info = group.fields
            guard info["name"]?.string == config.group else { continue }
            metrics.pending.set(Int64(info["pending"]?.int ?? 0))
            if let lag = info["lag"]?.int { metrics.lag.set(Int64(lag)) }
        }
    }
}

/// A handler failed inside a shard transaction; its events are retried one by one.
struct ShardFailed: Error {}

/// A handler failed for one event: recorded, and the event left pending.
struct HandlerFailed: Error {
    var entryID: String
    var envelope: EventEnvelope
    var error: String
    var notReadyYet: Bool
    var counted: Bool
}

/// What a handler throws for an event it cannot apply yet, because what it depends on is still on
/// its way (another event): the event stays pending and is delivered again after
/// `EVENTS_CLAIM_IDLE_MS`, without the delivery counting towards the dead letters. The handler
/// bounds the wait itself (by the event's age), and then handles or leaves the event alone.
package protocol EventNotReadyYet: Error {}

/// An event not ready yet that has waited as long as its handler lets one wait uncounted, though
/// what it waits for may still come (the service fell behind): it is delivered again as before, no
/// handler's failure, but each delivery now counts, so one that never becomes ready reaches the
/// dead letters rather than being dropped.
package protocol EventStillNotReady: EventNotReadyYet {}

/// The transaction could not run: nobody's fault but the database's, never counted as a delivery.
struct DatabaseUnavailable: Error {
    var underlying: any Error
}

/// Records a shard's events in the inbox and returns the ids not recorded before. Every event each
/// service handles passes through it: prepared once per connection, as PostgreSQL otherwise parses
/// and plans it each time.
struct InboxRecord: PostgresPreparedStatement {
    static let name = "inbox.record"
    static let sql = """
        INSERT INTO inbox (event_id, type)
        SELECT * FROM unnest($1::uuid[], $2::text[])
        ON CONFLICT (event_id) DO NOTHING RETURNING event_id
        """
    static let bindingDataTypes: [PostgresDataType] = [.uuidArray, .textArray]
    typealias Row = UUID

    let ids: [UUID]
    let types: [String]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(ids)
        bindings.append(types)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> UUID { try row.decode(UUID.self) }
}
