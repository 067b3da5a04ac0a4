import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitRedis
import ServiceLifecycle
import Synchronization

/// Moves committed outbox rows to the Redis stream (and the live copies of live ones to their
/// user's `LiveStream`), oldest first.
/// Woken when a transaction of this process that wrote events commits (`WorkBell`), with a slow poll
/// as the net for rows written elsewhere.
/// A row is deleted only in the transaction that saw Redis take it, so if Redis is down the rows wait
/// and are sent when it returns; a crash between `XADD` and commit can send a row twice, which the
/// consumers' inbox makes harmless.
///
/// Once sent, a row is kept in `outbox_relayed` for `replayWindow`: until every group has read an
/// event, the stream is its only other copy. Redis holds an epoch (a random value, made by the first
/// relay that finds none), read on every poll and, in the same round trip, before every batch; the
/// relay records in its schema the epoch it sends under. An epoch other than the recorded one means
/// Redis lost its data since (restarted without persistence, replaced): the kept rows are sent
/// again, oldest first. Consumers' groups, made anew from the stream's start, read them; what a
/// consumer had handled already its inbox skips, and an older event arriving after a newer one is
/// what `EventOrder` is for.
///
/// A Redis can also lose only its last writes and keep its epoch: a crash within its fsync interval
/// (`appendfsync everysec`), a restore from an older snapshot, a failover to a replica behind. So
/// each poll, and each batch before its own entries, also looks for the last entry this relay
/// sent: gone, yet not older than the stream's first entry (not trimmed), it was lost, and the
/// relay makes a new epoch, which sends every relay's kept rows again.
package final class OutboxRelay: Service, Sendable {
    private let client: PostgresClient
    private let redis: RedisClient
    private let config: EventBusConfig
    private let schema: String
    private let metrics: EventBusMetrics
    private let logger: Logger
    private let batchSize: Int

    package init(client: PostgresClient, redis: RedisClient, config: EventBusConfig, schema: String, metrics: EventBusMetrics, logger: Logger, batchSize: Int = 200) {
        self.client = client
        self.redis = redis
        self.config = config
        self.schema = schema
        self.metrics = metrics
        self.logger = logger
        self.batchSize = batchSize
    }

    package func run() async throws {
        var worker = NotifiedWorker(bell: EventOutbox.bell, pollInterval: config.relayPollInterval, logger: logger)
        worker.onTick = { [self] in
            if let backlog = try? await self.backlog() { self.metrics.outboxBacklog.set(Int64(backlog)) }
            // Debug: while Redis is down this fails on every poll, and the relay already says so.
            do { try await self.trimExpired() } catch {
                self.logger.debug("could not trim expired events", metadata: ["error": "\(error)"])
            }
            do { try await self.replayIfRedisLostItsData() } catch {
                self.logger.debug("could not check the stream's marker", metadata: ["error": "\(error)"])
            }
            do { try await self.pruneInbox() } catch {
                self.logger.debug("could not prune the inbox", metadata: ["error": "\(error)"])
            }
        }
        try await worker.run { [self] in
            var moved = 0
            var lockedOut = 0
            // Drain in batches until one comes back empty. Between small batches the relay waits a
            // moment so that rows committed meanwhile go out together: under a steady stream of
            // commits this turns a transaction per event into one per few milliseconds.
            while true {
                guard let batch = try await self.relayBatch() else {
                    // A replica's relay is mid-batch. Its own process rang it, not this one, so it may
                    // stop before our rows commit: try again a few times before leaving them to the poll.
                    lockedOut += 1
                    if lockedOut > 5 { return moved }
                    try await Task.sleep(for: .milliseconds(20))
                    continue
                }
                lockedOut = 0
                moved += batch
                if batch == 0 { return moved }
                if batch < self.batchSize { try await Task.sleep(for: .milliseconds(5)) }
            }
        }
    }

    /// Drops the events older than `config.retention` from the stream and this group's dead letters.
    /// Every service's relay does it (on each poll; with nothing to drop it costs Redis a lookup), so
    /// the stream is kept trimmed while any service runs.
    func trimExpired(now: Date = Date()) async throws {
        let cutoff = Int64((now.timeIntervalSince1970 - Double(config.retention.components.seconds)) * 1000)
        guard cutoff > 0 else { return }
        for stream in [config.stream, config.deadLetterStream] {
            try await redis.xtrim(stream, minID: "\(cutoff)-0")
        }
    }

    /// Drops the inbox's record of events handled longer ago than any entry can be read again: a
    /// kept copy may be sent again up to `replayWindow` after the event, and then stays in the
    /// stream for `retention`; an hour's margin covers the clocks and a late reader. A few thousand
    /// rows a poll, so that a large backlog goes without one long statement.
    @discardableResult
    func pruneInbox(now: Date = Date()) async throws -> Int {
        let horizon = config.retention + config.replayWindow + .seconds(3_600)
        let cutoff = now.addingTimeInterval(-Double(horizon.components.seconds))
        return try await client.checkedQuery(
            """
            WITH gone AS (DELETE FROM inbox WHERE event_id IN (SELECT event_id FROM inbox WHERE handled_at < \(cutoff) LIMIT 5000) RETURNING 1)
            SELECT count(*)::int FROM gone
            """, decoding: Int.self, logger: logger
        ).first ?? 0
    }

    /// The key holding Redis's epoch.
    var epochKey: String { "\(config.stream):epoch" }

    /// `GET` of the epoch: what a poll reads first (a batch sends `epochProbes` ahead of its `XADD`s).
    private var epochProbe: [RedisArgument] { ["GET", RedisArgument(epochKey)] }

    /// The epoch this schema's rows were last sent under, once read from the schema.
    private let recordedEpoch = Mutex<String?>(nil)
    /// Whether the last batch reached fewer replicas than configured: said once when it starts, and
    /// once when it ends.
    private let shortOfReplicas = Mutex(false)

    private func noteReplicas(held: Int, wanted: Int) {
        let short = held < wanted
        let changed = shortOfReplicas.withLock { was in
            defer { was = short }
            return was != short
        }
        guard changed else { return }
        if short {
            logger.warning(
                "relayed batches reach fewer replicas than REDIS_WAIT_REPLICAS: sent all the same, kept in outbox_relayed to be sent again if a failover loses them",
                metadata: ["replicas": "\(held)", "wanted": "\(wanted)"])
        } else {
            logger.notice("relayed batches reach their replicas again", metadata: ["replicas": "\(held)"])
        }
    }

    /// On every poll: sends the kept rows again if Redis has lost its data, and otherwise drops the
    /// kept rows no longer needed. Returns how many it sent again.
    @discardableResult
    func replayIfRedisLostItsData() async throws -> Int {
        guard config.replayWindow > .zero else { return 0 }
        let logger = self.logger
        let windowSeconds = Int(config.replayWindow.components.seconds)
        // Redis's epoch first. A Redis that lost its data holds groups made anew since (a consumer
        // meeting NOGROUP makes its own), which have nothing pending and nothing to read: read that
        // way, every kept row would look read by all and be dropped before it was sent again.
        let seen = try await redis.send(epochProbe).string
        let sent = try await recover(seen: seen)
        guard sent == 0, seen != nil else { return sent }
        let recorded = try await recordedLastSent()
        // The schema records another epoch than Redis holds, though this process thought it had
        // recorded that one: another replica replaced it, and Redis has gone back to an older state
        // since (a failover to a replica that missed the change). Nothing is dropped on that: the
        // kept rows go again.
        guard recorded.epoch == seen else { return try await recover(seen: seen, checkingTheSchema: true) }
        if let last = recorded.last, try await lost(last) { return try await sendAgainAfterLosing(last, under: seen) }
        // A row is needed until every group has read and acknowledged its event: up to the oldest
        // entry a group has pending, or else the last it was given. Envelopes carry personal data,
        // so they are kept no longer (the stream's ids are Redis's clock, the rows PostgreSQL's: a
        // margin covers the two disagreeing), and never past the window. The groups are only this
        // Redis's if the epoch is still the one checked.
        let readByAll = try await readByEveryGroup()
        guard try await redis.send(epochProbe).string == seen else { return 0 }
        try await client.withConnectionOnItsLoop { connection in
            try await connection.checkedRun(
                """
                DELETE FROM outbox_relayed WHERE relayed_at < now() - make_interval(secs => \(windowSeconds))
                    OR coalesce(sent_again_at, relayed_at) < to_timestamp(\(readByAll.map { Double($0) / 1000 }) - \(Self.clockMargin))
                """, logger: logger)
        }
        return 0
    }

    /// The last entry this schema's relays sent under the recorded epoch, as the schema records it
    /// when each batch commits: whichever replica sent it, and whether or not this process ran then
    /// (a host's crash takes Redis's last second and the relay together). Read under the relay's
    /// lock by a batch, so no other batch moves it meanwhile.
    private func recordedLastSent(on connection: PostgresConnection? = nil) async throws -> (epoch: String?, last: StreamID?) {
        let query: PostgresQuery = "SELECT epoch, last_sent FROM outbox_relay_epoch"
        var recorded: (String, String?)?
        if let connection {
            // Read to the end: the transaction goes on on this connection.
            for try await row in try await connection.checkedQuery(query, logger: logger).decode((String, String?).self) { recorded = row }
        } else {
            try await client.withConnectionOnItsLoop { connection in
                for try await row in try await connection.checkedQuery(query, logger: logger).decode((String, String?).self) { recorded = row }
            }
        }
        return (recorded?.0, recorded?.1.flatMap { StreamID($0) })
    }

    /// Whether the stream no longer holds `entry`, which it was not trimmed of: the stream's first
    /// entry is not after it, or the stream is empty though `entry` is younger than the retention.
    private func lost(_ entry: StreamID) async throws -> Bool {
        let replies = try await redis.pipeline(lossProbes(entry))
        for reply in replies { try reply.checked() }
        return isLost(entry, replies[...])
    }

    /// `XRANGE` of `entry` alone, then of the stream's first entry: what `isLost` reads.
    private func lossProbes(_ entry: StreamID) -> [[RedisArgument]] {
        let id = RedisArgument(entry.description)
        return [["XRANGE", RedisArgument(config.stream), id, id], ["XRANGE", RedisArgument(config.stream), "-", "+", "COUNT", "1"]]
    }

    private func isLost(_ entry: StreamID, _ replies: ArraySlice<RESPValue>) -> Bool {
        guard replies.count == 2, replies[replies.startIndex].array?.isEmpty ?? true else { return false }
        let first = replies[replies.startIndex + 1].array?.first?.array?.first?.string.flatMap { StreamID($0) }
        if let first { return first <= entry }
        let retained = UInt64(max(0, Date().timeIntervalSince1970 - Double(config.retention.components.seconds)) * 1000)
        return entry.milliseconds > retained
    }

    /// Redis lost `last`, which it had taken under `epoch`, and kept that epoch: a new one, so that
    /// every relay sends its kept rows again. Only in place of `epoch`: a relay that found the loss
    /// beside this one (a poll and a batch, another service) has made the new one already, and
    /// this relay takes that one instead of making every service replay again.
    private func sendAgainAfterLosing(_ last: StreamID, under epoch: String?) async throws -> Int {
        let replacement = UUID().uuidString.lowercased()
        let now = try await redis.eval(
            Self.replaceEpochScript, keys: [epochKey], arguments: [RedisArgument(epoch ?? ""), RedisArgument(replacement)]
        ).string
        if now == replacement {
            logger.warning("Redis lost entries it had taken, its epoch kept: a new epoch", metadata: ["last_sent": "\(last)"])
        }
        return try await recover(seen: now)
    }

    /// Sets the epoch (`KEYS[1]`) to `ARGV[2]` if it is `ARGV[1]`; returns the epoch Redis holds then.
    static let replaceEpochScript = """
        local held = redis.call('GET', KEYS[1])
        if held == ARGV[1] then
          redis.call('SET', KEYS[1], ARGV[2])
          return ARGV[2]
        end
        return held
        """

    /// Seconds by which Redis's and PostgreSQL's clocks may disagree.
    static let clockMargin = 10.0

    /// The milliseconds (Redis's clock) before which every consumer group of the stream has read and
    /// acknowledged every entry; nil when there is no group, or no stream.
    private func readByEveryGroup() async throws -> UInt64? {
        let groups: [RESPValue]
        do {
            groups = try await redis.send("XINFO", "GROUPS", RedisArgument(config.stream)).array ?? []
        } catch RedisError.server(let message) where message.contains("no such key") {
            return nil
        }
        var oldest: UInt64?
        for group in groups {
            let info = group.fields
            guard let name = info["name"]?.string, var point = info["last-delivered-id"]?.string.flatMap({ StreamID($0) }) else { continue }
            let pending = info["pending"]?.int ?? 0
            // A group with nothing pending and nothing left to read has read up to now.
            if pending == 0, info["lag"]?.int == 0 {
                let time = try await redis.send("TIME").array ?? []
                if let seconds = time.first?.string.flatMap({ UInt64($0) }), let micros = time.dropFirst().first?.string.flatMap({ UInt64($0) }) {
                    point = StreamID(milliseconds: seconds * 1000 + micros / 1000, sequence: 0)
                }
            }
            if pending > 0,
                let smallest = try await redis.send("XPENDING", RedisArgument(config.stream), RedisArgument(name)).array?.dropFirst().first?.string
                    .flatMap({ StreamID($0) })
            {
                point = min(point, smallest)
            }
            oldest = min(oldest ?? point.milliseconds, point.milliseconds)
        }
        return oldest
    }

    /// Makes sure the schema records Redis's current epoch (a new one if Redis has none); when it
    /// recorded another, sends every kept row again. Returns how many rows it sent again.
    ///
    /// The replay holds the relay's lock: a batch that took its rows and had Redis take them before
    /// Redis lost its data may still be committing, and its kept copies are only visible once it has.
    /// Waiting for its lock, the replay sends them too; without it, the schema would record the new
    /// epoch and that batch would be lost. The epoch is read again under the lock: `seen`, read
    /// before it, may be older than one a replay recorded meanwhile (a batch of this process that
    /// found a loss), and recording it would send every kept row again, twice.
    /// `checkingTheSchema`: whatever this process last recorded (the schema may since have moved on).
    @discardableResult
    func recover(seen: String?, checkingTheSchema: Bool = false) async throws -> Int {
        let logger = self.logger
        if !checkingTheSchema, let seen, recordedEpoch.withLock({ $0 }) == seen { return 0 }
        let lockKey = self.lockKey
        let (sent, current) = try await client.transaction(logger: logger) { connection -> (Int, String) in
            try await connection.checkedRun("SELECT pg_advisory_xact_lock(hashtext(\(lockKey)))", logger: logger)
            let current = try await self.currentEpoch()
            // Read under the lock: another process's relay may have sent them again and recorded it.
            let (recorded, _) = try await self.recordedLastSent(on: connection)
            guard recorded != current else { return (0, current) }
            // No epoch recorded: nothing was sent under one, so nothing kept can be missing. Under a
            // new epoch, the entry sent last is the replay's (none when nothing was kept): entries of
            // the stream the old epoch named are nothing to look for.
            let (sent, replayedLast) = recorded == nil ? (0, nil) : try await self.replay(on: connection)
            try await connection.checkedRun(
                """
                INSERT INTO outbox_relay_epoch (epoch, last_sent) VALUES (\(current), \(replayedLast?.description))
                ON CONFLICT (only_row) DO UPDATE SET epoch = excluded.epoch, last_sent = excluded.last_sent
                """, logger: logger)
            return (sent, current)
        }
        recordedEpoch.withLock { $0 = current }
        if sent > 0 {
            metrics.relayed.increment(by: Int64(sent))
            logger.warning("Redis had lost its data: events relayed within the replay window sent again", metadata: ["events": "\(sent)"])
        }
        return sent
    }

    /// The epoch Redis holds, made if it holds none (`SET NX`: of relays finding none at once, the
    /// first one's is kept).
    private func currentEpoch() async throws -> String {
        let replies = try await redis.pipeline(epochProbes)
        for reply in replies { try reply.checked() }
        guard let epoch = replies.last?.string else { throw RedisError.unexpectedReply("no epoch after SET NX") }
        return epoch
    }

    /// `SET NX` of a new epoch, then `GET` of the one Redis holds.
    private var epochProbes: [[RedisArgument]] {
        [["SET", RedisArgument(epochKey), RedisArgument(UUID().uuidString.lowercased()), "NX"], epochProbe]
    }

    /// Sends the kept rows, oldest first, in batches; how many, and the stream id of the last.
    /// Each batch's rows record when they were sent again (`sent_again_at`, the clock's time as the
    /// batch goes, not the transaction's start): their copies in the stream are the new entries,
    /// which the groups made anew have yet to read, and a row goes only once every group has read
    /// past that time. Judged by their first sending, the rows would all look read as soon as a
    /// group had read the replay's first entry, and a second loss of Redis's data before the groups
    /// had read the rest would lose them. Their first sending still bounds how long they are kept.
    private func replay(on connection: PostgresConnection) async throws -> (Int, StreamID?) {
        let logger = self.logger
        let windowSeconds = Int(config.replayWindow.components.seconds)
        var after: Int64 = 0
        var sent = 0
        var lastID: StreamID?
        while true {
            var rows: [(Int64, UUID, String, String)] = []
            for try await row in try await connection.checkedQuery(
                """
                SELECT seq, id, type, envelope FROM outbox_relayed
                WHERE seq > \(after) AND relayed_at >= now() - make_interval(secs => \(windowSeconds))
                ORDER BY seq LIMIT 500
                """, logger: logger
            ).decode((Int64, UUID, String, String).self) { rows.append(row) }
            guard let last = rows.last else { return (sent, lastID) }
            let commands = rows.map { seq, id, type, envelope in
                RedisClient.xaddCommand(
                    config.stream, maxLength: config.maxLength,
                    fields: [("id", id.uuidString.lowercased()), ("type", type), ("envelope", EventEnvelope.stamping(envelope, sequence: seq))])
            }
            let replies = try await redis.pipeline(commands)
            for reply in replies { try reply.checked() }
            try await connection.checkedRun(
                """
                UPDATE outbox_relayed SET sent_again_at = clock_timestamp()
                WHERE seq > \(after) AND seq <= \(last.0) AND relayed_at >= now() - make_interval(secs => \(windowSeconds))
                """, logger: logger)
            lastID = replies.last?.string.flatMap { StreamID($0) } ?? lastID
            sent += rows.count
            after = last.0
        }
    }

    /// The advisory lock a relay of this schema holds while it sends (`relayBatch`, `recover`).
    private var lockKey: String { schema + ".outbox-relay" }

    /// Sends up to one batch; returns how many rows it moved, or nil when another relay of this schema
    /// holds the lock. One relay per schema works at a time
    /// (a transaction-scoped advisory lock), so replicas cannot interleave batches and the stream keeps
    /// commit order. Live copies go in the same pipeline, in the same order (each is one script: the
    /// user's live stream and their channel): a batch Redis refuses stays in the outbox with its live
    /// copies, so a session's end is never lost to a hiccup; a retried batch may send one twice, which
    /// a stream's reader takes as the hint to refresh it is.
    func relayBatch() async throws -> Int? {
        let logger = self.logger
        let batchSize = self.batchSize
        let redis = self.redis
        let config = self.config
        let lockKey = self.lockKey
        let keep = config.replayWindow > .zero
        let outcome = try await client.transaction(logger: logger) { connection -> (Int, String?, StreamID?, String?)? in
            var haveLock = false
            for try await value in try await connection.checkedExecute(TryLock(key: lockKey), logger: logger) { haveLock = value }
            guard haveLock else { return nil }
            // Taken out of the outbox in the same statement that reads them: if Redis refuses the batch
            // the transaction rolls back and the rows are still there.
            var taken: [Take.Row] = []
            if keep {
                for try await row in try await connection.checkedExecute(TakeAndKeep(limit: batchSize), logger: logger) { taken.append(row) }
            } else {
                for try await row in try await connection.checkedExecute(Take(limit: batchSize), logger: logger) { taken.append(row) }
            }
            taken.sort { $0.seq < $1.seq }  // RETURNING has no order of its own; the stream keeps commit order
            var commands: [[RedisArgument]] = []
            var lastAdd = 0
            for row in taken {
                // The row's number goes in the envelope: consumers order events of this producer by
                // it, since `occurred_at` is only the clock of the process that wrote the row.
                let envelope = EventEnvelope.stamping(row.envelope, sequence: row.seq)
                lastAdd = commands.count
                commands.append(
                    RedisClient.xaddCommand(
                        config.stream, maxLength: config.maxLength,
                        fields: [
                            ("id", row.id.uuidString.lowercased()), ("type", row.type), ("envelope", envelope),
                        ]))
                if let recipient = row.liveTo {
                    commands.append(LiveStream.publishCommand(envelope: envelope, type: row.type, to: recipient))
                }
            }
            // One pipelined round trip for the batch, in commit order, after the epoch's probe.
            guard !taken.isEmpty else { return (0, nil, nil, nil) }
            // The epoch (made if Redis has none, so that the batch is sent under one), and whether the
            // entry the schema's relays sent last is still there: a Redis that lost only its last
            // writes keeps its epoch, and a poll that looked only after this batch would find this
            // batch's entries, not the loss.
            let recorded: (epoch: String?, last: StreamID?) = keep ? try await self.recordedLastSent(on: connection) : (nil, nil)
            let previous = recorded.last
            let probes = (keep ? self.epochProbes : []) + (previous.map(self.lossProbes) ?? [])
            // With replicas (Redis Sentinel), the batch counts as sent once they hold it too: a
            // failover to one of them then loses none of it.
            let replicas = redis.configuration.replicasToWaitFor
            let waits: [[RedisArgument]] = replicas > 0 ? [["WAIT", RedisArgument(replicas), "1000"]] : []
            let replies = try await redis.pipeline(probes + commands + waits)
            // The probes too: an error read as an empty answer would pass for a loss.
            for reply in replies { try reply.checked() }
            if replicas > 0, let held = replies.last?.int {
                // Short of replicas, the batch is committed all the same: the primary holds it, and a
                // primary promoted by a failover has no replica until another joins. Sent again and
                // again instead, the batch would hold back every row behind it and repeat its live
                // copies. A failover before a replica took it loses it from the stream, and its kept
                // copy (`outbox_relayed`) is what is sent again.
                self.noteReplicas(held: held, wanted: replicas)
            }
            guard keep else { return (taken.count, nil, nil, nil) }
            // Redis answering no epoch just after one was set is losing its data as this batch goes:
            // the batch is not committed, and goes again.
            guard let seen = replies[1].string else { throw RedisError.unexpectedReply("no epoch after SET NX") }
            // A loss under another epoch than the one recorded is what the replay that records it
            // sends again (it waits for this batch's lock, so this batch's rows are among them).
            let lostPrevious = seen == recorded.epoch ? previous.flatMap { self.isLost($0, replies[2..<probes.count]) ? $0 : nil } : nil
            let sentLast = replies[probes.count + lastAdd].string.flatMap { StreamID($0) }
            guard recorded.epoch != nil else {
                // The schema's first batch: the epoch it was sent under and its last entry are
                // recorded as it commits. Recorded after, a crash in between would leave its loss
                // unseen.
                try await connection.checkedRun(
                    "INSERT INTO outbox_relay_epoch (epoch, last_sent) VALUES (\(seen), \(sentLast?.description))", logger: logger)
                return (taken.count, seen, nil, seen)
            }
            // The entry sent last moves on only while nothing was found lost: a loss stays findable
            // (by the next batch or poll) until the kept rows have been sent again, which records
            // the replay's last entry in its place.
            if lostPrevious == nil, let sentLast {
                try await connection.checkedRun("UPDATE outbox_relay_epoch SET last_sent = \(sentLast.description)", logger: logger)
            }
            return (taken.count, seen, lostPrevious, recorded.epoch)
        }
        guard let (moved, probed, lostPrevious, recordedNow) = outcome else { return nil }
        if moved > 0 { metrics.relayed.increment(by: Int64(moved)) }
        // If Redis lost what earlier batches sent, they go again: every kept row, this batch's too. A
        // row numbered after this batch's first may have been sent before it (its transaction
        // committed first), to the Redis that lost it; the consumers' inboxes skip a second copy.
        if let seen = probed {
            // The schema, read under the batch's lock, records the epoch the batch went under (or
            // another, which `recover` replaces, sending the kept rows again). What this process
            // knew is kept: a `recover` since this batch's read may have recorded a newer one.
            if seen == recordedNow {
                recordedEpoch.withLock { known in if known == nil { known = seen } }
            } else {
                try await recover(seen: seen, checkingTheSchema: true)
            }
            // Found only under the recorded epoch, which the line above leaves as it is.
            if let lostPrevious { _ = try await sendAgainAfterLosing(lostPrevious, under: seen) }
        }
        return moved
    }

    // The relay's two statements run for every batch of every service, so they are prepared once
    // per connection (PostgreSQL parsed and planned the unnamed ones on every call).

    /// This schema's relay lock, for the transaction.
    struct TryLock: OneParameterStatement {
        static let name = "outbox_relay.try_lock"
        static let sql = "SELECT pg_try_advisory_xact_lock(hashtext($1))"
        static let bindingDataTypes: [PostgresDataType] = [.text]
        typealias Row = Bool

        let key: String

        var parameter: String { key }

        func decodeRow(_ row: PostgresRow) throws -> Bool { try row.makeRandomAccess()[0].decode(Bool.self) }
    }

    /// Up to `limit` of the oldest rows, taken out of the outbox (the table on the connection's
    /// `search_path`, the service's own schema), each with who gets its live copy (nil: nobody).
    struct Take: OneParameterStatement {
        static let name = "outbox_relay.take_live_to"
        static let sql = """
            DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT $1)
            RETURNING seq, id, type, CASE WHEN live THEN coalesce(live_to, user_id) END, envelope
            """
        static let bindingDataTypes: [PostgresDataType] = [.int8]
        typealias Row = (seq: Int64, id: UUID, type: String, liveTo: UUID?, envelope: String)

        let limit: Int

        var parameter: Int64 { Int64(limit) }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let cells = row.makeRandomAccess()
            return (
                try cells[0].decode(Int64.self), try cells[1].decode(UUID.self), try cells[2].decode(String.self),
                try cells[3].decode(UUID?.self), try cells[4].decode(String.self)
            )
        }
    }

    /// `Take`, with a copy of each row kept in `outbox_relayed` in the same statement.
    struct TakeAndKeep: OneParameterStatement {
        static let name = "outbox_relay.take_and_keep"
        static let sql = """
            WITH taken AS (
                DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT $1)
                RETURNING seq, id, type, live, live_to, user_id, envelope
            ), kept AS (
                INSERT INTO outbox_relayed (seq, id, type, envelope) SELECT seq, id, type, envelope FROM taken
            )
            SELECT seq, id, type, CASE WHEN live THEN coalesce(live_to, user_id) END, envelope FROM taken
            """
        static let bindingDataTypes: [PostgresDataType] = [.int8]
        typealias Row = Take.Row

        let limit: Int

        var parameter: Int64 { Int64(limit) }

        func decodeRow(_ row: PostgresRow) throws -> Row { try Take(limit: limit).decodeRow(row) }
    }

    /// Rows not yet sent, for the backlog gauge.
    package func backlog() async throws -> Int {
        try await client.checkedQuery("SELECT count(*)::int8 FROM outbox", decoding: Int64.self, logger: logger).first.map(Int.init) ?? 0
    }
}
