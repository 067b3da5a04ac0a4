import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKit

/// A workout as stored.
struct WorkoutRecord: Sendable {
    var id: UUID
    var coachID: UUID
    var name: String
    var notes: String?
    var blocks: [WorkoutBlock]
    /// The blocks as stored (jsonb's text): what a scheduled session copies.
    var blocksJSON: String
    var version: Int64
    var createdAt: Date
    var updatedAt: Date
}

struct WorkoutCursor: Codable, Sendable {
    var createdAt: Date
    var id: UUID
    enum CodingKeys: String, CodingKey { case createdAt = "c", id = "i" }
}

/// The queries on `workouts` and `workout_exercises`. Another coach's workout is nil, as if it did
/// not exist.
struct WorkoutStore: Sendable {
    static let columns = "w.id, w.coach_id, w.name, w.notes, w.blocks::text, w.version, w.created_at, w.updated_at"

    static func decode(_ rows: PostgresRowSequence) async throws -> [WorkoutRecord] {
        var records: [WorkoutRecord] = []
        for try await row in rows {
            let c = row.makeRandomAccess()
            let text = try c[4].decode(String.self)
            records.append(
                WorkoutRecord(
                    id: try c[0].decode(UUID.self), coachID: try c[1].decode(UUID.self), name: try c[2].decode(String.self),
                    notes: try c[3].decode(String?.self), blocks: try JSONDecoder().decode([WorkoutBlock].self, from: Data(text.utf8)), blocksJSON: text,
                    version: try c[5].decode(Int64.self), createdAt: try c[6].decode(Date.self), updatedAt: try c[7].decode(Date.self)))
        }
        return records
    }

    static func json(_ blocks: [WorkoutBlock]) throws -> String { String(decoding: try APIJSON.encode(blocks), as: UTF8.self) }

    /// The coach's workout; `forUpdate` locks it for a change.
    func find(_ id: UUID, coach: UUID, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> WorkoutRecord? {
        try await Self.decode(
            connection.checkedQuery(
                "SELECT \(unescaped: Self.columns) FROM workouts w WHERE w.id = \(id) AND w.coach_id = \(coach) \(unescaped: forUpdate ? "FOR UPDATE" : "")", logger: logger)
        ).first
    }

    /// A page of the coach's workouts, newest first.
    func list(coach: UUID, limit: Int, after: WorkoutCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [WorkoutRecord] {
        try await Self.decode(
            connection.checkedQuery(
                """
                SELECT \(unescaped: Self.columns) FROM workouts w
                WHERE w.coach_id = \(coach)
                  AND (\(after == nil) OR (w.created_at, w.id) < (\(after?.createdAt ?? Date()), \(after?.id ?? UUID())))
                ORDER BY w.created_at DESC, w.id DESC
                LIMIT \(limit + 1)
                """, logger: logger))
    }

    /// The blocks' exercises `coach` may not use (unknown, or another coach's), by block.
    func unusable(_ body: WorkoutBody, coach: UUID, exercises: ExerciseStore, on connection: PostgresConnection, logger: Logger) async throws -> [Problem.FieldError] {
        let ids = Array(Set(body.blocks.map(\.exerciseID)))
        let usable = try await exercises.usableIDs(ids, coach: coach, on: connection, logger: logger)
        return body.blocks.enumerated().compactMap { index, block in
            usable.contains(block.exerciseID) ? nil : .init(field: "blocks[\(index)].exercise_id", message: "is no exercise you can use")
        }
    }

    func insert(_ body: WorkoutBody, id: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> WorkoutRecord {
        let stored = try await Self.decode(
            connection.checkedQuery(
                """
                INSERT INTO workouts AS w (id, coach_id, name, notes, blocks) VALUES (\(id), \(coach), \(body.name), \(body.notes), \(try Self.json(body.blocks))::jsonb)
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
        ).first!
        try await use(body, in: id, on: connection, logger: logger)
        return stored
    }

    func replace(_ id: UUID, with body: WorkoutBody, on connection: PostgresConnection, logger: Logger) async throws -> WorkoutRecord {
        let stored = try await Self.decode(
            connection.checkedQuery(
                """
                UPDATE workouts AS w SET name = \(body.name), notes = \(body.notes), blocks = \(try Self.json(body.blocks))::jsonb,
                    version = w.version + 1, updated_at = now()
                WHERE w.id = \(id)
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
        ).first!
        try await connection.checkedRun("DELETE FROM workout_exercises WHERE workout_id = \(id)", logger: logger)
        try await use(body, in: id, on: connection, logger: logger)
        return stored
    }

    /// Records which exercises the workout uses, so that none of them is deleted while it does.
    private func use(_ body: WorkoutBody, in workout: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        let ids = Array(Set(body.blocks.map(\.exerciseID)))
        try await connection.checkedRun(
            "INSERT INTO workout_exercises (workout_id, exercise_id) SELECT \(workout), unnest(\(ids)::uuid[]) ON CONFLICT DO NOTHING", logger: logger)
    }

    func delete(_ id: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM workouts WHERE id = \(id)", logger: logger)
    }
}
