import Foundation
import Hummingbird
import PostgresNIO
import ServiceKit

/// The client's History: performed sessions newest first (optionally only the sets of one
/// exercise), and per exercise the best set by estimated one-repetition maximum.
struct HistoryRoutes {
    let training: Training

    func add(to router: Router<ServiceRequestContext>) {
        let training = router.group("v1/training", context: AuthenticatedContext.self)
        training.get("history", use: history)
        training.get("records", use: records)
    }

    struct HistoryCursor: Codable {
        var performedAt: Date
        var id: UUID
        enum CodingKeys: String, CodingKey { case performedAt = "p", id = "i" }
    }

    struct HistoryPage: ResponseEncodable {
        var items: [SessionDetail]
        @Nullable var nextCursor: String?
        enum CodingKeys: String, CodingKey { case items, nextCursor = "next_cursor" }
    }

    @Sendable func history(_ request: Request, context: AuthenticatedContext) async throws -> HistoryPage {
        try context.requireNotCoach()
        let page = try PageRequest(query: request)
        var exercise: UUID?
        if let text = request.uri.queryParameters["exercise_id"].map(String.init) {
            guard let id = UUID(parsing: text) else { throw APIError.validation([.init(field: "exercise_id", message: "must be a UUID")]) }
            exercise = id
        }
        let after = try page.position(HistoryCursor.self)
        let training = self.training
        let user = context.caller.userID
        // One snapshot: a log committed between the page and its sets shows in both or neither.
        return try await training.postgres.snapshot(logger: context.logger) { connection in
            let unit = try await training.sessions.settings(of: user, on: connection, logger: context.logger).unit
            let rows = try await SessionStore.decode(
                connection.checkedQuery(
                    """
                    SELECT \(unescaped: SessionStore.columns) FROM sessions s
                    WHERE s.client_id = \(user) AND s.performed_at IS NOT NULL
                      AND (\(exercise)::uuid IS NULL OR EXISTS (SELECT 1 FROM session_sets ss WHERE ss.session_id = s.id AND ss.exercise_id = \(exercise)::uuid))
                      AND (\(after == nil) OR (s.performed_at, s.id) < (\(after?.performedAt ?? Date()), \(after?.id ?? UUID())))
                    ORDER BY s.performed_at DESC, s.id DESC
                    LIMIT \(page.limit + 1)
                    """, logger: context.logger))
            let (items, next) = Cursor.page(rows, limit: page.limit) { HistoryCursor(performedAt: $0.performedAt ?? Date(), id: $0.id) }
            let sets = try await training.sessions.loggedSets(of: items.map(\.id), unit: unit, exercise: exercise, on: connection, logger: context.logger)
            return HistoryPage(items: items.map { SessionDetail(session: $0, unit: unit, sets: sets[$0.id] ?? [], comments: []) }, nextCursor: next)
        }
    }

    struct Record: Encodable {
        var exerciseID: UUID
        @Nullable var exerciseName: String?
        var reps: Int
        var weightKg: Double
        var weight: Double
        var estimatedOneRepMaxKg: Double
        var estimatedOneRepMax: Double
        var performedOn: String
        var sessionID: UUID
        enum CodingKeys: String, CodingKey {
            case exerciseID = "exercise_id", exerciseName = "exercise_name", reps, weightKg = "weight_kg", weight, estimatedOneRepMaxKg = "estimated_1rm_kg"
            case estimatedOneRepMax = "estimated_1rm", performedOn = "performed_on", sessionID = "session_id"
        }
    }

    struct Records: ResponseEncodable {
        var items: [Record]
        var unit: WeightUnit
        enum CodingKeys: String, CodingKey { case items, unit = "weight_unit" }
    }

    /// Per exercise, the done set with weight and reps whose Epley estimate, e1RM = w × (1 + r / 30)
    /// (w itself for a single), is highest; the first day it was reached (the client's day, as
    /// logged), and among the sets of that day the first (a tie within one session is answered the
    /// same each time, by block and set). One statement. Divided
    /// last, as w × (30 + r) / 30: `r / 30.0` keeps a fixed number of digits, so an estimate equal
    /// to another's (4 × 105 and 1 × 119) compared unequal, and a half (32.005) rounded the wrong way.
    @Sendable func records(_ request: Request, context: AuthenticatedContext) async throws -> Records {
        try context.requireNotCoach()
        let training = self.training
        let user = context.caller.userID
        return try await training.postgres.withConnectionOnItsLoop { connection in
            let unit = try await training.sessions.settings(of: user, on: connection, logger: context.logger).unit
            var items: [Record] = []
            let rows = try await connection.checkedQuery(
                """
                SELECT exercise_id, name, reps, kg::text, \(unescaped: unit.sql("kg")), round(e1rm, 2)::text, round(\(unescaped: unit == .lbs ? "e1rm / \(WeightUnit.kilogramsPerPound)" : "e1rm"), 2)::text, performed_on::text, session_id
                FROM (
                    SELECT DISTINCT ON (ss.exercise_id) ss.exercise_id, s.blocks->(ss.block - 1)->>'exercise_name' AS name, ss.reps, ss.weight_kg AS kg,
                           CASE WHEN ss.reps = 1 THEN ss.weight_kg ELSE ss.weight_kg * (30 + ss.reps) / 30 END AS e1rm, ss.performed_on, ss.session_id
                    FROM session_sets ss JOIN sessions s ON s.id = ss.session_id
                    WHERE ss.client_id = \(user) AND ss.done AND ss.reps > 0 AND ss.weight_kg > 0
                    ORDER BY ss.exercise_id, e1rm DESC, ss.performed_on, ss.performed_at, ss.session_id, ss.block, ss.set_number
                ) best
                ORDER BY name, exercise_id
                """, logger: context.logger)
            for try await (exercise, name, reps, kg, weight, e1rm, e1rmShown, day, session) in rows.decode(
                (UUID, String?, Int32, String, String, String, String, String, UUID).self)
            {
                items.append(
                    Record(
                        exerciseID: exercise, exerciseName: name, reps: Int(reps), weightKg: Double(kg) ?? 0, weight: Double(weight) ?? 0,
                        estimatedOneRepMaxKg: Double(e1rm) ?? 0, estimatedOneRepMax: Double(e1rmShown) ?? 0, performedOn: day, sessionID: session))
            }
            return Records(items: items, unit: unit)
        }
    }
}
