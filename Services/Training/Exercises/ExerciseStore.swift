import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// An exercise as stored: the library's (`coachID` nil) or a coach's own.
struct ExerciseRecord: Sendable {
    var id: UUID
    var coachID: UUID?
    var name: String
    var category: String?
    var level: String?
    var equipment: String?
    var force: String?
    var mechanic: String?
    var primaryMuscles: [String]
    var secondaryMuscles: [String]
    var instructions: [String]
    var images: [String]
    var version: Int64
    var createdAt: Date
    var updatedAt: Date
}

/// The fields of an exercise a coach writes.
struct ExerciseFields: Sendable {
    var name: String
    var category: String?
    var level: String?
    var equipment: String?
    var force: String?
    var mechanic: String?
    var primaryMuscles: [String]
    var secondaryMuscles: [String]
    var instructions: [String]
    var images: [String]
}

/// Position in a list of exercises: its rank for the query (0 without one), its name, its id.
struct ExerciseCursor: Codable, Sendable {
    var rank: Int
    var name: String
    var id: UUID
    enum CodingKeys: String, CodingKey { case rank = "r", name = "n", id = "i" }
}

/// The queries on `exercises`. A coach's own exercise is seen by that coach and the coach's linked
/// clients; to anyone else it does not exist.
struct ExerciseStore: Sendable {
    static let columns = """
        e.id, e.coach_id, e.name, e.category, e.level, e.equipment, e.force, e.mechanic, e.primary_muscles, e.secondary_muscles,
        e.instructions, e.images, e.version, e.created_at, e.updated_at
        """

    // Every query below sees the exercises `e` its viewer may: the library, their own, their coaches'
    // (`e.coach_id IS NULL OR e.coach_id = viewer OR e.coach_id IN (the viewer's coaches)`).

    /// A match's rank: ten times the sum of 1000 when the name holds the query's words (in any
    /// form) and the query's trigrams the name holds, per thousand; then, among equals, the share
    /// of the name's trigrams the query holds (0 to 9), so that the closer name comes first.
    /// The least rank of a match: half the query's trigrams.
    static let minimumRank = 5_000

    static func decode(_ row: PostgresRandomAccessRow, from start: Int = 0) throws -> ExerciseRecord {
        func v<T: PostgresDecodable>(_ index: Int, _ type: T.Type) throws -> T { try row[start + index].decode(T.self) }
        return ExerciseRecord(
            id: try v(0, UUID.self), coachID: try v(1, UUID?.self), name: try v(2, String.self), category: try v(3, String?.self),
            level: try v(4, String?.self), equipment: try v(5, String?.self), force: try v(6, String?.self), mechanic: try v(7, String?.self),
            primaryMuscles: try v(8, [String].self), secondaryMuscles: try v(9, [String].self), instructions: try v(10, [String].self),
            images: try v(11, [String].self), version: try v(12, Int64.self), createdAt: try v(13, Date.self), updatedAt: try v(14, Date.self))
    }

    static func decode(_ rows: PostgresRowSequence) async throws -> [ExerciseRecord] {
        var records: [ExerciseRecord] = []
        for try await row in rows { records.append(try decode(row.makeRandomAccess())) }
        return records
    }

    struct Search: Sendable {
        var query: String?
        var muscle: String?
        var equipment: String?
        var level: String?
        var limit: Int
        var after: ExerciseCursor?
    }

    /// A page of the exercises `viewer` sees: with a query, the best matches first (`minimumRank`),
    /// else by name; each with its rank and the name as PostgreSQL's `lower` sorts it, for the next
    /// page's cursor (Swift's `lowercased()` differs for some letters, `İ` and `Σ` among them).
    func search(_ search: Search, viewer: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [(ExerciseRecord, rank: Int, sortName: String)] {
        let after = search.after
        let rows = try await connection.checkedQuery(
            """
            WITH q AS (SELECT name_trigrams(\(search.query)::text) AS t, websearch_to_tsquery('english', coalesce(\(search.query)::text, '')) AS ts)
            SELECT *, lower(s.name) FROM (
                SELECT \(unescaped: Self.columns),
                    CASE WHEN \(search.query)::text IS NULL THEN 0 ELSE
                        10 * ((CASE WHEN e.name_search @@ q.ts THEN 1000 ELSE 0 END) + shared.n * 1000 / greatest(cardinality(q.t), 1))
                        + shared.n * 9 / greatest(cardinality(e.name_trigrams), 1)
                    END AS rank
                FROM exercises e, q,
                    LATERAL (SELECT count(*)::int AS n FROM unnest(e.name_trigrams) AS g WHERE g = ANY (q.t)) AS shared
                WHERE (e.coach_id IS NULL OR e.coach_id = \(viewer) OR e.coach_id IN (SELECT l.coach_id FROM coach_links l WHERE l.client_id = \(viewer)))
                  AND (\(search.muscle)::text IS NULL OR (e.primary_muscles || e.secondary_muscles) @> ARRAY[\(search.muscle)::text])
                  AND (\(search.equipment)::text IS NULL OR e.equipment = \(search.equipment)::text)
                  AND (\(search.level)::text IS NULL OR e.level = \(search.level)::text)
                  AND (\(search.query)::text IS NULL OR e.name_search @@ q.ts OR e.name_trigrams && q.t)
            ) AS s
            WHERE (\(search.query)::text IS NULL OR s.rank >= \(Self.minimumRank))
              AND (\(after == nil) OR s.rank < \(after?.rank ?? 0) OR (s.rank = \(after?.rank ?? 0) AND (lower(s.name), s.id) > (\(after?.name ?? ""), \(after?.id ?? UUID()))))
            ORDER BY s.rank DESC, lower(s.name), s.id
            LIMIT \(search.limit + 1)
            """, logger: logger)
        var found: [(ExerciseRecord, rank: Int, sortName: String)] = []
        for try await row in rows {
            let c = row.makeRandomAccess()
            found.append((try Self.decode(c), try c[15].decode(Int.self), try c[16].decode(String.self)))
        }
        return found
    }

    /// The exercise if `viewer` sees it.
    func find(_ id: UUID, viewer: UUID, on connection: PostgresConnection, logger: Logger) async throws -> ExerciseRecord? {
        try await Self.decode(
            connection.checkedQuery(
                "SELECT \(unescaped: Self.columns) FROM exercises e WHERE e.id = \(id) AND (e.coach_id IS NULL OR e.coach_id = \(viewer) OR e.coach_id IN (SELECT l.coach_id FROM coach_links l WHERE l.client_id = \(viewer)))",
                logger: logger)
        ).first
    }

    /// The coach's own exercise, locked for a change.
    func own(_ id: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> ExerciseRecord? {
        try await Self.decode(
            connection.checkedQuery("SELECT \(unescaped: Self.columns) FROM exercises e WHERE e.id = \(id) AND e.coach_id = \(coach) FOR UPDATE", logger: logger)
        ).first
    }

    /// Of `ids`, the exercises a workout of `coach` may use: the library's and the coach's own. Not a
    /// coach's the caller sees as their client: a workout using it would keep it from its owner's
    /// deletion, and answer its owner `409 exercise_in_use` for a workout they cannot see.
    func usableIDs(_ ids: [UUID], coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Set<UUID> {
        var usable = Set<UUID>()
        let rows = try await connection.checkedQuery(
            "SELECT e.id FROM exercises e WHERE e.id = ANY (\(ids)) AND (e.coach_id IS NULL OR e.coach_id = \(coach))", logger: logger)
        for try await id in rows.decode(UUID.self) { usable.insert(id) }
        return usable
    }

    /// Stores a coach's new exercise; nil when the coach already has one of that name.
    func insert(_ fields: ExerciseFields, id: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> ExerciseRecord? {
        try await Self.decode(
            connection.checkedQuery(
                """
                INSERT INTO exercises AS e (id, coach_id, name, category, level, equipment, force, mechanic, primary_muscles, secondary_muscles, instructions, images)
                VALUES (\(id), \(coach), \(fields.name), \(fields.category), \(fields.level), \(fields.equipment), \(fields.force), \(fields.mechanic),
                        \(fields.primaryMuscles), \(fields.secondaryMuscles), \(fields.instructions), \(fields.images))
                ON CONFLICT (coach_id, lower(name)) WHERE coach_id IS NOT NULL DO NOTHING
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
        ).first
    }

    /// Replaces a coach's exercise's fields; nil when another of the coach's exercises has the name.
    func update(_ id: UUID, with fields: ExerciseFields, on connection: PostgresConnection, logger: Logger) async throws -> ExerciseRecord? {
        do {
            return try await Self.decode(
                connection.checkedQuery(
                    """
                    UPDATE exercises AS e SET name = \(fields.name), category = \(fields.category), level = \(fields.level), equipment = \(fields.equipment),
                        force = \(fields.force), mechanic = \(fields.mechanic), primary_muscles = \(fields.primaryMuscles),
                        secondary_muscles = \(fields.secondaryMuscles), instructions = \(fields.instructions), images = \(fields.images),
                        version = e.version + 1, updated_at = now()
                    WHERE e.id = \(id)
                    RETURNING \(unescaped: Self.columns)
                    """, logger: logger)
            ).first
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            return nil
        }
    }

    enum Deletion { case deleted, missing, inUse }

    /// Deletes a coach's own exercise, unless a workout (or anything else that holds it) uses it.
    func delete(_ id: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Deletion {
        do {
            return try await connection.returnsRow("DELETE FROM exercises WHERE id = \(id) AND coach_id = \(coach) RETURNING 1", logger: logger) ? .deleted : .missing
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23503" {
            return .inUse
        }
    }
}
