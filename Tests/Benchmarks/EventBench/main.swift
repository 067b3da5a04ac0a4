import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis

/// Drives the event bus with the kit's own parts, as two processes:
///   EventBench consume  — a consumer service ("social"): EventConsumer + a handler that records
///                         when each event was handled;
///   EventBench produce --rate N --seconds S — a producer service ("auth"): events written through
///                         the outbox in their own transactions at a fixed rate, moved by OutboxRelay.
///   EventBench produce … --live-to FILE — the same, each event a notification sent live to the users
///                         in FILE (one id a line) in turn, as a follow's is: load for the gateway's
///                         event streams (`scripts/bench/gateway`), which no consumer reads.
/// `scripts/bench/events` runs both and reads the figures from the database.

struct BenchPayload: EventPayload {
    static let eventType = "bench.pinged"
    var sequence: Int
}

// As every service executable does first: tasks on the event-loop threads, fewer malloc arenas.
ProcessTuning.apply()

let arguments = CommandLine.arguments
let mode = arguments.dropFirst().first ?? ""
func textOption(_ name: String) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}
func option(_ name: String, _ fallback: Int) -> Int {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count, let value = Int(arguments[index + 1]) else { return fallback }
    return value
}

var logger = Logger(label: "bench-\(mode)")
logger.logLevel = .warning
let service = mode == "produce" ? "auth" : "social"
let config = try ServiceConfig.load(name: service, defaultPort: 0, environment: ProcessInfo.processInfo.environment)
let postgres = PostgresClient(database: config.database, logger: logger)
let redis = RedisClient(configuration: config.redis, logger: logger)
let metrics = EventBusMetrics(registry: MetricsRegistry())
let postgresTask = Task { await postgres.run() }

let benchTable = Migration(
    name: "9000_bench",
    sql: """
        CREATE TABLE IF NOT EXISTS bench_handled (event_id uuid PRIMARY KEY, occurred_at timestamptz NOT NULL, handled_at timestamptz NOT NULL);
        CREATE TABLE IF NOT EXISTS bench_produced (event_id uuid PRIMARY KEY);
        """)
try await MigrationRunner(client: postgres, schema: config.database.schema, migrations: EventBusSchema.migrations + [benchTable], logger: logger).run()

switch mode {
case "consume":
    var handlers = EventHandlers()
    handlers.on(BenchPayload.self) { _, context in
        try await context.connection.checkedRun(
            "INSERT INTO bench_handled (event_id, occurred_at, handled_at) VALUES (\(context.envelope.id), \(context.envelope.occurredAt), clock_timestamp())",
            logger: context.logger)
    }
    var consumerRedis = config.redis
    consumerRedis.poolSize = 1
    let consumer = EventConsumer(
        client: postgres, redis: RedisClient(configuration: consumerRedis, logger: logger), config: config.events,
        handlers: handlers, producer: service, metrics: metrics, logger: logger)
    try await consumer.prepare()
    print("consumer ready", to: &standardError)
    try await consumer.run()

case "produce":
    let rate = option("--rate", 1_000)
    let seconds = option("--seconds", 30)
    // As in a service: the relay has a small pool of its own.
    var relayDatabase = config.database
    relayDatabase.poolSize = 2
    let relayPostgres = PostgresClient(database: relayDatabase, logger: logger)
    let relayPostgresTask = Task { await relayPostgres.run() }
    defer { relayPostgresTask.cancel() }
    let relay = OutboxRelay(client: relayPostgres, redis: redis, config: config.events, schema: config.database.schema, metrics: metrics, logger: logger)
    let relayTask = Task { try await relay.run() }
    let outbox = EventOutbox(producer: service)
    let total = rate * seconds
    // The users live copies go to, when the events are a stream's load; none otherwise.
    let recipients: [UUID] = try {
        guard let path = textOption("--live-to") else { return [] }
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return text.split(whereSeparator: \.isNewline).compactMap { UUID(uuidString: String($0)) }
    }()
    if let path = textOption("--live-to"), recipients.isEmpty {
        print("no user id in \(path)", to: &standardError)
        exit(2)
    }
    let writers = 32  // requests commit concurrently in a real service; so do these
    let interval = Duration.seconds(1) / rate
    let start = ContinuousClock.now
    // Each event is committed in a transaction of its own, as a request would commit its change; the
    // ids of committed events are recorded in bulk afterwards (the harness's bookkeeping should not
    // compete with the bus for the two cores).
    let committedIDs = try await withThrowingTaskGroup(of: [UUID].self) { group in
        for writer in 0..<writers {
            group.addTask {
                var ids: [UUID] = []
                var sequence = writer
                while sequence < total {
                    try await Task.sleep(until: start + interval * sequence, clock: .continuous)
                    let envelope = try await postgres.transaction(logger: logger) { connection in
                        if recipients.isEmpty {
                            return try await outbox.write(BenchPayload(sequence: sequence), userID: nil, on: connection, logger: logger)
                        }
                        let recipient = recipients[sequence % recipients.count]
                        let notification = NotificationCreated(notificationID: UUID(), userID: recipient, kind: .unknown("bench"), actorID: nil)
                        return try await outbox.write(notification, userID: recipient, live: true, on: connection, logger: logger)
                    }
                    ids.append(envelope.id)
                    sequence += writers
                }
                return ids
            }
        }
        var all: [UUID] = []
        for try await ids in group { all += ids }
        return all
    }
    let committed = committedIDs.count
    for chunk in stride(from: 0, to: committedIDs.count, by: 5_000) {
        let ids = Array(committedIDs[chunk..<min(chunk + 5_000, committedIDs.count)])
        try await postgres.checkedQuery("INSERT INTO bench_produced (event_id) SELECT unnest(\(ids)::uuid[])", logger: logger)
    }
    let elapsed = ContinuousClock.now - start
    print("produced \(committed) events in \(elapsed) (\(Int(Double(committed) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18))) /s)")
    // Let the relay drain what is left.
    while try await relay.backlog() > 0 { try await Task.sleep(for: .milliseconds(50)) }
    relayTask.cancel()

default:
    print("usage: EventBench consume | produce [--rate N] [--seconds S] [--live-to FILE]", to: &standardError)
    exit(2)
}
postgresTask.cancel()

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) { FileHandle.standardError.write(Data(string.utf8)) }
}
nonisolated(unsafe) var standardError = StandardError()
