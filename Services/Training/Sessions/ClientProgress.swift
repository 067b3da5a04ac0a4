import Foundation
import Hummingbird
import Logging
import PostgresNIO
import ServiceKit

/// What a coach sees of one client: the sessions of some days with what was logged against what was
/// prescribed, and adherence over the last 7 and 30 days.
///
/// Adherence counts the sessions due in the window (today's included once logged or skipped;
/// cancelled ones not at all): a completed session counts 1, a partial one ½, a skipped or missed
/// one 0; `rate` is that sum over the sessions due, null when none were.
struct ClientProgress: ResponseEncodable {
    struct Adherence: Encodable {
        var due: Int
        var completed: Int
        var partial: Int
        var skipped: Int
        var missed: Int
        @Nullable var rate: Double?
        enum CodingKeys: String, CodingKey { case due, completed, partial, skipped, missed, rate }
    }

    struct Client: Encodable {
        var id: UUID
        @Nullable var userID: UUID?
        var status: String
        var timeZone: String
        enum CodingKeys: String, CodingKey { case id, userID = "user_id", status, timeZone = "time_zone" }
    }

    var client: Client
    var from: String
    var to: String
    var today: String
    var adherence7: Adherence
    var adherence30: Adherence
    var unit: WeightUnit
    var sessions: [SessionRecord]
    var sets: [UUID: [LoggedSet]]

    enum CodingKeys: String, CodingKey { case adherence, client, from, sessions = "items", to, today, unit = "weight_unit" }

    func encode(to encoder: any Encoder) throws {
        var json = encoder.container(keyedBy: CodingKeys.self)
        try json.encode(["last_7_days": adherence7, "last_30_days": adherence30], forKey: .adherence)
        try json.encode(client, forKey: .client)
        try json.encode(from, forKey: .from)
        try json.encode(sessions.map { SessionDetail(session: $0, unit: unit, sets: sets[$0.id] ?? [], comments: []) }, forKey: .sessions)
        try json.encode(to, forKey: .to)
        try json.encode(today, forKey: .today)
        try json.encode(unit, forKey: .unit)
    }

    static let maxDays = 92

    static func load(
        _ entry: RosterStore.Entry, from: String?, to: String?, viewer: UUID, training: Training, on connection: PostgresConnection, logger: Logger
    ) async throws -> ClientProgress {
        let zone = try await entry.clientID.asyncMap { try await training.sessions.settings(of: $0, on: connection, logger: logger).timeZone } ?? "UTC"
        let unit = try await training.sessions.settings(of: viewer, on: connection, logger: logger).unit
        var range = ("", "", "", Int32(0))
        for try await row in try await connection.checkedQuery(
            """
            WITH st AS (SELECT (now() AT TIME ZONE \(zone))::date AS today),
            r AS (SELECT today, coalesce(\(from)::date, today - 30) AS first, coalesce(\(to)::date, today + 7) AS last FROM st)
            SELECT today::text, first::text, last::text, last - first FROM r
            """, logger: logger
        ).decode((String, String, String, Int32).self) { range = row }
        let (today, first, last, span) = range
        // One of the two given, the other's default may still fall on the wrong side of it.
        guard first <= last else {
            throw APIError.validation([
                to == nil ? .init(field: "from", message: "must not be after to (by default 7 days from today)") : .init(field: "to", message: "must not be before from")
            ])
        }
        // As My Workouts: a range the response can hold whole, every session with its logged sets.
        guard span < maxDays else {
            throw APIError.validation([
                to == nil
                    ? .init(field: "from", message: "must be within \(maxDays) days of to (by default 7 days from today)")
                    : .init(field: "to", message: "must be within \(maxDays) days of from")
            ])
        }
        let sessions = try await SessionStore.decode(
            connection.checkedQuery(
                """
                SELECT \(unescaped: SessionStore.columns) FROM sessions s
                WHERE s.roster_entry_id = \(entry.id) AND s.coach_id = \(viewer) AND s.scheduled_on BETWEEN \(first)::date AND \(last)::date
                ORDER BY s.scheduled_on, s.created_at, s.id LIMIT 1000
                """, logger: logger))
        let sets = try await training.sessions.loggedSets(of: sessions.map(\.id), unit: unit, on: connection, logger: logger)
        var adherence: [Int: Adherence] = [:]
        for try await (days, due, completed, partial, skipped, missed) in try await connection.checkedQuery(
            """
            SELECT w.days, count(s.id) FILTER (WHERE s.status IN ('completed', 'partial', 'skipped') OR s.scheduled_on < \(today)::date)::int,
                   count(s.id) FILTER (WHERE s.status = 'completed')::int, count(s.id) FILTER (WHERE s.status = 'partial')::int,
                   count(s.id) FILTER (WHERE s.status = 'skipped')::int, count(s.id) FILTER (WHERE s.status = 'scheduled' AND s.scheduled_on < \(today)::date)::int
            FROM (VALUES (7), (30)) AS w(days)
            LEFT JOIN sessions s ON s.roster_entry_id = \(entry.id) AND s.coach_id = \(viewer) AND s.status <> 'cancelled'
                 AND s.scheduled_on > \(today)::date - w.days AND s.scheduled_on <= \(today)::date
            GROUP BY w.days
            """, logger: logger
        ).decode((Int, Int, Int, Int, Int, Int).self) {
            let rate = due == 0 ? nil : ((Double(completed) + Double(partial) / 2) / Double(due) * 1000).rounded() / 1000
            adherence[days] = Adherence(due: due, completed: completed, partial: partial, skipped: skipped, missed: missed, rate: rate)
        }
        let none = Adherence(due: 0, completed: 0, partial: 0, skipped: 0, missed: 0, rate: nil)
        return ClientProgress(
            client: Client(id: entry.id, userID: entry.clientID, status: entry.stage.name, timeZone: zone), from: first, to: last, today: today,
            adherence7: adherence[7] ?? none, adherence30: adherence[30] ?? none, unit: unit, sessions: sessions, sets: sets)
    }
}

extension Optional {
    fileprivate func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
