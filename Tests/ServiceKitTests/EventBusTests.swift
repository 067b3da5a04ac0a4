import Foundation
import Logging
import Models
import PostgresNIO
import Prometheus
@testable import ServiceKit
@testable import ServiceKitCore
@testable import ServiceKitDatabase
@testable import ServiceKitEvents
@testable import ServiceKitHTTP
@testable import ServiceKitRedis
@testable import ServiceKitTokens
import Synchronization
import Testing
import TestSupport

/// A producer service ("auth") and a consumer service ("social") on one test database and a stream
/// of their own, with a handler that records each handling in `social.effects` — without a unique
/// key, so a second handling of one event would show as a second row.
final class BusHarness: Sendable {
    let database: TestDatabase
    let stream: String
    let producer: PostgresClient
    let consumerDB: PostgresClient
    let redisConfig: RedisConfiguration
    let redis: RedisClient
    let registry = MetricsRegistry()
    private let tasks = Mutex<[Task<Void, any Error>]>([])

    static let effects = Migration(name: "0001_effects", sql: "CREATE TABLE effects (event_id uuid NOT NULL, consumer text NOT NULL, user_id uuid)")

    init(redis redisConfig: RedisConfiguration, consumerPoolSize: Int = 8) async throws {
        database = try await TestDatabase.create(services: ["auth", "social"])
        stream = TestEnvironment.uniqueName("events")
        self.redisConfig = redisConfig
        producer = PostgresClient(database: database.config(for: "auth"), logger: TestEnvironment.logger)
        consumerDB = PostgresClient(database: database.config(for: "social", poolSize: consumerPoolSize), logger: TestEnvironment.logger)
        redis = RedisClient(configuration: redisConfig, logger: TestEnvironment.logger)
        launch { await self.producer.run() }
        launch { await self.consumerDB.run() }
        try await MigrationRunner(client: producer, schema: "auth", migrations: EventBusSchema.migrations, logger: TestEnvironment.logger).run()
        try await MigrationRunner(client: consumerDB, schema: "social", migrations: EventBusSchema.migrations + [Self.effects], logger: TestEnvironment.logger).run()
    }

    func launch(_ work: @escaping @Sendable () async throws -> Void) {
        tasks.withLock { $0.append(Task { try await work() }) }
    }

    func busConfig(group: String, consumer: String, maxDeliveries: Int = 5, relayPoll: Duration = .milliseconds(500)) -> EventBusConfig {
        EventBusConfig(
            stream: stream, maxLength: 100_000, group: group, consumerName: consumer, claimIdle: .milliseconds(300),
            maxDeliveries: maxDeliveries, relayPollInterval: relayPoll, readBlock: .milliseconds(100))
    }

    func startRelay(poll: Duration = .milliseconds(500)) {
        let relay = makeRelay(poll: poll)
        launch { try await relay.run() }
    }

    /// The producer's relay, not started: a test calls its batch or its poll itself. Each is a process
    /// of its own (a replica, or one started again): nothing is shared but the schema and Redis.
    func makeRelay(poll: Duration = .milliseconds(500)) -> OutboxRelay {
        OutboxRelay(
            client: producer, redis: redis, config: busConfig(group: "auth", consumer: "relay", relayPoll: poll), schema: "auth",
            metrics: EventBusMetrics(registry: registry), logger: TestEnvironment.logger)
    }

    /// Starts a consumer replica of "social" whose `user.registered` handler records an effect (or
    /// fails). `hangingOn`: the event whose handling never ends (a process stuck on it, or about to
    /// crash).
    @discardableResult
    func startConsumer(
        name: String, maxDeliveries: Int = 5, failing: Bool = false, hangingOn: UUID? = nil, databaseTroubleFor outages: Int = 0, notReadyFor waits: Int = 0,
        neverReady: Bool = false
    ) -> EventConsumer {
        let consumer = makeConsumer(
            name: name, maxDeliveries: maxDeliveries, failing: failing, hangingOn: hangingOn, databaseTroubleFor: outages, notReadyFor: waits, neverReady: neverReady)
        launch { try await consumer.run() }
        return consumer
    }

    /// `startConsumer`'s consumer, not started. `outages`: how many times its handler first meets the
    /// database's trouble (a connection closed under it); `waits`: how many times it first answers
    /// that the event is not ready yet; `neverReady`: it always answers that the event, long awaited,
    /// is still not ready (`EventStillNotReady`).
    func makeConsumer(
        name: String, maxDeliveries: Int = 5, failing: Bool = false, hangingOn: UUID? = nil, databaseTroubleFor outages: Int = 0, notReadyFor waits: Int = 0,
        neverReady: Bool = false
    ) -> EventConsumer {
        var handlers = EventHandlers()
        let attempts = Atomic<Int>(0)
        let early = Atomic<Int>(0)
        handlers.on(UserRegistered.self) { payload, context in
            if failing { throw HandlerFailure() }
            if neverReady { throw StillNotReady() }
            if early.add(1, ordering: .relaxed).newValue <= waits { throw NotReadyYet() }
            if attempts.add(1, ordering: .relaxed).newValue <= outages { throw DatabaseConnectionClosed() }
            if context.envelope.id == hangingOn { try await Task.sleep(for: .seconds(3_600)) }
            try await context.connection.query(
                "INSERT INTO effects (event_id, consumer, user_id) VALUES (\(context.envelope.id), \(name), \(payload.userID))",
                logger: context.logger)
        }
        var config = redisConfig
        config.poolSize = 1
        let consumer = EventConsumer(
            client: consumerDB, redis: RedisClient(configuration: config, logger: TestEnvironment.logger),
            config: busConfig(group: "social", consumer: name, maxDeliveries: maxDeliveries), handlers: handlers,
            producer: "social", metrics: EventBusMetrics(registry: MetricsRegistry()), logger: TestEnvironment.logger
        )
        return consumer
    }

    /// One event relayed by `relay` under Redis's first epoch; then that epoch replaced ("newer", as
    /// a relay that found a loss makes one) and the kept row sent again by `replaying`. Returns the
    /// first epoch.
    func relayedThenReplayedUnderANewEpoch(relay: OutboxRelay, replaying: OutboxRelay) async throws -> String {
        _ = try await emit()
        #expect(try await relay.relayBatch() == 1)
        let epochKey = RedisArgument("\(stream):epoch")
        let older = try #require(try await redis.send("GET", epochKey).string)
        _ = try await redis.send("SET", epochKey, "newer")
        #expect(try await replaying.replayIfRedisLostItsData() == 1)
        return older
    }

    /// Waits until the relay keeps `count` copies (it commits a batch just after Redis took it) under
    /// an epoch the producer's schema has recorded.
    func waitUntilKept(_ count: Int) async throws {
        try await waitUntil(.seconds(10)) {
            let recorded = try await self.producer.query("SELECT epoch FROM outbox_relay_epoch", logger: TestEnvironment.logger).decode(String.self)
                .first { _ in true }
            let kept = try await self.producer.query("SELECT count(*)::int FROM outbox_relayed", logger: TestEnvironment.logger).decode(Int.self)
                .first { _ in true }
            return recorded != nil && kept == count
        }
    }

    /// Commits one `user.registered` in the producer's outbox; throws inside the transaction when `rollback`.
    @discardableResult
    func emit(rollback: Bool = false, live: Bool = false) async throws -> EventEnvelope {
        let outbox = EventOutbox(producer: "auth")
        let envelope = Mutex<EventEnvelope?>(nil)
        do {
            try await producer.transaction(logger: TestEnvironment.logger) { connection in
                let userID = UUID()
                let written = try await outbox.write(
                    UserRegistered(userID: userID, email: "\(userID)@example.com", displayName: nil, provider: "email"),
                    userID: userID, live: live, on: connection, logger: TestEnvironment.logger)
                envelope.withLock { $0 = written }
                if rollback { throw RolledBack() }
            }
        } catch is RolledBack {}
        return envelope.withLock { $0! }
    }

    /// Read on the connection's own loop, as the services read (`checkedQuery`): a query written from
    /// another thread can be dropped by PostgresNIO and wait for ever, past any time limit.
    func effects() async throws -> [(UUID, String)] {
        try await consumerDB.withConnectionOnItsLoop { connection in
            var rows: [(UUID, String)] = []
            for try await row in try await connection.checkedQuery("SELECT event_id, consumer FROM effects", logger: TestEnvironment.logger).decode((UUID, String).self) {
                rows.append(row)
            }
            return rows
        }
    }

    func waitForEffects(_ count: Int, within limit: Duration = .seconds(15)) async throws -> [(UUID, String)] {
        let deadline = ContinuousClock.now + limit
        var rows: [(UUID, String)] = []
        while ContinuousClock.now < deadline {
            rows = try await effects()
            if rows.count >= count { return rows }
            try await Task.sleep(for: .milliseconds(25))
        }
        return rows
    }

    func stop() async {
        let running = tasks.withLock { $0 }
        for task in running.reversed() { task.cancel() }
        await redis.close()
    }

    struct HandlerFailure: Error, CustomStringConvertible { var description: String { "the handler always fails" } }
    struct NotReadyYet: EventNotReadyYet, CustomStringConvertible { var description: String { "what the event needs is still on its way" } }
    struct StillNotReady: EventStillNotReady, CustomStringConvertible { var description: String { "what the event needs has not come in all this time" } }
    struct RolledBack: Error {}
}

@Suite struct EventBusTests {
    /// The consumer's wait between reads: short after its own events, growing through a run of others'
    /// events to its limit, and back to the shortest after its own or an idle read.
    @Test func theWaitBetweenReadsGrowsOnlyThroughOthersEvents() {
        var pause = ReadPause()
        let ms = { (value: Int) in Duration.milliseconds(value) }
        #expect([pause.after(read: 3, handled: 0), pause.after(read: 7, handled: 0), pause.after(read: 9, handled: 0)] == [ms(20), ms(40), ms(80)])
        #expect([pause.after(read: 9, handled: 0), pause.after(read: 9, handled: 0)] == [ms(160), ms(160)])
        // A full batch is read again at once; it leaves the wait as it was.
        #expect(pause.after(read: ReadPause.batch, handled: 0) == nil)
        #expect(pause.after(read: 9, handled: 0) == ms(160))
        // One of its own: the shortest, and others' events start again from the first wait.
        #expect(pause.after(read: 9, handled: 1) == ms(5))
        #expect(pause.after(read: 9, handled: 0) == ms(20))
        #expect(pause.after(read: 9, handled: 0) == ms(40))
        // A read that found the stream idle waits for nothing more, and starts the others' wait again.
        #expect(pause.after(read: 0, handled: 0) == nil)
        #expect(pause.after(read: 2, handled: 0) == ms(20))
    }

    /// A batch's events for one user share a transaction, in order, but `user.deleted` and
    /// `user.password_changed` each run in one of their own, in their place.
    @Test func anAccountsDeletionIsHandledInATransactionOfItsOwn() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        try await bus.consumerDB.query("CREATE TABLE handled (n serial, type text, xid bigint)", logger: TestEnvironment.logger)
        var handlers = EventHandlers()
        @Sendable func record(_ context: EventContext) async throws {
            try await context.connection.query("INSERT INTO handled (type, xid) VALUES (\(context.envelope.type), txid_current())", logger: context.logger)
        }
        handlers.on(UserRegistered.self) { _, context in try await record(context) }
        handlers.on(UserDeleted.self) { _, context in try await record(context) }
        handlers.on(UserPasswordChanged.self) { _, context in try await record(context) }
        let consumer = EventConsumer(
            client: bus.consumerDB, redis: bus.redis, config: bus.busConfig(group: "social", consumer: "c1"), handlers: handlers,
            producer: "social", metrics: EventBusMetrics(registry: MetricsRegistry()), logger: TestEnvironment.logger)
        let user = UUID()
        let registered = UserRegistered(userID: user, email: "someone@example.com", displayName: nil, provider: "email")
        let payloads: [any EventPayload] = [
            registered, registered, UserDeleted(userID: user), registered,
            UserPasswordChanged(userID: user, method: .reset, makerDropped: true), registered, registered,
        ]
        let entries = try payloads.enumerated().map { index, payload in
            let envelope = try EventEnvelope(payload, producer: "auth", userID: user)
            return StreamEntry(id: "1-\(index)", fields: ["type": envelope.type, "envelope": envelope.json])
        }
        try await consumer.processConcurrently(entries, reclaimed: false)
        var rows: [(String, Int64)] = []
        for try await row in try await bus.consumerDB.query("SELECT type, xid FROM handled ORDER BY n", logger: TestEnvironment.logger).decode((String, Int64).self) {
            rows.append(row)
        }
        #expect(rows.map(\.0) == payloads.map { type(of: $0).eventType })
        let transactions = rows.map(\.1)
        // Together: the first two, the one after the deletion alone, the last two.
        #expect(transactions[0] == transactions[1] && transactions[5] == transactions[6])
        #expect(Set(transactions).count == 5, "\(transactions)")
        await bus.stop()
    }

    @Test func aRolledBackEventIsNeverDeliveredAndACommittedOneIsOnce() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        bus.startRelay()
        bus.startConsumer(name: "c1")
        let rolledBack = try await bus.emit(rollback: true)
        let committed = try await bus.emit()
        let rows = try await bus.waitForEffects(1)
        try await Task.sleep(for: .milliseconds(500))  // time for a wrong second delivery to show
        let final = try await bus.effects()
        #expect(final.map(\.0) == [committed.id])
        #expect(!rows.contains { $0.0 == rolledBack.id })
        let entries = try await bus.redis.xrange(bus.stream)
        #expect(entries.map { $0.fields["id"] } == [committed.id.uuidString.lowercased()])
        await bus.stop()
    }

    /// Each envelope leaves with its outbox row's number, so consumers can order one producer's
    /// events as its database did; an envelope that was relayed already is not written again.
    @Test func theRelayNumbersEachEnvelopeWithItsOutboxRow() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        var written: [EventEnvelope] = []
        for _ in 0..<3 { written.append(try await bus.emit()) }
        bus.startRelay()
        try await waitUntil(.seconds(15)) { try await bus.redis.xrange(bus.stream).count == 3 }
        let relayed = try await bus.redis.xrange(bus.stream).map { try EventEnvelope(json: $0.fields["envelope"] ?? "") }
        #expect(relayed.map(\.id) == written.map(\.id))
        let numbers = relayed.compactMap(\.sequence)
        #expect(numbers.count == 3 && numbers == numbers.sorted() && Set(numbers).count == 3)
        let outbox = EventOutbox(producer: "auth")
        await #expect(throws: EventOutbox.AlreadyRelayed.self) {
            try await bus.producer.transaction(logger: TestEnvironment.logger) { connection in
                try await outbox.write(relayed[0], on: connection, logger: TestEnvironment.logger)
            }
        }
        await bus.stop()
    }

    /// A bell asked for inside `transaction` rings once when it commits, never when it rolls back,
    /// and not before the commit.
    @Test func aBellRingsAfterTheCommitOnlyAndOnce() async throws {
        let database = try await TestDatabase.create(services: ["auth"])
        let client = PostgresClient(database: database.config(for: "auth"), logger: TestEnvironment.logger)
        let running = Task { await client.run() }
        defer { running.cancel() }
        let bell = TestEnvironment.uniqueName("bell")
        let rings = Mutex(0)
        let listening = Task {
            for await _ in WorkBell.wakes(bell) { rings.withLock { $0 += 1 } }
        }
        defer { listening.cancel() }
        struct Abort: Error {}
        _ = try? await client.transaction(logger: TestEnvironment.logger) { connection in
            WorkBell.ringAfterCommit(bell)
            try await connection.query("SELECT 1", logger: TestEnvironment.logger)
            throw Abort()
        }
        try await client.transaction(logger: TestEnvironment.logger) { connection in
            WorkBell.ringAfterCommit(bell)
            WorkBell.ringAfterCommit(bell)
            try await Task.sleep(for: .milliseconds(100))
            #expect(rings.withLock { $0 } == 0)  // not before the commit
            try await connection.query("SELECT 1", logger: TestEnvironment.logger)
        }
        try await waitUntil(.seconds(10)) { rings.withLock { $0 } == 1 }
        try await Task.sleep(for: .milliseconds(200))
        #expect(rings.withLock { $0 } == 1)
    }

    /// The relay is woken by the commit itself (`WorkBell`), not by its poll. (Tests run side by side
    /// in one process and ring one bell, so this shows the wake, not which commit rang it.)
    @Test func aCommitWakesTheRelayAtOnce() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        bus.startRelay(poll: .seconds(600))
        try await Task.sleep(for: .milliseconds(300))  // its first pass, at start, finds nothing
        try await bus.emit(rollback: true)
        let committed = try await bus.emit()
        try await waitUntil(.seconds(10)) { try await bus.redis.xlen(bus.stream) == 1 }
        #expect(try await bus.redis.xrange(bus.stream).map { $0.fields["id"] } == [committed.id.uuidString.lowercased()])
        await bus.stop()
    }

    /// Batches that reach fewer replicas than asked for (a primary promoted by a failover has none
    /// until another joins) are committed once the primary holds them: sent again and again, they
    /// would hold back every row behind them and repeat each live copy.
    @Test func aBatchNoReplicaHoldsIsSentOnce() async throws {
        var configuration = try TestEnvironment.redis()
        configuration.replicasToWaitFor = 1
        let bus = try await BusHarness(redis: configuration)
        bus.startRelay()
        for _ in 0..<3 { try await bus.emit() }
        try await bus.waitUntilKept(3)
        // Past the relay's retries, had it gone on sending.
        try await Task.sleep(for: .seconds(3))
        #expect(try await bus.redis.xlen(bus.stream) == 3)
        #expect(try await bus.producer.query("SELECT count(*)::int FROM outbox", logger: TestEnvironment.logger).decode(Int.self).first { _ in true } == 0)
        await bus.stop()
    }

    /// Events older than the retention (7 days by default) leave the stream and the group's dead
    /// letters however few there are; newer ones stay.
    @Test func theRelayTrimsEventsOlderThanTheRetention() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        let old = Int64(Date().addingTimeInterval(-8 * 86_400).timeIntervalSince1970 * 1000)
        let dead = bus.busConfig(group: "auth", consumer: "relay").deadLetterStream
        let recent = Int64(Date().addingTimeInterval(-6 * 86_400).timeIntervalSince1970 * 1000)
        for stream in [bus.stream, dead] {
            _ = try await bus.redis.send("XADD", RedisArgument(stream), RedisArgument("\(old)-0"), "id", "old")
            _ = try await bus.redis.send("XADD", RedisArgument(stream), RedisArgument("\(recent)-0"), "id", "recent")
        }
        bus.startRelay(poll: .milliseconds(200))
        let committed = try await bus.emit()
        try await waitUntil(.seconds(5)) { try await bus.redis.xrange(bus.stream).map { $0.fields["id"] } == ["recent", committed.id.uuidString.lowercased()] }
        try await waitUntil(.seconds(5)) { try await bus.redis.xrange(dead).map { $0.fields["id"] } == ["recent"] }
        await bus.stop()
    }

    @Test func liveEventsArePublishedOnTheUserChannel() async throws {
        let config = try TestEnvironment.redis()
        let bus = try await BusHarness(redis: config)
        let subscriber = RedisSubscriber(configuration: config, logger: TestEnvironment.logger)
        bus.launch { try await subscriber.run() }
        // Subscribe to the user's channel before the event exists: emit in a transaction we control.
        let userID = UUID()
        let messages = subscriber.subscribe("user:\(userID.uuidString.lowercased())")
        try await waitUntil { try await bus.redis.publish("user:\(userID.uuidString.lowercased())", "{}") > 0 }
        try await bus.producer.transaction(logger: TestEnvironment.logger) { connection in
            try await EventOutbox(producer: "auth").write(
                UserRegistered(userID: userID, email: "a@b.c", displayName: "A", provider: "email"), userID: userID, live: true, on: connection, logger: TestEnvironment.logger)
        }
        bus.startRelay()
        var received: LiveStream.Message?
        for await message in messages where message.text != "{}" {
            received = LiveStream.Message(payload: message.payload)
            break
        }
        let message = try #require(received)
        let envelope = try EventEnvelope(json: message.envelope)
        #expect(envelope.type == "user.registered")
        #expect(try envelope.decode(UserRegistered.self).displayName == "A")
        #expect(envelope.sequence != nil, "the live copy is the envelope as relayed, numbered")
        // The message names the entry the relay added to the user's live stream.
        let entries = try await bus.redis.xrange(LiveStream.key(for: userID))
        #expect(entries.map(\.id) == [message.id.description])
        #expect(entries.first?.fields["envelope"] == envelope.json && entries.first?.fields["type"] == "user.registered")
        await bus.stop()
    }

    /// `liveTo`: the live copy goes to another user than the event's (an accepted invitation is the
    /// client's event, and the coach's news); events not marked live have no live copy.
    @Test func aLiveCopyGoesToTheUserItIsFor() async throws {
        let config = try TestEnvironment.redis()
        let bus = try await BusHarness(redis: config)
        let subscriber = RedisSubscriber(configuration: config, logger: TestEnvironment.logger)
        bus.launch { try await subscriber.run() }
        let (coach, client) = (UUID(), UUID())
        let messages = subscriber.subscribe(LiveStream.channel(for: coach))
        try await waitUntil { try await bus.redis.publish(LiveStream.channel(for: coach), "probe") > 0 }
        let accepted = InvitationAccepted(invitationID: UUID(), coachID: coach, clientID: client)
        try await bus.producer.transaction(logger: TestEnvironment.logger) { connection in
            let outbox = EventOutbox(producer: "invitations")
            try await outbox.write(accepted, userID: client, liveTo: coach, on: connection, logger: TestEnvironment.logger)
            try await outbox.write(UserRegistered(userID: client, email: "c@d.e", displayName: nil, provider: "email"), userID: client, on: connection, logger: TestEnvironment.logger)
        }
        bus.startRelay()
        var received: LiveStream.Message?
        for await message in messages where message.text != "probe" {
            received = LiveStream.Message(payload: message.payload)
            break
        }
        let message = try #require(received)
        let envelope = try EventEnvelope(json: message.envelope)
        #expect(envelope.userID == client)
        #expect(try envelope.decode(InvitationAccepted.self) == accepted)
        try await waitUntil { try await bus.redis.xlen(bus.stream) == 2 }
        #expect(try await bus.redis.xrange(LiveStream.key(for: coach)).map(\.id) == [message.id.description])
        #expect(try await bus.redis.xlen(LiveStream.key(for: client)) == 0)
        await bus.stop()
    }

    /// A live row written before the outbox had `live_to` (and so without it) still has its copy
    /// sent to its own user.
    @Test func aLiveRowWithoutLiveToGoesToItsOwnUser() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        let user = UUID()
        let envelope = try EventEnvelope(UserEmailVerified(userID: user, email: "a@b.c"), producer: "auth", userID: user)
        try await bus.producer.query(
            "INSERT INTO outbox (id, type, user_id, live, envelope) VALUES (\(envelope.id), \(envelope.type), \(user), true, \(envelope.json))",
            logger: TestEnvironment.logger)
        bus.startRelay()
        // At least once: a retried batch may send a copy twice.
        try await waitUntil { try await bus.redis.xlen(LiveStream.key(for: user)) >= 1 }
        let entry = try #require(try await bus.redis.xrange(LiveStream.key(for: user)).first)
        #expect(entry.fields["type"] == UserEmailVerified.eventType)
        #expect(try EventEnvelope(json: try #require(entry.fields["envelope"])).id == envelope.id)
        await bus.stop()
    }

    @Test func anEventIsHandledOnceInEffectWhenAConsumerCrashesBeforeAck() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        try await bus.redis.xgroupCreate(bus.stream, group: "social")
        bus.startRelay()
        let crashedBeforeHandling = try await bus.emit()
        let crashedAfterCommit = try await bus.emit()
        try await waitUntil { try await bus.redis.xlen(bus.stream) == 2 }
        // A consumer reads both and dies: one before handling, one after committing but before XACK.
        let taken = try await bus.redis.xreadgroup(bus.stream, group: "social", consumer: "crashed", count: 10, block: nil)
        #expect(taken.count == 2)
        try await bus.consumerDB.withTransaction(logger: TestEnvironment.logger) { connection in
            try await connection.query("INSERT INTO inbox (event_id, type) VALUES (\(crashedAfterCommit.id), 'user.registered')", logger: TestEnvironment.logger)
            try await connection.query("INSERT INTO effects (event_id, consumer) VALUES (\(crashedAfterCommit.id), 'crashed')", logger: TestEnvironment.logger)
        }
        // A healthy replica claims what the crashed one left pending.
        bus.startConsumer(name: "c2")
        try await waitUntil { try await bus.redis.pendingCount(bus.stream, group: "social") == 0 }
        try await Task.sleep(for: .milliseconds(400))
        let rows = try await bus.effects()
        #expect(rows.filter { $0.0 == crashedBeforeHandling.id }.map(\.1) == ["c2"])
        #expect(rows.filter { $0.0 == crashedAfterCommit.id }.map(\.1) == ["crashed"])
        await bus.stop()
    }

    /// Every event a service handles is recorded in its inbox first: that statement is prepared, and
    /// PostgreSQL keeps its plan rather than making one for each shard's ids.
    @Test func theInboxRecordIsPlannedOnce() async throws {
        // One connection, so that the consumer's prepared statement is the one this test reads.
        let bus = try await BusHarness(redis: try TestEnvironment.redis(), consumerPoolSize: 1)
        try await bus.redis.xgroupCreate(bus.stream, group: "social")
        bus.startRelay(poll: .milliseconds(50))
        bus.startConsumer(name: "c1")
        // One at a time, so that each is a shard of its own and one execution.
        for handled in 1...10 {
            try await bus.emit()
            #expect(try await bus.waitForEffects(handled).count == handled)
        }
        let rows = try await bus.consumerDB.query(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = \(InboxRecord.name)", logger: TestEnvironment.logger)
        var plans: (generic: Int64, custom: Int64) = (0, 0)
        for try await row in rows.decode((Int64, Int64).self) { plans = row }
        // At least ten: an entry left unacknowledged past `claimIdle` on a busy machine is claimed and
        // recorded again (and found a duplicate).
        #expect(plans.generic + plans.custom >= 10 && plans.generic >= 5, "\(plans)")
        await bus.stop()
    }

    @Test func eventsCommittedWhileRedisIsDownAreDeliveredWhenItReturns() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        bus.startRelay()
        bus.startConsumer(name: "c1")
        try await bus.emit()
        _ = try await bus.waitForEffects(1)

        try await server.stop()
        var emitted: [EventEnvelope] = []
        for _ in 0..<5 { emitted.append(try await bus.emit()) }
        try await Task.sleep(for: .milliseconds(500))
        let backlog = try await bus.producer.query("SELECT count(*)::int FROM outbox", logger: TestEnvironment.logger).decode(Int.self).first { _ in true }
        #expect(backlog == 5)  // waiting in the outbox, not lost
        try await server.start()

        let rows = try await bus.waitForEffects(6, within: .seconds(20))
        #expect(Set(rows.map(\.0)).isSuperset(of: emitted.map(\.id)))
        #expect(rows.count == 6)
        await bus.stop()
        try await server.stop()
    }

    /// Redis comes back without its data (no persistence, a new instance) before a consumer read
    /// what the relay had sent: the relay finds its marker gone and sends again what it relayed
    /// within the replay window, and the consumer, its group made anew, handles every event once.
    @Test func eventsUnreadWhenRedisLosesItsDataAreSentAgain() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        bus.startRelay(poll: .milliseconds(100))
        var emitted: [EventEnvelope] = []
        for _ in 0..<5 { emitted.append(try await bus.emit()) }
        let ids = Set(emitted.map { $0.id.uuidString.lowercased() })
        // Sent, kept (the relay commits a batch just after Redis took it), under an epoch the
        // producer's schema has recorded.
        try await bus.waitUntilKept(5)
        #expect(Set(try await bus.redis.xrange(bus.stream).compactMap { $0.fields["id"] }).isSuperset(of: ids))
        _ = try await bus.redis.send("FLUSHALL")
        bus.startConsumer(name: "c1")
        let rows = try await bus.waitForEffects(5, within: .seconds(20))
        #expect(Set(rows.map(\.0)) == Set(emitted.map(\.id)))
        // Sent again once: Redis has an epoch again, recorded, so later polls send nothing more.
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await bus.effects().count == 5)
        #expect(try await bus.redis.xlen(bus.stream) == 5)
        await bus.stop()
        try await server.stop()
    }

    /// Redis loses its last writes and keeps its epoch (a crash within its fsync interval, a restore
    /// from an older snapshot, a failover to a replica behind): the relay finds the last entry it sent
    /// gone though not trimmed, makes a new epoch, and sends again what it kept.
    @Test func entriesRedisLostWithItsEpochKeptAreSentAgain() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        bus.startRelay(poll: .milliseconds(100))
        let kept = try await bus.emit()
        try await bus.waitUntilKept(1)
        let lost = try await bus.emit()
        try await bus.waitUntilKept(2)
        let epoch = try await bus.redis.send("GET", RedisArgument("\(bus.stream):epoch")).string
        // The last entry is gone, the first and the epoch stay.
        let entries = try await bus.redis.xrange(bus.stream)
        let last = try #require(entries.first { $0.fields["id"] == lost.id.uuidString.lowercased() })
        _ = try await bus.redis.send("XDEL", RedisArgument(bus.stream), RedisArgument(last.id))
        bus.startConsumer(name: "c1")
        let rows = try await bus.waitForEffects(2, within: .seconds(20))
        #expect(Set(rows.map(\.0)) == [kept.id, lost.id])
        #expect(try await bus.redis.send("GET", RedisArgument("\(bus.stream):epoch")).string != epoch)
        await bus.stop()
        try await server.stop()
    }

    /// A Redis that lost only its last writes keeps its epoch, and the next batch may reach it before
    /// any poll looks, from another replica of the service: the batch itself finds the entry the
    /// schema's relays sent last gone, and every kept row is sent again, that entry's among them.
    @Test func aBatchThatFindsTheLastSentEntryGoneSendsTheKeptRowsAgain() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        let kept = try await bus.emit()
        let lost = try await bus.emit()
        #expect(try await bus.makeRelay().relayBatch() == 2)
        let entry = try #require(try await bus.redis.xrange(bus.stream).first { $0.fields["id"] == lost.id.uuidString.lowercased() })
        _ = try await bus.redis.send("XDEL", RedisArgument(bus.stream), RedisArgument(entry.id))
        let next = try await bus.emit()
        #expect(try await bus.makeRelay().relayBatch() == 1)
        let ids = try await bus.redis.xrange(bus.stream).compactMap { $0.fields["id"] }
        #expect(Set(ids) == Set([kept, lost, next].map { $0.id.uuidString.lowercased() }), "\(ids)")
        await bus.stop()
        try await server.stop()
    }

    /// The same loss, met when another service has already made a new epoch for it: this schema's
    /// kept rows are sent again once, and its next batches look for the replay's last entry, not for
    /// the one lost (which would make yet another epoch, and every service replay again).
    @Test func aLossAnotherServiceFoundFirstIsReplayedOnce() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        let relay = bus.makeRelay()
        _ = try await bus.emit()
        let lost = try await bus.emit()
        #expect(try await relay.relayBatch() == 2)
        let entry = try #require(try await bus.redis.xrange(bus.stream).first { $0.fields["id"] == lost.id.uuidString.lowercased() })
        _ = try await bus.redis.send("XDEL", RedisArgument(bus.stream), RedisArgument(entry.id))
        let epochKey = RedisArgument("\(bus.stream):epoch")
        _ = try await bus.redis.send("SET", epochKey, "made by another service")
        _ = try await bus.emit()
        #expect(try await relay.relayBatch() == 1)
        let afterReplay = try await bus.redis.xlen(bus.stream)
        _ = try await bus.emit()
        #expect(try await relay.relayBatch() == 1)
        #expect(try await relay.replayIfRedisLostItsData() == 0)
        #expect(try await bus.redis.send("GET", epochKey).string == "made by another service")
        #expect(try await bus.redis.xlen(bus.stream) == afterReplay + 1)
        await bus.stop()
        try await server.stop()
    }

    /// One replica replaced the epoch and sent the kept rows again; then Redis went back to the
    /// state before (a failover to a replica that missed both). The other replica, which recorded
    /// the older epoch itself, finds the schema recording another: it sends the kept rows again
    /// rather than dropping them as read by groups that have nothing left to read.
    @Test func anEpochRedisWentBackToIsReplayedNotDropped() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        let stale = bus.makeRelay()
        let older = try await bus.relayedThenReplayedUnderANewEpoch(relay: stale, replaying: bus.makeRelay())
        let epochKey = RedisArgument("\(bus.stream):epoch")
        // Back to the older state: the epoch, and the stream without the replay's entry.
        _ = try await bus.redis.send("SET", epochKey, RedisArgument(older))
        let replayed = try #require(try await bus.redis.xrange(bus.stream).last)
        _ = try await bus.redis.send("XDEL", RedisArgument(bus.stream), RedisArgument(replayed.id))
        #expect(try await stale.replayIfRedisLostItsData() == 1)
        #expect(try await bus.producer.query("SELECT count(*)::int FROM outbox_relayed", logger: TestEnvironment.logger).decode(Int.self).first { _ in true } == 1)
        await bus.stop()
        try await server.stop()
    }

    /// A host's crash takes Redis's last writes and the relay together: the relay started again
    /// looks for the entry its schema recorded as sent last, finds it gone, and sends the kept rows
    /// again.
    @Test func aRelayStartedAgainFindsTheLastWritesRedisLost() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        let kept = try await bus.emit()
        let lost = try await bus.emit()
        #expect(try await bus.makeRelay().relayBatch() == 2)
        let entry = try #require(try await bus.redis.xrange(bus.stream).first { $0.fields["id"] == lost.id.uuidString.lowercased() })
        _ = try await bus.redis.send("XDEL", RedisArgument(bus.stream), RedisArgument(entry.id))
        #expect(try await bus.makeRelay().replayIfRedisLostItsData() == 2)
        let ids = try await bus.redis.xrange(bus.stream).compactMap { $0.fields["id"] }
        #expect(Set(ids) == Set([kept, lost].map { $0.id.uuidString.lowercased() }), "\(ids)")
        await bus.stop()
        try await server.stop()
    }

    /// The first batch a schema sends, into a Redis without an epoch, makes one and records it with
    /// its last entry in its own transaction: recorded only after the commit, a crash in between
    /// would leave that batch's loss unseen.
    @Test func theFirstBatchRecordsItsEpochAndLastEntryAsItCommits() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        _ = try await bus.emit()
        let last = try await bus.emit()
        #expect(try await bus.makeRelay().relayBatch() == 2)
        var recorded: [(String, String?, Bool)] = []
        for try await row in try await bus.producer.query(
            "SELECT epoch, last_sent, xmin::text = ALL (SELECT xmin::text FROM outbox_relayed) FROM outbox_relay_epoch", logger: TestEnvironment.logger
        ).decode((String, String?, Bool).self) { recorded.append(row) }
        let entry = try #require(try await bus.redis.xrange(bus.stream).last)
        #expect(entry.fields["id"] == last.id.uuidString.lowercased())
        #expect(recorded.count == 1)
        #expect(recorded.first?.0 == (try await bus.redis.send("GET", RedisArgument("\(bus.stream):epoch")).string))
        #expect(recorded.first?.1 == entry.id)
        #expect(recorded.first?.2 == true, "recorded in the transaction that kept the batch's rows")
        await bus.stop()
        try await server.stop()
    }

    /// A poll read the epoch, then a batch of the same process found a loss, made a new epoch and
    /// sent the kept rows again. The poll's recovery reads the epoch again under the relay's lock:
    /// with the one it read before, it would send the kept rows once more and record an epoch Redis
    /// no longer holds (and the next poll would send them a third time).
    @Test func aRecoveryWithAnEpochReadBeforeAReplayRecordsTheReplays() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        let relay = bus.makeRelay()
        let older = try await bus.relayedThenReplayedUnderANewEpoch(relay: relay, replaying: relay)
        let length = try await bus.redis.xlen(bus.stream)
        #expect(try await relay.recover(seen: older) == 0)
        #expect(try await bus.producer.checkedQuery("SELECT epoch FROM outbox_relay_epoch", decoding: String.self, logger: TestEnvironment.logger) == ["newer"])
        #expect(try await bus.redis.xlen(bus.stream) == length)
        await bus.stop()
        try await server.stop()
    }

    /// A batch had Redis take its events, and its commit is still on its way when Redis restarts
    /// empty and a poll finds the epoch gone. The replay waits for the batch's lock, so it sends
    /// that batch's kept copies too; sent without them, the schema would record the new epoch with
    /// the batch in no Redis at all.
    @Test(.timeLimit(.minutes(1))) func aBatchCommittingWhileRedisRestartsEmptyIsSentAgain() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        let relay = bus.makeRelay()
        let first = try await bus.emit()
        #expect(try await relay.relayBatch() == 1)
        let second = try await bus.emit()
        let logger = TestEnvironment.logger
        let taken = AsyncStream.makeStream(of: Void.self)
        let replayed = AsyncStream.makeStream(of: Int.self)
        let batch = Task {
            // The relay's batch, by hand, held open after Redis took it.
            try await bus.producer.transaction(logger: logger) { connection in
                try await connection.checkedRun("SELECT pg_advisory_xact_lock(hashtext('auth.outbox-relay'))", logger: logger)
                for try await row in try await connection.checkedExecute(OutboxRelay.TakeAndKeep(limit: 10), logger: logger) {
                    _ = try await bus.redis.xadd(
                        bus.stream, maxLength: nil,
                        fields: [("id", row.id.uuidString.lowercased()), ("type", row.type), ("envelope", EventEnvelope.stamping(row.envelope, sequence: row.seq))])
                }
                taken.continuation.yield()
                for await _ in replayed.stream { break }
            }
        }
        for await _ in taken.stream { break }
        _ = try await bus.redis.send("FLUSHALL")
        let poll = Task { try await relay.replayIfRedisLostItsData() }
        // The poll waits for the batch's lock, then sends both events once the batch committed.
        // Counted in this test's database only: other tests' relays run beside it in theirs.
        try await waitUntil(.seconds(10)) {
            try await bus.producer.checkedQuery(
                """
                SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                """, decoding: Int.self, logger: logger
            ).first == 1
        }
        replayed.continuation.yield(0)
        try await batch.value
        #expect(try await poll.value == 2)
        let ids = Set(try await bus.redis.xrange(bus.stream).compactMap { $0.fields["id"] })
        #expect(ids == [first.id.uuidString.lowercased(), second.id.uuidString.lowercased()])
        await bus.stop()
        try await server.stop()
    }

    /// Redis restarted empty, and a consumer made its group anew before the relay looked: that group
    /// has nothing pending and nothing to read, which must not pass for every kept copy having been
    /// read, or copies older than the clocks' margin would be dropped before being sent again.
    @Test func aGroupMadeAnewAfterRedisLostItsDataDropsNoKeptCopy() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        bus.startRelay(poll: .milliseconds(100))
        var emitted: [EventEnvelope] = []
        for _ in 0..<5 { emitted.append(try await bus.emit()) }
        try await bus.waitUntilKept(5)
        // Relayed a minute ago: past the clocks' margin, within the replay window.
        _ = try await bus.producer.query("UPDATE outbox_relayed SET relayed_at = now() - interval '1 minute'", logger: TestEnvironment.logger).collect()
        _ = try await bus.redis.send("FLUSHALL")
        try await bus.redis.xgroupCreate(bus.stream, group: "another-service")
        bus.startConsumer(name: "c1")
        let rows = try await bus.waitForEffects(5, within: .seconds(20))
        #expect(Set(rows.map(\.0)) == Set(emitted.map(\.id)))
        await bus.stop()
        try await server.stop()
    }

    /// Redis lost its data, the kept copies went again, and a group made anew has read only the first
    /// of them: the others stay kept, relayed again just now, until every group has read past them.
    /// Otherwise a second loss before the groups caught up (Redis restarting empty again) would
    /// lose them for good.
    @Test func copiesSentAgainStayKeptUntilEveryGroupHasReadThem() async throws {
        let server = try RedisServer()
        try await server.start()
        let bus = try await BusHarness(redis: server.configuration)
        @Sendable func kept() async throws -> Int {
            try await bus.producer.query("SELECT count(*)::int FROM outbox_relayed", logger: TestEnvironment.logger).decode(Int.self).first { _ in true } ?? 0
        }
        bus.startRelay(poll: .milliseconds(100))
        for _ in 0..<5 { try await bus.emit() }
        try await bus.waitUntilKept(5)
        // Relayed a minute ago: past the clocks' margin, within the replay window.
        _ = try await bus.producer.query("UPDATE outbox_relayed SET relayed_at = now() - interval '1 minute'", logger: TestEnvironment.logger).collect()
        _ = try await bus.redis.send("FLUSHALL")
        try await bus.redis.xgroupCreate(bus.stream, group: "another-service")
        try await waitUntil(.seconds(20)) { try await bus.redis.xlen(bus.stream) == 5 }
        let first = try await bus.redis.send("XREADGROUP", "GROUP", "another-service", "reader", "COUNT", "1", "STREAMS", RedisArgument(bus.stream), ">")
        let firstID = try #require(first.array?.first?.array?.last?.array?.first?.array?.first?.string)
        _ = try await bus.redis.xack(bus.stream, group: "another-service", ids: [firstID])
        // Many polls later, with the group's place at the replay's first entry: all still kept.
        try await Task.sleep(for: .seconds(1))
        #expect(try await kept() == 5)
        await bus.stop()
        try await server.stop()
    }

    /// The inbox forgets an event once no copy of it can be read again (the replay window, then the
    /// stream's retention, and an hour's margin): it would otherwise grow by a row per event forever.
    @Test func theInboxForgetsEventsNoReaderCanMeetAgain() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        let config = bus.busConfig(group: "auth", consumer: "relay")
        #expect(config.retention == .seconds(7 * 86_400) && config.replayWindow == .seconds(86_400))
        let relay = bus.makeRelay()
        _ = try await bus.producer.query(
            """
            INSERT INTO inbox (event_id, type, handled_at)
            SELECT gen_random_uuid(), 'user.registered', now() - age
            FROM unnest(ARRAY['9 days', '8 days 2 hours', '8 days 1 hour 1 minute', '8 days 59 minutes', '6 days', '1 second']::interval[]) AS age
            """, logger: TestEnvironment.logger
        ).collect()
        #expect(try await relay.pruneInbox() == 3)
        #expect(try await relay.pruneInbox() == 0)
        let left = try await bus.producer.query("SELECT count(*)::int FROM inbox", logger: TestEnvironment.logger).decode(Int.self).first { _ in true }
        #expect(left == 3)
        await bus.stop()
    }

    /// A replica read a batch and died holding it; the batch's second event crashes whoever handles
    /// it. The entries are taken over one a claim: the first is handled, the second is claimed and
    /// counted alone, and those after it are not claimed (nor counted) while it holds the consumer,
    /// so a crash loop sends the one event to the dead letters, not its whole batch.
    @Test func abandonedEntriesAreClaimedOneAtATime() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        try await bus.redis.xgroupCreate(bus.stream, group: "social")
        bus.startRelay(poll: .milliseconds(100))
        var emitted: [EventEnvelope] = []
        for _ in 0..<5 { emitted.append(try await bus.emit()) }
        try await waitUntil(.seconds(10)) { try await bus.redis.xlen(bus.stream) == 5 }
        let read = try await bus.redis.xreadgroup(bus.stream, group: "social", consumer: "crashed", count: 5, block: .milliseconds(100))
        #expect(read.count == 5)
        // Idle past the harness's claim time (`claimIdle`): Redis gives them up only then.
        try await Task.sleep(for: .milliseconds(400))
        bus.startConsumer(name: "c1", hangingOn: emitted[1].id)
        try await waitUntil(.seconds(10)) {
            try await bus.redis.deliveryCount(bus.stream, group: "social", id: read[1].id) == 2
        }
        #expect(try await bus.effects().map(\.0) == [emitted[0].id])
        for entry in read[2...] {
            #expect(try await bus.redis.deliveryCount(bus.stream, group: "social", id: entry.id) == 1, "\(entry.id) claimed with the stuck one")
        }
        await bus.stop()
    }

    /// Each process reads under a name of its own, so every restart leaves a consumer in the group:
    /// those idle long enough that hold nothing are dropped; one holding entries stays for the claim.
    @Test func goneConsumersHoldingNothingAreDropped() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        try await bus.redis.xgroupCreate(bus.stream, group: "social")
        bus.startRelay(poll: .milliseconds(100))
        _ = try await bus.emit()
        try await waitUntil(.seconds(10)) { try await bus.redis.xlen(bus.stream) == 1 }
        _ = try await bus.redis.send("XGROUP", "CREATECONSUMER", RedisArgument(bus.stream), "social", "social-gone-1")
        #expect(try await bus.redis.xreadgroup(bus.stream, group: "social", consumer: "social-holding", count: 1, block: .milliseconds(100)).count == 1)
        @Sendable func names() async throws -> Set<String> {
            Set((try await bus.redis.send("XINFO", "CONSUMERS", RedisArgument(bus.stream), "social").array ?? []).compactMap { $0.array?[1].string })
        }
        #expect(try await names() == ["social-gone-1", "social-holding"])
        try await Task.sleep(for: .milliseconds(300))
        // Not started: nothing claims the held entry meanwhile.
        let consumer = bus.makeConsumer(name: "social-live")
        #expect(await consumer.forgetGoneConsumers(idleAtLeast: .milliseconds(200)) == ["social-gone-1"])
        #expect(!(try await names()).contains("social-gone-1"))
        #expect(try await names().contains("social-holding"))
        await bus.stop()
    }

    /// A kept copy goes once every group has read and acknowledged its event (and the clocks'
    /// margin has passed): envelopes carry personal data, a deleted account's included.
    @Test(.timeLimit(.minutes(1))) func keptCopiesGoOnceEveryGroupHasReadThem() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        @Sendable func kept() async throws -> Int {
            try await bus.producer.query("SELECT count(*)::int FROM outbox_relayed", logger: TestEnvironment.logger).decode(Int.self).first { _ in true } ?? 0
        }
        bus.startRelay(poll: .milliseconds(200))
        for _ in 0..<3 { try await bus.emit() }
        // No group has read them yet: kept, however long that takes.
        try await waitUntil(.seconds(20)) { try await kept() == 3 }
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await kept() == 3)
        bus.startConsumer(name: "c1")
        #expect(try await bus.waitForEffects(3).count == 3)
        try await waitUntil(.seconds(OutboxRelay.clockMargin + 20)) { try await kept() == 0 }
        await bus.stop()
    }

    /// Every service reads the one stream, and most of it is other services' business: an entry whose
    /// type the catalogue knows and this service does not read is acknowledged on its `type` field,
    /// its envelope never decoded (this one could not be). An entry of a type nobody knows is still
    /// read, and one that cannot be ends in the dead letters, as before.
    @Test func anotherServicesEventIsAcknowledgedWithoutReadingItsEnvelope() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        try await bus.redis.xgroupCreate(bus.stream, group: "social")
        _ = try await bus.redis.xadd(
            bus.stream, maxLength: nil, fields: [("id", UUID().uuidString.lowercased()), ("type", UserEmailVerified.eventType), ("envelope", "{not an envelope")])
        _ = try await bus.redis.xadd(
            bus.stream, maxLength: nil, fields: [("id", UUID().uuidString.lowercased()), ("type", "user.reshaped"), ("envelope", "{not an envelope")])
        bus.startRelay()
        bus.startConsumer(name: "c1")
        let handled = try await bus.emit()
        #expect(try await bus.waitForEffects(1).map(\.0) == [handled.id])
        try await waitUntil { try await bus.redis.pendingCount(bus.stream, group: "social") == 0 }
        let deadLetters = try await bus.redis.xrange("\(bus.stream):dead:social")
        #expect(deadLetters.count == 1)
        #expect(deadLetters.first?.fields["type"] == "user.reshaped")
        await bus.stop()
    }

    @Test func aHandlerThatAlwaysFailsEndsInTheDeadLetterStream() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        bus.startRelay()
        bus.startConsumer(name: "c1", maxDeliveries: 2, failing: true)
        let poison = try await bus.emit()
        let deadLetters = "\(bus.stream):dead:social"
        try await waitUntil(.seconds(20)) { try await bus.redis.xlen(deadLetters) == 1 }
        let entry = try #require(try await bus.redis.xrange(deadLetters).first)
        #expect(entry.fields["id"] == poison.id.uuidString.lowercased())
        #expect(entry.fields["error"]?.contains("the handler always fails") == true)
        #expect(Int(entry.fields["deliveries"] ?? "") ?? 0 > 2)
        // The entry is acknowledged just after it is copied to the dead-letter stream.
        try await waitUntil(.seconds(5)) { try await bus.redis.pendingCount(bus.stream, group: "social") == 0 }
        #expect(try await bus.effects().isEmpty)
        await bus.stop()
    }

    /// The database's trouble in a handler (a connection closed under it, a statement timeout, a
    /// full disk) is not the event's: up to `maxDeliveries` times it is not counted toward the dead
    /// letters, and the event is handled once the database is well. An event that meets it every
    /// time (a statement of its own that always times out) still ends there, after twice as many.
    @Test func theDatabasesTroubleSendsNoHealthyEventToTheDeadLetters() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        bus.startRelay()
        // Two deliveries forgiven, the third counted: the fourth, within the two allowed, is handled.
        bus.startConsumer(name: "c1", maxDeliveries: 2, databaseTroubleFor: 3)
        let event = try await bus.emit()
        try await waitUntil(.seconds(30)) { try await bus.effects().count == 1 }
        #expect(try await bus.redis.xlen("\(bus.stream):dead:social") == 0)
        #expect(try await bus.effects().map(\.0) == [event.id])
        await bus.stop()

        let always = try await BusHarness(redis: try TestEnvironment.redis())
        always.startRelay()
        always.startConsumer(name: "c1", maxDeliveries: 2, databaseTroubleFor: .max)
        let poison = try await always.emit()
        let deadLetters = "\(always.stream):dead:social"
        try await waitUntil(.seconds(30)) { try await always.redis.xlen(deadLetters) == 1 }
        let entry = try #require(try await always.redis.xrange(deadLetters).first)
        #expect(entry.fields["id"] == poison.id.uuidString.lowercased())
        #expect(entry.fields["error"]?.contains("database") == true, "\(entry.fields)")
        await always.stop()
    }

    /// An event its handler cannot apply yet (what it needs is still on its way) is retried for as
    /// long as the handler says so, past `maxDeliveries`, and handled once ready: not sent to the
    /// dead letters by the count of its tries.
    @Test func anEventNotReadyYetIsRetriedPastMaxDeliveries() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        bus.startRelay()
        bus.startConsumer(name: "c1", maxDeliveries: 2, notReadyFor: 5)
        let event = try await bus.emit()
        try await waitUntil(.seconds(30)) { try await bus.effects().count == 1 }
        #expect(try await bus.effects().map(\.0) == [event.id])
        #expect(try await bus.redis.xlen("\(bus.stream):dead:social") == 0)
        await bus.stop()
    }

    /// One that has waited as long as its handler lets one wait uncounted (`EventStillNotReady`) is
    /// still delivered again, each delivery now counted: one that never becomes ready reaches the
    /// dead letters rather than being dropped or retried for ever.
    @Test func anEventStillNotReadyEndsInTheDeadLetters() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        bus.startRelay()
        bus.startConsumer(name: "c1", maxDeliveries: 2, neverReady: true)
        let event = try await bus.emit()
        let deadLetters = "\(bus.stream):dead:social"
        try await waitUntil(.seconds(30)) { try await bus.redis.xlen(deadLetters) == 1 }
        let entry = try #require(try await bus.redis.xrange(deadLetters).first)
        #expect(entry.fields["id"] == event.id.uuidString.lowercased())
        #expect(entry.fields["error"]?.contains("has not come in all this time") == true, "\(entry.fields)")
        #expect(try await bus.effects().isEmpty)
        await bus.stop()
    }

    @Test func twoReplicasOfOneServiceSplitTheWork() async throws {
        let bus = try await BusHarness(redis: try TestEnvironment.redis())
        try await bus.redis.xgroupCreate(bus.stream, group: "social")
        bus.startConsumer(name: "replica-a")
        bus.startConsumer(name: "replica-b")
        bus.startRelay()
        var ids: Set<UUID> = []
        for _ in 0..<300 { ids.insert(try await bus.emit().id) }
        let rows = try await bus.waitForEffects(300, within: .seconds(30))
        try await Task.sleep(for: .milliseconds(300))
        let final = try await bus.effects()
        #expect(final.count == 300)
        #expect(Set(final.map(\.0)) == ids)
        let byReplica = Dictionary(grouping: rows, by: \.1).mapValues(\.count)
        #expect(byReplica["replica-a", default: 0] > 0)
        #expect(byReplica["replica-b", default: 0] > 0)
        await bus.stop()
    }
}
