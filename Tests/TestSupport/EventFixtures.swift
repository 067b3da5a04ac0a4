import Foundation
import Models
import NIOCore
import PostgresNIO
import ServiceKitRedis

/// One envelope of `Tests/Fixtures/events`: an event as some release of its producer wrote it. Each
/// type has a fixture of every shape it has had (`<type>.v<version>.json` for the first,
/// `<type>.v<version>+<field>….json` for each shape that added fields), docs/EVENTS.md.
public struct EventFixture: Sendable {
    /// The file's name without `.json`.
    public let name: String
    public let type: String
    public let version: Int
    public let occurredAt: String
    /// The envelope as it travels, as the file has it.
    public let text: String

    public static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/events")

    /// Every fixture, in the order their events happened (they tell one story: accounts, follows,
    /// a coach and a client, their workouts, a deletion).
    public static func all() throws -> [EventFixture] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".json") }
        return try names.map { file in
            let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            let object = try required(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "\(file) is not an object")
            return EventFixture(
                name: String(file.dropLast(5)), type: try required(object["type"] as? String, "\(file) has no type"),
                version: object["version"] as? Int ?? 1, occurredAt: try required(object["occurred_at"] as? String, "\(file) has no occurred_at"), text: text)
        }.sorted { ($0.occurredAt, $0.name) < ($1.occurredAt, $1.name) }
    }

    /// The envelope with every UUID in it replaced by a fresh one, the same one wherever it recurs
    /// in any fixture remapped with `ids`: a test's events are its own, and still about one coach,
    /// one client and one roster entry.
    public func remapped(_ ids: inout [String: String]) -> String {
        Self.remap(text, &ids)
    }

    static func remap(_ text: String, _ ids: inout [String: String]) -> String {
        let pattern = try! NSRegularExpression(pattern: "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
        var result = ""
        var last = text.startIndex
        for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            let range = Range(match.range, in: text)!
            let old = String(text[range])
            let new = ids[old] ?? UUID().uuidString.lowercased()
            ids[old] = new
            result += text[last..<range.lowerBound] + new
            last = range.upperBound
        }
        return result + text[last...]
    }
}

/// `value`, or a failure that says what was missing.
private func required<T>(_ value: T?, _ what: @autoclosure () -> String = "a value") throws -> T {
    guard let value else { throw FixtureProblem(description: what()) }
    return value
}

struct FixtureProblem: Error, CustomStringConvertible {
    var description: String
}

/// What a consumer was given: every fixture, an event of a type no release has made, and one of
/// a type the consumer reads in a version newer than it knows, between them.
public struct DeliveredFixtures: Sendable {
    /// Fixture name → the event id it was published with.
    public let eventIDs: [String: UUID]
    public let fixtures: [EventFixture]
    public let unknownTypeID: UUID
    public let unknownType: String
    public let unknownVersionID: UUID
    public let unknownVersionType: String
    /// Fixture UUID → the one this run used, for the fixtures' people, entries and sessions.
    public let ids: [String: String]

    /// The ids of the fixtures of `types`.
    public func eventIDs(of types: Set<String>) -> Set<UUID> {
        Set(fixtures.filter { types.contains($0.type) }.map { eventIDs[$0.name]! })
    }

    /// The id this run used for a fixture's UUID (`Tests/Fixtures/events` names its people).
    public func id(_ fixtureID: String) -> UUID {
        UUID(uuidString: ids[fixtureID]!)!
    }
}

extension EventFixture {
    /// The coach, the client, alice and bob of the fixtures, and the coach's roster entry.
    public static let coach = "c0ac0000-0000-4000-8000-000000000001"
    public static let client = "c11e0000-0000-4000-8000-000000000002"
    public static let alice = "a11ce000-0000-4000-8000-000000000003"
    public static let bob = "b0b00000-0000-4000-8000-000000000004"
    public static let rosterEntry = "e0e00000-0000-4000-8000-000000000005"

    /// Puts every fixture on `stream` as a producer's relay puts events (fresh ids, in the order
    /// they happened), an event of an unknown type after the first and one of `newerVersionOf` in
    /// version 2 after the second, then waits until `group` has read and acknowledged every entry.
    public static func deliverAll(
        to stream: String, group: String, redis: RedisClient, newerVersionOf newerType: String, within limit: Duration = .seconds(90)
    ) async throws -> DeliveredFixtures {
        let fixtures = try all()
        var ids: [String: String] = [:]
        var eventIDs: [String: UUID] = [:]
        var entries: [(id: UUID, type: String, json: String)] = []
        for fixture in fixtures {
            let json = fixture.remapped(&ids)
            let envelope = try EventEnvelope(json: json)
            eventIDs[fixture.name] = envelope.id
            entries.append((envelope.id, envelope.type, json))
        }
        let unknownType = "fixture.reshaped"
        let unknownTypeID = UUID()
        let unknown = try envelope(
            id: unknownTypeID, type: unknownType, version: 1,
            data: ["user_id": ids[client]!, "note": "a type a later release may add"], user: ids[client]!)
        entries.insert((unknownTypeID, unknownType, unknown), at: min(1, entries.count))
        let newest = try required(fixtures.last { $0.type == newerType }, "no fixture of \(newerType)")
        let newerID = UUID()
        var object = try required(try JSONSerialization.jsonObject(with: Data(newest.remapped(&ids).utf8)) as? [String: Any])
        object["id"] = newerID.uuidString.lowercased()
        object["version"] = 2
        let newer = String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        entries.insert((newerID, newerType, newer), at: min(3, entries.count))

        var lastID = ""
        for entry in entries {
            lastID = try await redis.xadd(stream, maxLength: nil, fields: [("id", entry.id.uuidString.lowercased()), ("type", entry.type), ("envelope", entry.json)])
        }
        let last = lastID
        try await waitUntil(limit) {
            guard try await redis.pendingCount(stream, group: group) == 0, let delivered = try await lastDelivered(stream, group: group, redis: redis) else { return false }
            return !earlier(delivered, than: last)
        }
        return DeliveredFixtures(
            eventIDs: eventIDs, fixtures: fixtures, unknownTypeID: unknownTypeID, unknownType: unknownType, unknownVersionID: newerID,
            unknownVersionType: newerType, ids: ids)
    }

    private static func envelope(id: UUID, type: String, version: Int, data: [String: Any], user: String) throws -> String {
        let object: [String: Any] = [
            "id": id.uuidString.lowercased(), "type": type, "version": version, "occurred_at": "2027-01-01T00:00:00.000Z", "producer": "auth",
            "user_id": user, "data": data, "sequence": 1_000_000,
        ]
        return String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    /// The group's `last-delivered-id`, from `XINFO GROUPS`.
    private static func lastDelivered(_ stream: String, group: String, redis: RedisClient) async throws -> String? {
        let reply = try await redis.send("XINFO", "GROUPS", RedisArgument(stream))
        for info in reply.array ?? [] {
            let fields = info.array ?? []
            var values: [String: String] = [:]
            var index = 0
            while index + 1 < fields.count {
                if let key = fields[index].string { values[key] = fields[index + 1].string }
                index += 2
            }
            if values["name"] == group { return values["last-delivered-id"] }
        }
        return nil
    }

    /// Stream ids compared as their two numbers.
    private static func earlier(_ a: String, than b: String) -> Bool {
        func parts(_ id: String) -> (Int, Int) {
            let p = id.split(separator: "-").compactMap { Int($0) }
            return (p.first ?? 0, p.count > 1 ? p[1] : 0)
        }
        return parts(a) < parts(b)
    }
}

/// Gives a running service every fixture (`EventFixture.deliverAll`) and says what went wrong: a
/// fixture of a type it `consumes` that did not reach its inbox (handled and committed), one of
/// another type that did, a handler failure, a dead letter, or an unknown type or version that was
/// handled or not counted in `events_ignored_total`. Empty when the service read every shape of every
/// type as it should.
public func checkConsumesEveryFixture(
    service: String, stream: String, database: TestDatabase, adminPort: Int, consumes: Set<String>, newerVersionOf: String
) async throws -> (DeliveredFixtures, [String]) {
    let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
    let result: Result<(DeliveredFixtures, [String]), any Error>
    do {
        result = .success(
            try await checkFixtures(
                service: service, stream: stream, database: database, adminPort: adminPort, consumes: consumes, newerVersionOf: newerVersionOf, redis: redis))
    } catch {
        result = .failure(error)
    }
    await redis.close()
    return try result.get()
}

private func checkFixtures(
    service: String, stream: String, database: TestDatabase, adminPort: Int, consumes: Set<String>, newerVersionOf: String, redis: RedisClient
) async throws -> (DeliveredFixtures, [String]) {
    let delivered = try await EventFixture.deliverAll(to: stream, group: service, redis: redis, newerVersionOf: newerVersionOf)
    var failures: [String] = []
    @Sendable func inbox() async throws -> Set<UUID> {
        try await withClient(database.config(for: service)) { client in
            var ids: Set<UUID> = []
            for try await id in try await client.query("SELECT event_id FROM inbox", logger: TestEnvironment.logger).decode(UUID.self) { ids.insert(id) }
            return ids
        }
    }
    // The group has acknowledged every entry; the handled ones are committed by then, but give a
    // loaded machine time anyway: what is still missing after it is reported below.
    let expected = delivered.eventIDs(of: consumes)
    try? await waitUntil(.seconds(30)) { expected.isSubset(of: try await inbox()) }
    let inbox = try await inbox()
    for fixture in delivered.fixtures {
        let handled = inbox.contains(delivered.eventIDs[fixture.name]!)
        if consumes.contains(fixture.type) && !handled { failures.append("\(service) did not handle \(fixture.name)") }
        if !consumes.contains(fixture.type) && handled { failures.append("\(service) handled \(fixture.name), a type it is not said to consume") }
    }
    if inbox.contains(delivered.unknownTypeID) { failures.append("\(service) handled an event of an unknown type") }
    if inbox.contains(delivered.unknownVersionID) { failures.append("\(service) handled \(delivered.unknownVersionType) version 2, which it does not know") }
    let dead = try await redis.xlen("\(stream):dead:\(service)")
    if dead != 0 { failures.append("\(service) dead-lettered \(dead) events") }
    let metrics = String(buffer: try await ConcurrentClient.send(port: adminPort, "GET", "/metrics").body)
    func sample(_ name: String, _ labels: [String]) -> Double? {
        metrics.split(separator: "\n").first { line in
            line.hasPrefix(name) && labels.allSatisfy { line.contains($0) }
        }.flatMap { $0.split(separator: " ").last.flatMap { Double($0) } }
    }
    if let errors = sample("events_handler_errors_total", []), errors != 0 { failures.append("\(service) had \(Int(errors)) handler errors") }
    if sample("events_ignored_total", [#"type="\#(delivered.unknownType)""#, #"reason="unknown_type""#]) != 1 {
        failures.append("\(service) did not count the unknown type in events_ignored_total")
    }
    if sample("events_ignored_total", [#"type="\#(delivered.unknownVersionType)""#, #"reason="unknown_version""#]) != 1 {
        failures.append("\(service) did not count \(delivered.unknownVersionType) version 2 in events_ignored_total")
    }
    return (delivered, failures)
}
