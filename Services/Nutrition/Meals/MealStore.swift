import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// A stored meal as the API shows it.
struct MealRecord: Sendable {
    var id: UUID
    var userID: UUID
    var name: String
    var eatenAt: Date
    var localDate: String
    var items: [MealItem]
    var totals: NutrientTotals
    var diet: String
    var score: DietScoreResult
    var allergyWarnings: [MealDraft.AllergyWarning]
    var warnings: [MealDraft.Warning]
    var notes: String?
    var photoURL: String?
    var consumed: Bool
    var consumedAt: Date?
    var consumedNotes: String?
    var edited: Bool
    var viewCount: Int
    var version: Int64
    var createdAt: Date
    var updatedAt: Date
    /// What the vision model said, for a meal made from a photo (`POST /v1/meals/analyze`).
    var analysis: MealAnalysis? = nil
}

/// The queries on `meals`. Each runs on the caller's connection; a meal of another user is nil, as
/// if it did not exist.
struct MealStore: Sendable {
    /// A meal's columns in the order `record` reads them.
    static let columns = """
        id, user_id, name, eaten_at, local_date::text, items::text, calories, protein_g, carbs_g, fat_g, fiber_g, sugar_g, saturated_fat_g, sodium_mg,
               diet, score::text, allergy_warnings::text, warnings::text, notes, photo_url, consumed, consumed_at, consumed_notes, edited, view_count, version,
               created_at, updated_at, analysis::text
        """
    static let select = "SELECT \(columns)\nFROM meals"

    static func decode(_ rows: PostgresRowSequence) async throws -> [MealRecord] {
        var meals: [MealRecord] = []
        let json = JSONDecoder()
        for try await row in rows { meals.append(try record(row, json: json)) }
        return meals
    }

    /// A row of `select` as a meal.
    static func record(_ row: PostgresRow, json: JSONDecoder) throws -> MealRecord {
        let c = row.makeRandomAccess()
        func v<T: PostgresDecodable>(_ index: Int, _ type: T.Type) throws -> T { try c[index].decode(T.self) }
        return MealRecord(
            id: try v(0, UUID.self), userID: try v(1, UUID.self), name: try v(2, String.self), eatenAt: try v(3, Date.self), localDate: try v(4, String.self),
            items: try json.decode([MealItem].self, from: Data(try v(5, String.self).utf8)),
            totals: NutrientTotals(
                calories: try v(6, Double.self), proteinG: try v(7, Double.self), carbsG: try v(8, Double.self), fatG: try v(9, Double.self),
                fiberG: try v(10, Double.self), sugarG: try v(11, Double.self), saturatedFatG: try v(12, Double.self), sodiumMg: try v(13, Double.self)),
            diet: try v(14, String.self), score: try json.decode(DietScoreResult.self, from: Data(try v(15, String.self).utf8)),
            allergyWarnings: try json.decode([MealDraft.AllergyWarning].self, from: Data(try v(16, String.self).utf8)),
            warnings: try json.decode([MealDraft.Warning].self, from: Data(try v(17, String.self).utf8)), notes: try v(18, String?.self),
            photoURL: try v(19, String?.self), consumed: try v(20, Bool.self), consumedAt: try v(21, Date?.self), consumedNotes: try v(22, String?.self),
            edited: try v(23, Bool.self), viewCount: try v(24, Int.self), version: try v(25, Int64.self), createdAt: try v(26, Date.self),
            updatedAt: try v(27, Date.self),
            analysis: try v(28, String?.self).map { try json.decode(MealAnalysis.self, from: Data($0.utf8)) })
    }

    static func json(_ value: some Encodable) throws -> String { String(decoding: try APIJSON.encode(value), as: UTF8.self) }

    func find(_ id: UUID, of user: UUID, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> MealRecord? {
        let rows =
            forUpdate
            ? try await connection.checkedExecute(FindForUpdate(id: id, user: user), logger: logger)
            : try await connection.checkedExecute(Find(id: id, user: user), logger: logger)
        var found: MealRecord?
        for try await meal in rows { found = meal }
        return found
    }

    // Opening, editing, eating or sharing a meal starts by reading it: prepared once per connection,
    // as PostgreSQL otherwise parses and plans the statement every time.

    struct Find: PostgresPreparedStatement {
        static let name = "nutrition.meal_of_user"
        static let sql = MealStore.select + " WHERE id = $1 AND user_id = $2"
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid]
        typealias Row = MealRecord
        var id: UUID
        var user: UUID
        func makeBindings() throws -> PostgresBindings { MealStore.bindings(id, user) }
        func decodeRow(_ row: PostgresRow) throws -> MealRecord { try MealStore.record(row, json: JSONDecoder()) }
    }

    /// `Find`, locking the meal until the transaction ends.
    struct FindForUpdate: PostgresPreparedStatement {
        static let name = "nutrition.meal_of_user_for_update"
        static let sql = Find.sql + " FOR UPDATE"
        static let bindingDataTypes = Find.bindingDataTypes
        typealias Row = MealRecord
        var id: UUID
        var user: UUID
        func makeBindings() throws -> PostgresBindings { MealStore.bindings(id, user) }
        func decodeRow(_ row: PostgresRow) throws -> MealRecord { try MealStore.record(row, json: JSONDecoder()) }
    }

    static func bindings(_ first: UUID, _ second: UUID) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(first)
        bindings.append(second)
        return bindings
    }

    /// The new meal as stored, made from the draft and what the insert returned: no second read.
    func insert(_ draft: MealDraft, id: UUID, user: UUID, analysis: MealAnalysis? = nil, on connection: PostgresConnection, logger: Logger) async throws -> MealRecord {
        let insert = Insert(
            id: id, user: user, draft: draft, items: try Self.json(draft.items), score: try Self.json(draft.score),
            allergyWarnings: try Self.json(draft.allergyWarnings), warnings: try Self.json(draft.warnings), analysis: try analysis.map(Self.json))
        var stored: (String, Date)?
        for try await row in try await connection.checkedExecute(insert, logger: logger) { stored = row }
        guard let (localDate, created) = stored else { throw APIError.accountDeleted }
        return MealRecord(
            id: id, userID: user, name: draft.name, eatenAt: draft.eatenAt, localDate: localDate, items: draft.items, totals: draft.totals,
            diet: draft.diet.rawValue, score: draft.score, allergyWarnings: draft.allergyWarnings, warnings: draft.warnings, notes: draft.notes,
            photoURL: draft.photoURL, consumed: false, consumedAt: nil, consumedNotes: nil, edited: false, viewCount: 0, version: 1, createdAt: created,
            updatedAt: created, analysis: analysis)
    }

    /// Logging a meal, the commonest write: prepared once per connection rather than parsed and
    /// planned on every post. Without a transaction around it, it holds the account itself
    /// (`hold_live_account`): a meal of an account deleted meanwhile is not stored, and a deletion
    /// running meanwhile waits for it and deletes it.
    struct Insert: PostgresPreparedStatement {
        static let name = "nutrition.insert_meal"
        static let sql = """
            INSERT INTO meals (id, user_id, name, eaten_at, local_date, items, calories, protein_g, carbs_g, fat_g, fiber_g, sugar_g, saturated_fat_g, sodium_mg,
                               diet, diet_score, score_band, score, algorithm_version, allergy_warnings, warnings, notes, photo_url, analysis)
            SELECT $1, $2, $3, $4, $5::date, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18::jsonb, $19, $20::jsonb, $21::jsonb, $22, $23,
                   $24::jsonb
            WHERE hold_live_account($2)
            RETURNING local_date::text, created_at
            """
        static let bindingDataTypes: [PostgresDataType] = [
            .uuid, .uuid, .text, .timestamptz, .text, .text, .float8, .float8, .float8, .float8, .float8, .float8, .float8, .float8,
            .text, .int8, .text, .text, .text, .text, .text, .text, .text, .text,
        ]
        typealias Row = (String, Date)

        var id: UUID
        var user: UUID
        var draft: MealDraft
        var items: String
        var score: String
        var allergyWarnings: String
        var warnings: String
        var analysis: String?

        func makeBindings() throws -> PostgresBindings {
            let t = draft.totals
            var bindings = PostgresBindings(capacity: 24)
            bindings.append(id)
            bindings.append(user)
            bindings.append(draft.name)
            bindings.append(draft.eatenAt)
            bindings.append(draft.localDay.description)
            bindings.append(items)
            for value in [t.calories, t.proteinG, t.carbsG, t.fatG, t.fiberG, t.sugarG, t.saturatedFatG, t.sodiumMg] { bindings.append(value) }
            bindings.append(draft.diet.rawValue)
            bindings.append(draft.score.score)
            bindings.append(draft.score.band)
            bindings.append(score)
            bindings.append(draft.score.algorithmVersion)
            bindings.append(allergyWarnings)
            bindings.append(warnings)
            bindings.append(draft.notes)
            bindings.append(draft.photoURL)
            bindings.append(analysis)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Rewrites the meal from `draft` (rescored with the current algorithm), marked edited. A photo
    /// kept here stays as it is; without one, the meal's own photo path in `draft` (the meal sent back
    /// as it was shown before its photo was deleted) names nothing, and the meal has no photo.
    func replace(_ id: UUID, with draft: MealDraft, on connection: PostgresConnection, logger: Logger) async throws {
        let t = draft.totals
        let photoURL = draft.photoURL.flatMap { MealPhotoStore.isOwnPhoto($0, of: id) ? nil : $0 }
        try await connection.checkedRun(
            """
            UPDATE meals SET name = \(draft.name), eaten_at = \(draft.eatenAt), local_date = \(draft.localDay.description)::date,
              items = \(try Self.json(draft.items))::jsonb, calories = \(t.calories), protein_g = \(t.proteinG), carbs_g = \(t.carbsG), fat_g = \(t.fatG),
              fiber_g = \(t.fiberG), sugar_g = \(t.sugarG), saturated_fat_g = \(t.saturatedFatG), sodium_mg = \(t.sodiumMg), diet = \(draft.diet.rawValue),
              diet_score = \(draft.score.score), score_band = \(draft.score.band), score = \(try Self.json(draft.score))::jsonb,
              algorithm_version = \(draft.score.algorithmVersion), allergy_warnings = \(try Self.json(draft.allergyWarnings))::jsonb,
              warnings = \(try Self.json(draft.warnings))::jsonb, notes = \(draft.notes),
              photo_url = CASE WHEN EXISTS (SELECT 1 FROM meal_photos WHERE meal_id = \(id)) THEN photo_url ELSE \(photoURL) END, edited = true,
              version = version + 1, updated_at = now()
            WHERE id = \(id)
            """, logger: logger)
    }

    /// Marks `user`'s meal eaten (with `notes`) or not; the meal as it now is, nil when it is not theirs.
    func setConsumed(_ id: UUID, of user: UUID, _ consumed: Bool, notes: String?, on connection: PostgresConnection, logger: Logger) async throws -> MealRecord? {
        var updated: MealRecord?
        for try await meal in try await connection.checkedExecute(SetConsumed(id: id, user: user, consumed: consumed, notes: notes), logger: logger) {
            updated = meal
        }
        return updated
    }

    /// Eating a meal, the commonest write after logging one: one prepared statement that changes and
    /// returns it (the row is locked before the day-row trigger runs, as a read `FOR UPDATE` would).
    /// Marked eaten again without notes (a double tap), it keeps its notes and its time.
    struct SetConsumed: PostgresPreparedStatement {
        static let name = "nutrition.set_consumed"
        static let sql = """
            UPDATE meals SET consumed = $3, consumed_at = CASE WHEN $3 THEN coalesce(consumed_at, now()) END,
              consumed_notes = CASE WHEN $3 THEN coalesce($4, consumed_notes) END, version = version + 1, updated_at = now()
            WHERE id = $1 AND user_id = $2
            RETURNING \(MealStore.columns)
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid, .bool, .text]
        typealias Row = MealRecord
        var id: UUID
        var user: UUID
        var consumed: Bool
        var notes: String?
        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 4)
            bindings.append(id)
            bindings.append(user)
            bindings.append(consumed)
            bindings.append(notes)
            return bindings
        }
        func decodeRow(_ row: PostgresRow) throws -> MealRecord { try MealStore.record(row, json: JSONDecoder()) }
    }

    func delete(_ id: UUID, of user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("DELETE FROM meals WHERE id = \(id) AND user_id = \(user) RETURNING 1", logger: logger)
    }

    struct ListQuery: Sendable {
        var consumed: Bool?
        var analyzed: Bool? = nil
        var from: LocalDay?
        var to: LocalDay?
        var limit: Int
        var after: MealCursor?
    }

    /// A page of `user`'s meals, newest first. The first page, what the app reads most (a day, a
    /// week), is a prepared statement: PostgreSQL parsed and planned this one on every list, the
    /// largest of its statements under the app's load. Later pages and the analysed meals stay
    /// unnamed, planned for their values: the cursor then bounds the index scan, and
    /// `analyzed=true` reads the index of analysed meals, which no generic plan can prove it may.
    func list(_ user: UUID, _ query: ListQuery, on connection: PostgresConnection, logger: Logger) async throws -> [MealRecord] {
        let page = ListPage(user: user, query: query)
        if query.after == nil, query.analyzed != true {
            var meals: [MealRecord] = []
            let json = JSONDecoder()
            for try await row in try await connection.checkedExecute(page, logger: logger) { meals.append(try Self.record(row, json: json)) }
            return meals
        }
        var bindings = try page.makeBindings()
        if let after = query.after {
            bindings.append(after.eatenAt)
            bindings.append(after.id)
        }
        let sql = ListPage.text(after: query.after != nil)
        return try await Self.decode(connection.checkedQuery(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger))
    }

    /// The statement of a page of meals; with `after`, the rows before the cursor's `$7`, `$8`.
    /// A meal's local day is its moment in its owner's zone (UTC−12 to UTC+14) less the day's start
    /// hour (0 to 6), so it is within a day either side of the moment's UTC date: the moments a
    /// range of days can hold, a day wider each way, bound the scan of the index on `(user_id,
    /// eaten_at DESC, id DESC)`, which otherwise read every meal the user has (a day or a week holds
    /// fewer than a page, so the scan never stopped early). The
    /// owner and the bounds are subqueries, unknown to the planner in every plan: a plan made for a
    /// user with few meals (beside one with years of them) or for one range cost less than the
    /// generic plan, so PostgreSQL would plan the statement again on every list.
    struct ListPage: PostgresPreparedStatement {
        static let name = "nutrition.list_meals"
        static let sql = text(after: false)
        static func text(after: Bool) -> String {
            """
            \(MealStore.select)
            WHERE user_id = (SELECT $1::uuid)
              AND eaten_at >= (SELECT coalesce(($4::date - 2)::timestamp AT TIME ZONE 'UTC', '-infinity'))
              AND eaten_at < (SELECT coalesce(($5::date + 3)::timestamp AT TIME ZONE 'UTC', 'infinity'))
              AND ($2::boolean IS NULL OR consumed = $2)
              AND ($3::boolean IS NULL OR (analysis IS NOT NULL) = $3)
              AND ($4::date IS NULL OR local_date >= $4::date)
              AND ($5::date IS NULL OR local_date <= $5::date)\(after ? "\n  AND (eaten_at, id) < ($7, $8)" : "")
            ORDER BY eaten_at DESC, id DESC
            LIMIT $6
            """
        }
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .bool, .bool, .text, .text, .int8]
        typealias Row = PostgresRow

        var user: UUID
        var query: ListQuery

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 8)
            bindings.append(user)
            try bindings.append(query.consumed)
            try bindings.append(query.analyzed)
            try bindings.append(query.from?.description)
            try bindings.append(query.to?.description)
            bindings.append(query.limit + 1)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
    }
}

struct MealCursor: Codable, Sendable {
    var eatenAt: Date
    var id: UUID
    enum CodingKeys: String, CodingKey { case eatenAt = "e", id = "i" }
}
