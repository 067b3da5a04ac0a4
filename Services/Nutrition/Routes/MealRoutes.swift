import Foundation
import Hummingbird
import PostgresNIO
import ServiceKit

/// The caller's meals: log, list, read, correct, delete, mark eaten.
struct MealRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        let meals = router.group("v1/meals", context: AuthenticatedContext.self)
        meals.post(use: create)
        meals.get(use: list)
        meals.get(":id", use: meal)
        meals.put(":id", use: replace)
        meals.delete(":id", use: remove)
        meals.post(":id/consume", use: consume)
        meals.delete(":id/consume", use: unconsume)
    }

    static let notFound = APIError.notFound("No such meal.", code: "meal_not_found")

    /// Logs a meal, scored against the diet the profile has now; `Idempotency-Key` makes a retried
    /// post answer as the first did instead of logging it twice.
    @Sendable func create(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<MealView> {
        let body = try await request.decode(as: MealDraft.Body.self, context: context)
        let nutrition = self.nutrition
        let user = context.caller.userID
        // One statement writes: no transaction around it (a profile changed in between scores the
        // meal as if it were logged a moment before the change). The profile is the one this
        // process keeps while the change feed vouches for it: then the insert is the only statement
        // (with the foods' lookup before it when an item names one).
        let meal = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            let items = try await nutrition.foods.fill(body.items, on: connection, logger: context.logger)
            let profile = try await nutrition.dietProfile(user, on: connection, logger: context.logger)
            let draft = try MealDraft(body, items: items, profile: profile, meal: nil)
            return try await nutrition.meals.insert(draft, id: UUID(), user: user, on: connection, logger: context.logger)
        }
        return EditedResponse(status: .created, headers: [.eTag: EntityTag(version: meal.version).description], response: MealView(meal))
    }

    @Sendable func list(_ request: Request, context: AuthenticatedContext) async throws -> MealPage {
        let nutrition = self.nutrition
        return try await nutrition.postgres.withConnectionOnItsLoop { connection in
            let owner = try await nutrition.diaryOwner(context, on: connection)
            return try await Self.page(of: owner, request: request, nutrition: nutrition, on: connection, logger: context.logger)
        }
    }

    static func page(of owner: UUID, request: Request, nutrition: Nutrition, on connection: PostgresConnection, logger: Logger) async throws -> MealPage {
        let page = try PageRequest(query: request)
        let query = request.uri.queryParameters
        var problems: [Problem.FieldError] = []
        func flag(_ name: String) -> Bool? {
            guard let text = query[name[...]].map(String.init) else { return nil }
            if text == "true" { return true }
            if text == "false" { return false }
            problems.append(.init(field: name, message: "must be true or false"))
            return nil
        }
        let consumed = flag("consumed")
        let analyzed = flag("analyzed")
        func day(_ name: String) -> LocalDay? {
            guard let text = query[name[...]].map(String.init) else { return nil }
            guard let day = LocalDay(text) else {
                problems.append(.init(field: name, message: "must be a date, YYYY-MM-DD"))
                return nil
            }
            return day
        }
        let from = day("from")
        let to = day("to")
        if !problems.isEmpty { throw APIError.validation(problems) }
        let rows = try await nutrition.meals.list(
            owner, .init(consumed: consumed, analyzed: analyzed, from: from, to: to, limit: page.limit, after: try page.position(MealCursor.self)), on: connection, logger: logger)
        let (items, next) = Cursor.page(rows, limit: page.limit) { MealCursor(eatenAt: $0.eatenAt, id: $0.id) }
        return MealPage(items: items.map(MealView.init), nextCursor: next)
    }

    @Sendable func meal(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<MealView> {
        let id = try context.mealID()
        let nutrition = self.nutrition
        let meal = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.meals.find(id, of: context.caller.userID, on: connection, logger: context.logger)
        }
        guard let meal else { throw Self.notFound }
        return EditedResponse(headers: [.eTag: EntityTag(version: meal.version).description], response: MealView(meal))
    }

    /// Corrects a meal: rescored, `edited: true`. With `If-Match`, only if it is still that version.
    /// A meal whose `eaten_at` stays keeps its day, though the time zone changed since: a change of
    /// zone does not move past meals between days, and neither does correcting one.
    @Sendable func replace(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<MealView> {
        let id = try context.mealID()
        let body = try await request.decode(as: MealDraft.Body.self, context: context)
        let nutrition = self.nutrition
        let user = context.caller.userID
        let meal = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            guard let before = try await nutrition.meals.find(id, of: user, forUpdate: true, on: connection, logger: context.logger) else { throw Self.notFound }
            try EntityTag(version: before.version).check(ifMatchOf: request)
            let items = try await nutrition.foods.fill(body.items, on: connection, logger: context.logger)
            let profile = try await nutrition.profiles.find(user, on: connection, logger: context.logger)
            var draft = try MealDraft(body, items: items, profile: profile, meal: id)
            // Compared as the API writes times (milliseconds): the database keeps microseconds (an
            // analysed meal's time is the moment it came), which a client sends back cut.
            if RFC3339.string(from: body.eatenAt) == RFC3339.string(from: before.eatenAt), let day = LocalDay(before.localDate) { draft.localDay = day }
            try await nutrition.meals.replace(id, with: draft, on: connection, logger: context.logger)
            return try await nutrition.meals.find(id, of: user, on: connection, logger: context.logger)!
        }
        return EditedResponse(headers: [.eTag: EntityTag(version: meal.version).description], response: MealView(meal))
    }

    /// Deletes the meal and its photo; its share links answer `410` from then on.
    @Sendable func remove(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let id = try context.mealID()
        let nutrition = self.nutrition
        let user = context.caller.userID
        try await nutrition.postgres.transaction(logger: context.logger) { connection in
            guard try await nutrition.meals.delete(id, of: user, on: connection, logger: context.logger) else { throw Self.notFound }
            try await nutrition.shares.forgetMeal(id, on: connection, logger: context.logger)
        }
        return .noContent
    }

    struct ConsumeBody: StrictJSONBody {
        var notes: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case notes }
    }

    /// Marks the meal eaten: only eaten meals count in trends. The answer's `ETag` is the meal's new
    /// version, as an edit's is.
    @Sendable func consume(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<MealView> {
        let id = try context.mealID()
        let body = try await request.decodeIfPresent(as: ConsumeBody.self, context: context)
        if let notes = body?.notes, notes.unicodeScalars.count > 2000 { throw APIError.validation([.init(field: "notes", message: "must be at most 2000 characters")]) }
        return try await setConsumed(id, true, notes: body?.notes, context: context)
    }

    @Sendable func unconsume(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<MealView> {
        try await setConsumed(try context.mealID(), false, notes: nil, context: context)
    }

    func setConsumed(_ id: UUID, _ consumed: Bool, notes: String?, context: AuthenticatedContext) async throws -> EditedResponse<MealView> {
        let nutrition = self.nutrition
        let user = context.caller.userID
        // In an explicit transaction although it is one statement: the diary's version is taken by a
        // deferred trigger at the commit, and a failure there must reach the caller, which a
        // statement's own implicit commit does not promise.
        let meal = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            guard let meal = try await nutrition.meals.setConsumed(id, of: user, consumed, notes: notes, on: connection, logger: context.logger) else { throw Self.notFound }
            return meal
        }
        return EditedResponse(headers: [.eTag: EntityTag(version: meal.version).description], response: MealView(meal))
    }
}

extension AuthenticatedContext {
    /// The UUID in the `:id` path segment; anything else is 404 like an unknown id.
    func mealID() throws -> UUID {
        guard let id = parameters.get("id").flatMap(UUID.init(parsing:)) else { throw MealRoutes.notFound }
        return id
    }
}

/// A page of meals, newest first.
struct MealPage: ResponseEncodable {
    var items: [MealView]
    @Nullable var nextCursor: String?
    enum CodingKeys: String, CodingKey { case items, nextCursor = "next_cursor" }
}
