import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// The queries on sessions, their logged sets and comments, and users' settings. Each runs on the
/// caller's connection, so a route composes them in one transaction with the events they cause.
struct SessionStore: Sendable {
    /// A session's columns; `s` is `sessions`.
    static let columns = """
        s.id, s.coach_id, s.roster_entry_id, s.client_id, s.workout_id, s.name, s.notes, s.blocks::text, s.scheduled_on::text, s.status, s.performed_at,
        s.log_notes, s.skip_reason, s.created_at, s.updated_at, s.version
        """
    typealias Row = (UUID, UUID?, UUID?, UUID?, UUID?, String, String?, String, String, String, Date?, String?, String?, Date, Date, Int)

    static func record(_ row: Row) throws -> SessionRecord {
        let (id, coach, entry, client, workout, name, notes, blocks, day, status, performed, logNotes, skip, created, updated, version) = row
        var session = SessionRecord(
            id: id, coachID: coach, rosterEntryID: entry, clientID: client, workoutID: workout, name: name, notes: notes,
            blocks: try JSONDecoder.api.decode([SessionBlock].self, from: Data(blocks.utf8)), scheduledOn: day, status: status, performedAt: performed,
            logNotes: logNotes, skipReason: skip, createdAt: created, updatedAt: updated)
        session.version = version
        return session
    }

    /// The session in `columns` order starting at column `first` of a row that has more.
    static func record(_ cells: PostgresRandomAccessRow, from first: Int) throws -> SessionRecord {
        try record(
            (
                cells[first].decode(UUID.self), cells[first + 1].decode(UUID?.self), cells[first + 2].decode(UUID?.self), cells[first + 3].decode(UUID?.self),
                cells[first + 4].decode(UUID?.self), cells[first + 5].decode(String.self), cells[first + 6].decode(String?.self), cells[first + 7].decode(String.self),
                cells[first + 8].decode(String.self), cells[first + 9].decode(String.self), cells[first + 10].decode(Date?.self), cells[first + 11].decode(String?.self),
                cells[first + 12].decode(String?.self), cells[first + 13].decode(Date.self), cells[first + 14].decode(Date.self), cells[first + 15].decode(Int.self)
            ))
    }

    static func decode(_ rows: PostgresRowSequence) async throws -> [SessionRecord] {
        var sessions: [SessionRecord] = []
        for try await row in rows.decode(Row.self) { sessions.append(try record(row)) }
        return sessions
    }

    /// The blocks of workout `w` as a session copies them: each exercise's name beside its id.
    static let copiedBlocks = """
        (SELECT coalesce(jsonb_agg(b.block || jsonb_build_object('exercise_name', e.name) ORDER BY b.n), '[]'::jsonb)
         FROM jsonb_array_elements(w.blocks) WITH ORDINALITY AS b(block, n)
         LEFT JOIN exercises e ON e.id = (b.block->>'exercise_id')::uuid)
        """

    // MARK: settings

    struct Settings: Sendable {
        var timeZone: String
        var unit: WeightUnit
    }

    func settings(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Settings {
        for try await settings in try await connection.checkedExecute(SettingsQuery(user: user), logger: logger) { return settings }
        return Settings(timeZone: "UTC", unit: .kg)
    }

    /// Read with every session a client opens or logs: prepared once per connection.
    struct SettingsQuery: PostgresPreparedStatement {
        static let name = "training.user_settings"
        static let sql = "SELECT time_zone, weight_unit FROM user_settings WHERE user_id = $1"
        static let bindingDataTypes: [PostgresDataType] = [.uuid]
        typealias Row = Settings
        var user: UUID
        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(user)
            return bindings
        }
        func decodeRow(_ row: PostgresRow) throws -> Settings {
            let (zone, unit) = try row.decode((String, String).self)
            return Settings(timeZone: zone, unit: WeightUnit(rawValue: unit) ?? .kg)
        }
    }

    func saveSettings(_ settings: Settings, of user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO user_settings (user_id, time_zone, weight_unit) VALUES (\(user), \(settings.timeZone), \(settings.unit.rawValue))
            ON CONFLICT (user_id) DO UPDATE SET time_zone = EXCLUDED.time_zone, weight_unit = EXCLUDED.weight_unit, updated_at = now()
            """, logger: logger)
    }

    // MARK: reading

    /// A session the caller is a party to: its client, or its coach. Anyone else finds nothing.
    func find(_ id: UUID, party: UUID, lock: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> SessionRecord? {
        if lock {
            for try await session in try await connection.checkedExecute(FindForUpdateQuery(id: id, party: party), logger: logger) { return session }
        } else {
            for try await session in try await connection.checkedExecute(FindQuery(id: id, party: party), logger: logger) { return session }
        }
        return nil
    }

    /// Whether the coach of session `s` still coaches its client: the roster entry is pending or
    /// accepted. Once the client left (or the entry was removed), the coach no longer reads the
    /// session nor hears of what the client does with it.
    static let coachLinked = """
        EXISTS (SELECT 1 FROM roster_entries r WHERE r.id = s.roster_entry_id AND r.coach_id = s.coach_id AND r.stage < \(RosterStore.Stage.left.rawValue))
        """

    /// What `recordWithLink` reads after `columns`.
    static let linkAndPush = "\(coachLinked) AS coach_linked, s.pushed_at IS NOT NULL AS pushed, s.cancelled_at"

    /// The session in `columns` order, then `linkAndPush`.
    static func recordWithLink(_ row: PostgresRow) throws -> SessionRecord {
        let cells = row.makeRandomAccess()
        var session = try record(cells, from: 0)
        session.coachLinked = try cells[16].decode(Bool.self)
        session.pushed = try cells[17].decode(Bool.self)
        session.cancelledAt = try cells[18].decode(Date?.self)
        return session
    }

    /// Every route on one session starts here: prepared once per connection, as are the other
    /// statements of a log, since parsing and planning them each time cost PostgreSQL more than
    /// running them. Its client finds it; its coach, while still coaching that client.
    struct FindQuery: PostgresPreparedStatement {
        static let name = "training.session_of_party"
        static let sql = """
            SELECT \(SessionStore.columns), \(SessionStore.linkAndPush) FROM sessions s
            WHERE s.id = $1 AND (s.client_id = $2 OR (s.coach_id = $2 AND \(SessionStore.coachLinked)))
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid]
        typealias Row = SessionRecord
        var id: UUID
        var party: UUID
        func makeBindings() throws -> PostgresBindings { SessionStore.bindings(id, party) }
        func decodeRow(_ row: PostgresRow) throws -> SessionRecord { try SessionStore.recordWithLink(row) }
    }

    /// `FindQuery`, locking the session until the transaction ends.
    struct FindForUpdateQuery: PostgresPreparedStatement {
        static let name = "training.session_of_party_for_update"
        static let sql = FindQuery.sql + " FOR UPDATE OF s"
        static let bindingDataTypes = FindQuery.bindingDataTypes
        typealias Row = SessionRecord
        var id: UUID
        var party: UUID
        func makeBindings() throws -> PostgresBindings { SessionStore.bindings(id, party) }
        func decodeRow(_ row: PostgresRow) throws -> SessionRecord { try SessionStore.recordWithLink(row) }
    }

    static func bindings(_ values: UUID...) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: values.count)
        for value in values { bindings.append(value) }
        return bindings
    }

    /// The client's sessions from `from` through `to` (their local days; nil: today in their zone),
    /// cancelled ones left out, in the settings they are read in: one statement, whose one row is the
    /// response body.
    /// The list as PostgreSQL wrote it, and whether it holds no session.
    func days(of client: UUID, from: String?, to: String?, on connection: PostgresConnection, logger: Logger) async throws -> (list: EncodedJSON, isEmpty: Bool) {
        var found: (ByteBuffer, Bool)?
        for try await row in try await connection.checkedExecute(DaysQuery(client: client, from: from, to: to), logger: logger) { found = row }
        guard let (body, isEmpty) = found else { throw DaysQuery.noRow }
        return (EncodedJSON(rendered: body), isEmpty)
    }

    /// Prepared once per connection: today's sessions are what every app asks for as it opens, and
    /// a statement parsed and planned on each request costs PostgreSQL more than the rows do.
    /// `range` is materialized, and carries the client, so that the client and the days reach the
    /// index as values of a row, unknown to the planner whatever the parameters. Otherwise PostgreSQL
    /// planned the statement again on every execution: a plan made for a client with few sessions
    /// (beside one with many) or for NULL days cost less than the generic one.
    ///
    /// PostgreSQL writes the list as `SessionView` does (the keys in its order, nulls written, UUIDs
    /// in lowercase, RFC 3339 times with milliseconds cut), each session's blocks as its row keeps
    /// them for the reader's unit (`0004_session_blocks_views.sql`), and compact: `row_to_json` and
    /// `array_to_json` add no spaces, unlike `json_build_object` and `jsonb`. Decoding each session's
    /// blocks and encoding the list in the service was most of what a list cost it; a test holds
    /// the two writers to one answer. Whether the list is empty comes beside it, from the aggregate
    /// (none over no rows), not from the list written out again.
    struct DaysQuery: PostgresPreparedStatement {
        static let name = "training.session_days_json"
        static let sql = """
            WITH st AS (
                SELECT coalesce(u.time_zone, 'UTC') AS tz, coalesce(u.weight_unit, 'kg') AS unit,
                       (now() AT TIME ZONE coalesce(u.time_zone, 'UTC'))::date AS today
                FROM (SELECT 1) AS one LEFT JOIN user_settings u ON u.user_id = $1),
            range AS MATERIALIZED (SELECT $1::uuid AS client, tz, unit, coalesce($2::date, today) AS first, coalesce($3::date, today) AS last FROM st)
            SELECT row_to_json(list)::text, found.items IS NULL
            FROM range r
            CROSS JOIN LATERAL (
                SELECT array_to_json(array_agg(\(sessionJSON) ORDER BY s.scheduled_on, s.created_at, s.id)) AS items
                FROM sessions s
                WHERE s.client_id = r.client AND s.scheduled_on BETWEEN r.first AND r.last AND s.status <> 'cancelled') found
            CROSS JOIN LATERAL (
                SELECT r.first::text AS "from", coalesce(found.items, '[]') AS items, r.tz AS time_zone, r.last::text AS "to", r.unit AS weight_unit) list
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .text]
        typealias Row = (ByteBuffer, Bool)
        static let noRow = APIError(.internalServerError, code: "internal_error", detail: "The sessions could not be read.")

        /// One session of `s`, read in `r.unit`: `SessionView`'s keys, the blocks as kept for that unit
        /// (written here for a session kept from before they were).
        static let sessionJSON = """
            (SELECT row_to_json(v) FROM (SELECT coalesce(CASE WHEN r.unit = 'lbs' THEN s.blocks_view_lbs ELSE s.blocks_view_kg END, session_blocks_json(s.blocks, r.unit)) AS blocks,
                s.client_id, s.coach_id, \(time("s.created_at")) AS created_at, s.id, s.name, s.notes, \(time("s.performed_at")) AS performed_at,
                s.scheduled_on::text AS scheduled_on, s.skip_reason, s.status, \(time("s.updated_at")) AS updated_at, s.version, r.unit AS weight_unit,
                s.workout_id) v)
            """

        /// RFC 3339 in UTC with the milliseconds cut, as `RFC3339.string(from:)` writes a date.
        static func time(_ column: String) -> String {
            "to_char(\(column) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        }

        var client: UUID
        var from: String?
        var to: String?

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(client)
            try bindings.append(from)
            try bindings.append(to)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> (ByteBuffer, Bool) {
            try row.decode((ByteBuffer, Bool).self)
        }
    }

    func loggedSets(of sessions: [UUID], unit: WeightUnit, exercise: UUID? = nil, on connection: PostgresConnection, logger: Logger) async throws -> [UUID: [LoggedSet]] {
        guard !sessions.isEmpty else { return [:] }
        var sets: [UUID: [LoggedSet]] = [:]
        for try await (session, set) in try await connection.checkedExecute(LoggedSetsQuery(sessions: sessions, unit: unit, exercise: exercise), logger: logger) {
            sets[session, default: []].append(set)
        }
        return sets
    }

    struct LoggedSetsQuery: PostgresPreparedStatement {
        static let name = "training.logged_sets"
        static let sql = """
            SELECT ss.session_id, ss.block, ss.set_number, ss.exercise_id, s.blocks->(ss.block - 1)->>'exercise_name', ss.reps, ss.duration_s, ss.distance_m::float8,
                   ss.weight_kg::text, \(WeightUnit.sql("ss.weight_kg", inUnit: "$2")), ss.rpe::float8, ss.done
            FROM session_sets ss JOIN sessions s ON s.id = ss.session_id
            WHERE ss.session_id = ANY($1) AND ($3::uuid IS NULL OR ss.exercise_id = $3)
            ORDER BY ss.session_id, ss.block, ss.set_number
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuidArray, .text, .uuid]
        typealias Row = (UUID, LoggedSet)
        var sessions: [UUID]
        var unit: WeightUnit
        var exercise: UUID?
        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(sessions)
            bindings.append(unit.rawValue)
            try bindings.append(exercise)
            return bindings
        }
        func decodeRow(_ row: PostgresRow) throws -> Row {
            let cells = row.makeRandomAccess()
            return (try cells[0].decode(UUID.self), try SessionStore.loggedSet(cells, from: 1))
        }
    }

    /// A logged set from the eleven cells from `first` on: block, set number, exercise, its name,
    /// reps, duration, distance, weight in kilograms and in the reader's unit (exact decimal text),
    /// RPE, done.
    static func loggedSet(_ cells: PostgresRandomAccessRow, from first: Int) throws -> LoggedSet {
        let (block, number, exercise, name) = (
            try cells[first].decode(Int16.self), try cells[first + 1].decode(Int16.self), try cells[first + 2].decode(UUID.self), try cells[first + 3].decode(String?.self)
        )
        let (reps, duration, distance) = (try cells[first + 4].decode(Int32?.self), try cells[first + 5].decode(Int32?.self), try cells[first + 6].decode(Double?.self))
        let (kg, weight, rpe, done) = (
            try cells[first + 7].decode(String?.self), try cells[first + 8].decode(String?.self), try cells[first + 9].decode(Double?.self), try cells[first + 10].decode(Bool.self)
        )
        return LoggedSet(
            block: Int(block), set: Int(number), exerciseID: exercise, exerciseName: name, reps: reps.map(Int.init), durationS: duration.map(Int.init),
            distanceM: distance, weightKg: kg.flatMap(Double.init), weight: weight.flatMap(Double.init), rpe: rpe, done: done)
    }

    /// The most comments one session holds: a session's detail carries its latest ones, and the
    /// thread pages through the rest, so neither grows without bound.
    static let maxComments = 500
    /// How many of the latest comments a session's detail carries.
    static let commentsInDetail = 50

    /// What a session's detail carries beside the session: the viewer's weight unit, the sets
    /// logged in it (in that unit) and its latest `commentsInDetail` comments, oldest first (as a
    /// thread reads). One statement, where three had cost a round trip each inside every log post.
    func detail(of session: UUID, viewer: UUID, on connection: PostgresConnection, logger: Logger) async throws -> (
        unit: WeightUnit, sets: [LoggedSet], comments: [CommentView]
    ) {
        var detail: (unit: WeightUnit, sets: [LoggedSet], comments: [CommentView]) = (.kg, [], [])
        for try await row in try await connection.checkedExecute(DetailQuery(session: session, viewer: viewer, comments: Self.commentsInDetail), logger: logger) {
            detail.unit = row.unit
            switch row.part {
            case .set(let set): detail.sets.append(set)
            case .comment(let comment): detail.comments.append(comment)
            case nil: break
            }
        }
        return detail
    }

    /// Prepared once per connection. The sets and the comments come as rows of one shape, each
    /// with the viewer's unit; a session with neither gives one row with the unit alone.
    struct DetailQuery: PostgresPreparedStatement {
        static let name = "training.session_detail"
        static let sql = """
            WITH v AS (SELECT coalesce((SELECT weight_unit FROM user_settings WHERE user_id = $2), 'kg') AS unit)
            \(parts(sets: "session_sets ss JOIN sessions s ON s.id = ss.session_id WHERE ss.session_id = $1", session: "$1", comments: "$3"))
            """

        /// The detail's columns (`decodeRow` reads them from `first` on), from `v` (the viewer's
        /// unit) and the sets of `sets` (as `ss`, beside its session as `s`): the log's statement
        /// gives its own, as it wrote them.
        static func parts(sets: String, session: String, comments: String) -> String {
            """
            SELECT v.unit, d.part, d.block, d.set_number, d.exercise_id, d.exercise_name, d.reps, d.duration_s, d.distance_m, d.weight_kg, d.weight,
                   d.rpe, d.done, d.comment_id, d.author_id, d.author_role, d.text, d.created_at
            FROM v LEFT JOIN (
                SELECT 0 AS part, ss.block, ss.set_number, ss.exercise_id, s.blocks->(ss.block - 1)->>'exercise_name' AS exercise_name, ss.reps,
                       ss.duration_s, ss.distance_m::float8 AS distance_m, ss.weight_kg::text AS weight_kg,
                       \(WeightUnit.sql("ss.weight_kg", inUnit: "v.unit")) AS weight, ss.rpe::float8 AS rpe, ss.done,
                       NULL::uuid AS comment_id, NULL::uuid AS author_id, NULL::text AS author_role, NULL::text AS text, NULL::timestamptz AS created_at
                FROM v, \(sets)
                UNION ALL
                SELECT 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, c.id, c.author_id, c.author_role, c.text, c.created_at
                FROM (SELECT * FROM session_comments WHERE session_id = \(session) ORDER BY created_at DESC, id DESC LIMIT \(comments)) AS c
            ) AS d ON true
            ORDER BY d.part, d.block, d.set_number, d.created_at, d.comment_id
            """
        }
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid, .int8]
        enum Part {
            case set(LoggedSet)
            case comment(CommentView)
        }
        typealias Row = (unit: WeightUnit, part: Part?)

        var session: UUID
        var viewer: UUID
        var comments: Int

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(session)
            bindings.append(viewer)
            bindings.append(comments)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try Self.part(row.makeRandomAccess(), from: 0) }

        /// The columns of `parts`, from `first` on.
        static func part(_ cells: PostgresRandomAccessRow, from first: Int) throws -> Row {
            let unit = WeightUnit(rawValue: try cells[first].decode(String.self)) ?? .kg
            switch try cells[first + 1].decode(Int32?.self) {
            case 0:
                return (unit, .set(try SessionStore.loggedSet(cells, from: first + 2)))
            case 1:
                let comment = CommentView(
                    id: try cells[first + 13].decode(UUID.self), authorID: try cells[first + 14].decode(UUID.self),
                    authorRole: try cells[first + 15].decode(String.self), text: try cells[first + 16].decode(String.self),
                    createdAt: try cells[first + 17].decode(Date.self))
                return (unit, .comment(comment))
            default:
                return (unit, nil)
            }
        }
    }

    /// A page of the thread, oldest first, after `after` (the last comment of the page before).
    func comments(of session: UUID, after: (Date, UUID)?, limit: Int, on connection: PostgresConnection, logger: Logger) async throws -> [CommentView] {
        let rows = try await connection.checkedQuery(
            """
            SELECT id, author_id, author_role, text, created_at FROM session_comments
            WHERE session_id = \(session) AND (\(after == nil) OR (created_at, id) > (\(after?.0 ?? Date()), \(after?.1 ?? UUID())))
            ORDER BY created_at, id LIMIT \(limit)
            """, logger: logger)
        return try await Self.decodeComments(rows)
    }

    func commentCount(of session: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        var count = 0
        for try await value in try await connection.checkedQuery("SELECT count(*) FROM session_comments WHERE session_id = \(session)", logger: logger).decode(Int.self) {
            count = value
        }
        return count
    }

    private static func decodeComments(_ rows: PostgresRowSequence) async throws -> [CommentView] {
        var comments: [CommentView] = []
        for try await (id, author, role, text, created) in rows.decode((UUID, UUID, String, String, Date).self) {
            comments.append(CommentView(id: id, authorID: author, authorRole: role, text: text, createdAt: created))
        }
        return comments
    }

    // MARK: writing

    /// Copies the coach's workout onto each day for the roster entry (and its client, once there is
    /// one): one statement. Nil when the workout is not the coach's.
    func assign(
        workout: UUID, coach: UUID, entry: RosterStore.Entry, days: [String], on connection: PostgresConnection, logger: Logger
    ) async throws -> [SessionRecord]? {
        let rows = try await connection.checkedQuery(
            """
            INSERT INTO sessions AS s (id, coach_id, roster_entry_id, client_id, workout_id, name, notes, blocks, scheduled_on)
            SELECT gen_random_uuid(), w.coach_id, \(entry.id), \(entry.clientID), w.id, w.name, w.notes, \(unescaped: Self.copiedBlocks), d.day
            FROM workouts w, unnest(\(days)::date[]) WITH ORDINALITY AS d(day, n)
            WHERE w.id = \(workout) AND w.coach_id = \(coach)
            ORDER BY d.n
            RETURNING \(unescaped: Self.columns)
            """, logger: logger)
        let sessions = try await Self.decode(rows)
        return sessions.isEmpty ? nil : sessions.sorted { ($0.scheduledOn, $0.id.uuidString) < ($1.scheduledOn, $1.id.uuidString) }
    }

    /// The most sessions (cancelled ones aside) one coach plans on one day of a client: a list of
    /// days (`today`, My Workouts, the coach's view of a client) is then bounded by its days.
    static let maxSessionsPerDay = 10

    /// The days among `days` on which the roster entry has `maxSessionsPerDay` sessions already,
    /// in order. The caller holds the entry (`RosterStore.find(_:lock:)`), so two assignments at
    /// once cannot both find the last place on a day.
    func fullDays(of entry: UUID, among days: [String], on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        let rows = try await connection.checkedQuery(
            """
            SELECT s.scheduled_on::text FROM sessions s
            WHERE s.roster_entry_id = \(entry) AND s.scheduled_on = ANY(\(days)::date[]) AND s.status <> 'cancelled'
            GROUP BY s.scheduled_on HAVING count(*) >= \(Self.maxSessionsPerDay)
            ORDER BY s.scheduled_on
            """, logger: logger)
        var full: [String] = []
        for try await day in rows.decode(String.self) { full.append(day) }
        return full
    }

    /// Sessions copied from the workout that the client has not started: the workout as it is now.
    /// A copy already as the workout is keeps its version and is not marked pushed: an app logging
    /// it from what it showed is not asked which version that was for a change that never came.
    func push(workout: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [UUID] {
        var ids: [UUID] = []
        let rows = try await connection.checkedQuery(
            """
            UPDATE sessions s SET name = w.name, notes = w.notes, blocks = \(unescaped: Self.copiedBlocks), version = s.version + 1, updated_at = now(),
                pushed_at = now()
            FROM workouts w
            WHERE w.id = \(workout) AND w.coach_id = \(coach) AND s.workout_id = w.id AND s.coach_id = \(coach) AND s.status = 'scheduled'
              AND \(unescaped: Self.coachLinked)
              AND (s.name, s.notes, s.blocks) IS DISTINCT FROM (w.name, w.notes, \(unescaped: Self.copiedBlocks))
            RETURNING s.id
            """, logger: logger)
        for try await id in rows.decode(UUID.self) { ids.append(id) }
        return ids
    }

    /// The version of the coach's workout, nil when the coach has no such workout. It stays as it is
    /// (a delete or an edit waits) until the caller's transaction ends: a push copies the workout
    /// it found, at the version the coach's `If-Match` was checked against.
    func holdWorkout(_ workout: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Int64? {
        let rows = try await connection.checkedQuery("SELECT version FROM workouts WHERE id = \(workout) AND coach_id = \(coach) FOR SHARE", logger: logger)
        for try await version in rows.decode(Int64.self) { return version }
        return nil
    }

    /// What a log's statement did: wrote it (its answer as PostgreSQL wrote it), or why not.
    enum LogOutcome {
        /// The session's new version and the response body; whether the coach's event was written.
        case logged(version: Int, body: ByteBuffer, eventWritten: Bool)
        /// Not a session of the client's.
        case notFound
        /// `If-Match` names another version than `version`, the current one.
        case preconditionFailed(version: Int)
        /// Pushed since it was assigned, and `If-Match` names no version.
        case preconditionRequired
        case cancelled
        /// A set names a block past the session's last; it has `blocks`.
        case blockOutOfRange(blocks: Int)
        /// The session changed between the statement's read and its lock (another log of it, a push):
        /// nothing was written.
        case changed
    }

    /// The coach in the template of `workout.logged` a log hands its statement, which writes the
    /// session's coach in its place (and the status it decides in place of `partial`), in the
    /// envelope's text as `EventEnvelope` wrote it: the template holds no text of a user's, so its
    /// `"coach_id":"…"` and `"status":"partial"` are found nowhere else in it.
    static let coachToBeRead = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))

    /// The log, replacing any earlier one (a retry, or a correction), in one statement: it reads
    /// the session, checks the log against it (`ifMatch`: the versions the request's `If-Match`
    /// accepts, nil for any; `namesAVersion`: whether it names one), and if it passes writes the
    /// sets, the session and `event` (for the session's coach, with the status the statement
    /// decides), and answers with the session's detail as `SessionDetail` writes it.
    func log(
        _ draft: LogDraft, session id: UUID, client: UUID, ifMatch: [Int64]?, namesAVersion: Bool, event: EventEnvelope,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> LogOutcome {
        let statement = LogQuery(
            sets: try Self.setsJSON(draft), session: id, client: client, performedAt: draft.performedAt,
            localDay: draft.localDay, notes: draft.notes, ifMatch: ifMatch, namesAVersion: namesAVersion, event: event, comments: Self.commentsInDetail)
        for try await row in try await connection.checkedExecute(statement, logger: logger) {
            switch row.outcome {
            case nil: return .notFound
            case "precondition_failed": return .preconditionFailed(version: row.seenVersion ?? 0)
            case "precondition_required": return .preconditionRequired
            case "cancelled": return .cancelled
            case "block": return .blockOutOfRange(blocks: row.blocks ?? 0)
            default:
                guard let version = row.version, let body = row.body else { return .changed }
                return .logged(version: version, body: body, eventWritten: row.eventWritten)
            }
        }
        throw LogQuery.noRow
    }

    /// Whether the client's session holds exactly this log already (its time, day and notes, and
    /// the same sets, no more and no fewer), written over one of `versions`: the session is logged,
    /// and its version is the one after. A log changes no block, so the blocks the request was made
    /// for are those the sets were filed under; a push between (which only a session not started
    /// takes, and a log after it) leaves the version further on. Asked only when `If-Match` names
    /// another version, so the log's own statement stays as short as it is.
    func holds(_ draft: LogDraft, session id: UUID, client: UUID, over versions: [Int64], on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let sets = try Self.setsJSON(draft)
        let rows = try await connection.checkedQuery(
            """
            WITH x AS (
                SELECT * FROM jsonb_to_recordset(\(sets)::jsonb) AS x(block int2, n int2, reps int4, duration int4, distance numeric, kg numeric, lbs numeric, rpe numeric, done bool))
            SELECT EXISTS (
                SELECT 1 FROM sessions s
                WHERE s.id = \(id) AND s.client_id = \(client) AND s.status IN ('completed', 'partial') AND s.version - 1 = ANY(\(versions)::int8[])
                  AND s.performed_at = \(draft.performedAt) AND s.performed_on = \(draft.localDay)::date AND s.log_notes IS NOT DISTINCT FROM \(draft.notes)
                  AND (SELECT count(*) FROM x) = (SELECT count(*) FROM session_sets ss WHERE ss.session_id = s.id)
                  AND NOT EXISTS (
                      SELECT 1 FROM x WHERE NOT EXISTS (
                          SELECT 1 FROM session_sets ss
                          WHERE ss.session_id = s.id AND ss.block = x.block AND ss.set_number = x.n
                            AND (ss.reps, ss.duration_s, ss.distance_m, ss.weight_kg, ss.rpe, ss.done)
                                IS NOT DISTINCT FROM (x.reps, x.duration, x.distance, coalesce(x.kg, x.lbs * 0.45359237), x.rpe, x.done))))
            """, logger: logger)
        for try await same in rows.decode(Bool.self) { return same }
        return false
    }

    /// The log's sets as a JSON array, numbers as decimal text, so `numeric` gets exactly what the
    /// client sent.
    static func setsJSON(_ draft: LogDraft) throws -> String {
        struct Row: Encodable {
            var block: Int
            var n: Int
            var reps: Int?
            var duration: Int?
            var distance: String?
            var kg: String?
            var lbs: String?
            var rpe: String?
            var done: Bool
        }
        let rows = draft.sets.map {
            Row(
                block: $0.block, n: $0.set, reps: $0.reps, duration: $0.durationS, distance: $0.distanceM.map { String(describing: $0) },
                kg: $0.weightKg, lbs: $0.weightLbs, rpe: $0.rpe.map { String(describing: $0) }, done: $0.done)
        }
        return String(decoding: try JSONEncoder().encode(rows), as: UTF8.self)
    }

    /// The whole log, one statement without a transaction around it. `seen` is the session as the
    /// statement's snapshot has it, and what the log's checks say of it; only if they pass is the
    /// session locked, and only if it is still at the version seen: otherwise another write of it
    /// committed in between (a log, a push), the statement writes nothing, and the caller runs it
    /// again holding the session. Holding it at that version, the snapshot's sets are the session's,
    /// so the sets the log no longer has go, new ones are added and the others written over only where
    /// they differ; the session takes its new state (`completed` when every prescribed set is logged
    /// done), and the event goes into the outbox for the session's coach if they still coach the
    /// client, unless the log is the one the session already has (no set went, came or changed, nor
    /// the session's status, time or notes): an app's retry without its `Idempotency-Key` tells the
    /// coach nothing new. The event is the caller's envelope with the coach and the status written in.
    /// What the statement's writes return answers whether anything changed, so it never reads the sets
    /// back: a statement of fewer parts is cheaper to start, which each log pays.
    ///
    /// PostgreSQL writes the answer as `SessionDetail` does (the keys in its order, nulls written,
    /// UUIDs in lowercase, times as `DaysQuery.time` writes them, numbers as the service's `Double`s
    /// write them), with the sets as this log has them: the service neither decodes the session
    /// nor encodes the answer. A test holds the answer to a read of the session after it.
    ///
    /// Its commit cannot fail on a constraint (no table it writes has a deferred trigger or
    /// constraint), which matters: PostgresNIO ends a statement's rows at its CommandComplete, so an
    /// error at the implicit commit after it would close the connection, not reach the route.
    struct LogQuery: PostgresPreparedStatement {
        static let name = "training.log_session"
        static let sql = """
            WITH x AS (
                SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(block int2, n int2, reps int4, duration int4, distance numeric, kg numeric, lbs numeric, rpe numeric, done bool)),
            seen AS MATERIALIZED (
                SELECT s.version, jsonb_array_length(s.blocks) AS blocks,
                       CASE WHEN $7::int8[] IS NOT NULL AND NOT s.version = ANY($7::int8[]) THEN 'precondition_failed'
                            WHEN s.pushed_at IS NOT NULL AND NOT $8::bool THEN 'precondition_required'
                            WHEN (s.status = 'cancelled' OR s.cancelled_at IS NOT NULL) AND NOT coalesce($4 <= s.cancelled_at, false) THEN 'cancelled'
                            WHEN EXISTS (SELECT 1 FROM x WHERE x.block > jsonb_array_length(s.blocks)) THEN 'block'
                            ELSE 'write' END AS outcome
                FROM sessions s WHERE s.id = $2 AND s.client_id = $3),
            locked AS MATERIALIZED (
                SELECT s.id, s.status, s.performed_at, s.log_notes, s.blocks FROM sessions s, seen
                WHERE s.id = $2 AND s.client_id = $3 AND s.version = seen.version AND seen.outcome = 'write' FOR UPDATE OF s),
            xs AS (
                SELECT x.block, x.n, (l.blocks->(x.block - 1)->>'exercise_id')::uuid AS exercise, x.reps, x.duration, x.distance,
                       coalesce(x.kg, x.lbs * 0.45359237) AS kg, x.rpe, x.done
                FROM locked l, x),
            st AS (
                SELECT CASE WHEN EXISTS (
                    SELECT 1 FROM locked l, jsonb_array_elements(l.blocks) WITH ORDINALITY AS b(block, bn), generate_series(1, jsonb_array_length(b.block->'sets')) AS sn
                    WHERE NOT EXISTS (SELECT 1 FROM x WHERE x.block = b.bn AND x.n = sn AND x.done)) THEN 'partial' ELSE 'completed' END AS status),
            gone AS (
                DELETE FROM session_sets ss USING locked
                WHERE ss.session_id = locked.id AND NOT EXISTS (SELECT 1 FROM x WHERE x.block = ss.block AND x.n = ss.set_number)
                RETURNING 1),
            saved AS (
                INSERT INTO session_sets (session_id, block, set_number, client_id, exercise_id, reps, duration_s, distance_m, weight_kg, rpe, done, performed_at, performed_on)
                SELECT $2, xs.block, xs.n, $3, xs.exercise, xs.reps, xs.duration, xs.distance, xs.kg, xs.rpe, xs.done, $4, $5::date
                FROM xs
                ON CONFLICT (session_id, block, set_number) DO UPDATE SET
                    client_id = EXCLUDED.client_id, exercise_id = EXCLUDED.exercise_id, reps = EXCLUDED.reps, duration_s = EXCLUDED.duration_s,
                    distance_m = EXCLUDED.distance_m, weight_kg = EXCLUDED.weight_kg, rpe = EXCLUDED.rpe, done = EXCLUDED.done,
                    performed_at = EXCLUDED.performed_at, performed_on = EXCLUDED.performed_on
                WHERE (session_sets.client_id, session_sets.exercise_id, session_sets.reps, session_sets.duration_s, session_sets.distance_m,
                       session_sets.weight_kg, session_sets.rpe, session_sets.done, session_sets.performed_at, session_sets.performed_on)
                      IS DISTINCT FROM (EXCLUDED.client_id, EXCLUDED.exercise_id, EXCLUDED.reps, EXCLUDED.duration_s, EXCLUDED.distance_m,
                       EXCLUDED.weight_kg, EXCLUDED.rpe, EXCLUDED.done, EXCLUDED.performed_at, EXCLUDED.performed_on)
                RETURNING 1),
            updated AS (
                UPDATE sessions s SET status = st.status, performed_at = $4, performed_on = $5::date,
                    log_notes = $6, skip_reason = NULL, logged_at = now(), pushed_at = NULL, version = s.version + 1, updated_at = now()
                FROM locked, st
                WHERE s.id = locked.id
                RETURNING s.*, \(SessionStore.coachLinked) AS coach_linked),
            event AS (
                INSERT INTO outbox (\(EventOutbox.Entry.columns))
                SELECT $9, $10, $3, true, u.coach_id,
                       replace(replace($11, '"coach_id":"\(SessionStore.coachToBeRead.uuidString.lowercased())"', '"coach_id":' || to_json(u.coach_id)::text),
                               '"status":"partial"', '"status":' || to_json(u.status)::text)
                FROM updated u, locked l
                WHERE u.coach_id IS NOT NULL AND u.coach_linked
                  AND (l.status IS DISTINCT FROM u.status OR l.performed_at IS DISTINCT FROM $4 OR l.log_notes IS DISTINCT FROM $6
                       OR EXISTS (SELECT 1 FROM gone) OR EXISTS (SELECT 1 FROM saved))
                RETURNING 1),
            v AS MATERIALIZED (SELECT coalesce((SELECT weight_unit FROM user_settings WHERE user_id = $3), 'kg') AS unit),
            answer AS (
                SELECT u.version, row_to_json(d)::text AS body
                FROM updated u, v CROSS JOIN LATERAL (
                    SELECT coalesce(CASE WHEN v.unit = 'lbs' THEN u.blocks_view_lbs ELSE u.blocks_view_kg END, session_blocks_json(u.blocks, v.unit)) AS blocks,
                           u.client_id, u.coach_id,
                           (SELECT coalesce(array_to_json(array_agg(
                                       (SELECT row_to_json(c) FROM (SELECT lc.author_id, lc.author_role, \(DaysQuery.time("lc.created_at")) AS created_at, lc.id, lc.text) c)
                                       ORDER BY lc.created_at, lc.id)), '[]')
                            FROM (SELECT * FROM session_comments WHERE session_id = $2 ORDER BY created_at DESC, id DESC LIMIT $12) lc) AS comments,
                           \(DaysQuery.time("u.created_at")) AS created_at, u.id, u.log_notes,
                           (SELECT coalesce(array_to_json(array_agg(
                                       (SELECT row_to_json(o) FROM (
                                           SELECT xs.block, xs.distance::float8 AS distance_m, xs.done, xs.duration AS duration_s, xs.exercise AS exercise_id,
                                                  u.blocks->(xs.block - 1)->>'exercise_name' AS exercise_name, xs.reps, xs.rpe::float8 AS rpe, xs.n AS "set",
                                                  (CASE WHEN v.unit = 'lbs' THEN round(xs.kg / 0.45359237, 6) ELSE xs.kg END)::float8 AS weight,
                                                  xs.kg::float8 AS weight_kg, v.unit AS weight_unit) o)
                                       ORDER BY xs.block, xs.n)), '[]')
                            FROM xs) AS logged_sets,
                           u.name, u.notes, \(DaysQuery.time("u.performed_at")) AS performed_at, u.scheduled_on::text AS scheduled_on, u.skip_reason, u.status,
                           \(DaysQuery.time("u.updated_at")) AS updated_at, u.version, v.unit AS weight_unit, u.workout_id) d)
            SELECT seen.outcome, seen.version, seen.blocks, a.version, a.body, EXISTS (SELECT 1 FROM event)
            FROM (SELECT 1) AS one LEFT JOIN seen ON true LEFT JOIN answer a ON true
            """
        static let bindingDataTypes: [PostgresDataType] = [.text, .uuid, .uuid, .timestamptz, .text, .text, .int8Array, .bool, .uuid, .text, .text, .int8]
        static let noRow = APIError(.internalServerError, code: "internal_error", detail: "The log could not be written.")
        struct Row {
            /// Nil when the client has no such session.
            var outcome: String?
            var seenVersion: Int?
            var blocks: Int?
            /// The new version and the answer, when the log was written.
            var version: Int?
            var body: ByteBuffer?
            var eventWritten: Bool
        }
        /// The sets as a JSON array, numbers as decimal text, so `numeric` gets exactly what the client sent.
        var sets: String
        var session: UUID
        var client: UUID
        var performedAt: Date
        var localDay: String
        var notes: String?
        var ifMatch: [Int64]?
        var namesAVersion: Bool
        /// `workout.logged`, its coach and status to be written by the statement.
        var event: EventEnvelope
        /// How many of the latest comments the detail carries.
        var comments: Int
        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 12)
            bindings.append(sets)
            bindings.append(session)
            bindings.append(client)
            bindings.append(performedAt)
            bindings.append(localDay)
            try bindings.append(notes)
            try bindings.append(ifMatch)
            bindings.append(namesAVersion)
            bindings.append(event.id)
            bindings.append(event.type)
            bindings.append(event.json)
            bindings.append(comments)
            return bindings
        }
        func decodeRow(_ row: PostgresRow) throws -> Row {
            let cells = row.makeRandomAccess()
            return Row(
                outcome: try cells[0].decode(String?.self), seenVersion: try cells[1].decode(Int?.self), blocks: try cells[2].decode(Int?.self),
                version: try cells[3].decode(Int?.self), body: try cells[4].decode(ByteBuffer?.self), eventWritten: try cells[5].decode(Bool.self))
        }
    }

    func skip(_ id: UUID, reason: String?, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE sessions SET status = 'skipped', skip_reason = \(reason), version = version + 1, updated_at = now() WHERE id = \(id)", logger: logger)
    }

    /// Unschedules a session not started; false when it was started (or is not the coach's) by now.
    func unschedule(_ id: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            "DELETE FROM sessions WHERE id = \(id) AND coach_id = \(coach) AND status IN ('scheduled', 'cancelled') RETURNING 1", logger: logger)
    }

    /// Made under the session's row lock (the caller holds it), and timed then, not at its
    /// transaction's start (`now()`): comments are in the order they were made, so a reader paging
    /// by time never skips one that committed after a later-timed one.
    func addComment(_ id: UUID, session: UUID, author: UUID, role: String, text: String, on connection: PostgresConnection, logger: Logger) async throws -> CommentView {
        let rows = try await connection.checkedQuery(
            """
            INSERT INTO session_comments (id, session_id, author_id, author_role, text, created_at)
            VALUES (\(id), \(session), \(author), \(role), \(text), clock_timestamp())
            RETURNING created_at
            """, logger: logger)
        var created = Date()
        for try await date in rows.decode(Date.self) { created = date }
        return CommentView(id: id, authorID: author, authorRole: role, text: text, createdAt: created)
    }
}
