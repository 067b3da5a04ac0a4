import Foundation
import Hummingbird
import Models
import PostgresNIO
import ServiceKit

/// The exercise library, searched by anyone signed in, and a coach's own exercises, which only the
/// coach and the coach's clients see.
struct ExerciseRoutes {
    let training: Training

    func add(to router: Router<ServiceRequestContext>) {
        let exercises = router.group("v1/exercises", context: AuthenticatedContext.self)
        exercises.get(use: list)
        exercises.post(use: create)
        exercises.get(":id", use: exercise)
        exercises.patch(":id", use: change)
        exercises.delete(":id", use: remove)
    }

    static let notFound = APIError.notFound("No such exercise.", code: "exercise_not_found")
    static let maxQuery = 100

    /// `?q=` matched against names with typos, run-together words and plurals; `muscle` (primary or
    /// secondary), `equipment` and `level` filter by the library's words.
    @Sendable func list(_ request: Request, context: AuthenticatedContext) async throws -> Page<ExerciseView> {
        let page = try PageRequest(query: request)
        let parameters = request.uri.queryParameters
        var problems: [Problem.FieldError] = []
        func word(_ name: String, _ allowed: Set<String>) -> String? {
            guard let text = parameters[name[...]].map(String.init), !text.isEmpty else { return nil }
            if !allowed.contains(text) { problems.append(.init(field: name, message: "must be one of \(ExerciseVocabulary.list(allowed))")) }
            return text
        }
        let query = parameters["q"].map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) }.flatMap { $0.isEmpty ? nil : $0 }
        if let query, query.codePoints > Self.maxQuery || query.hasInvisibleCharacters() {
            problems.append(.init(field: "q", message: "must be at most \(Self.maxQuery) characters, without control characters"))
        }
        let muscle = word("muscle", ExerciseVocabulary.muscles)
        let equipment = word("equipment", ExerciseVocabulary.equipment)
        let level = word("level", ExerciseVocabulary.levels)
        if !problems.isEmpty { throw APIError.validation(problems) }
        let search = ExerciseStore.Search(
            query: query, muscle: muscle, equipment: equipment, level: level, limit: page.limit, after: try page.position(ExerciseCursor.self))
        let training = self.training
        let rows = try await training.postgres.withConnectionOnItsLoop { connection in
            try await training.exercises.search(search, viewer: context.caller.userID, on: connection, logger: context.logger)
        }
        let (items, next) = Cursor.page(rows, limit: page.limit) { ExerciseCursor(rank: $0.rank, name: $0.sortName, id: $0.0.id) }
        return Page(items: items.map { ExerciseView($0.0) }, nextCursor: next)
    }

    @Sendable func exercise(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<ExerciseView> {
        let id = try context.exerciseID()
        let training = self.training
        let found = try await training.postgres.withConnectionOnItsLoop { connection in
            try await training.exercises.find(id, viewer: context.caller.userID, on: connection, logger: context.logger)
        }
        guard let found else { throw Self.notFound }
        return EditedResponse(headers: [.eTag: EntityTag(version: found.version).description], response: ExerciseView(found))
    }

    /// A coach's own exercise.
    @Sendable func create(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<ExerciseView> {
        try context.require(anyOf: .coach)
        let fields = try await request.decode(as: ExerciseBody.self, context: context).fields(over: nil)
        let training = self.training
        let id = UUID()
        let stored = try await training.postgres.transaction(logger: context.logger) { connection in
            try await connection.requireLiveAccount(context.caller.userID, logger: context.logger)
            return try await training.exercises.insert(fields, id: id, coach: context.caller.userID, on: connection, logger: context.logger)
        }
        guard let stored else { throw Self.duplicate }
        return EditedResponse(
            status: .created, headers: [.eTag: EntityTag(version: stored.version).description, .location: "/v1/exercises/\(id.uuidString.lowercased())"],
            response: ExerciseView(stored))
    }

    static let duplicate = APIError.conflict("You already have an exercise of that name.", code: "exercise_exists")

    /// Changes the fields sent. With `If-Match`, only if it is still that version. The library's
    /// exercises are nobody's to change.
    @Sendable func change(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<ExerciseView> {
        try context.require(anyOf: .coach)
        let id = try context.exerciseID()
        let body = try await request.decode(as: ExerciseBody.self, context: context)
        let training = self.training
        let coach = context.caller.userID
        let stored = try await training.postgres.transaction(logger: context.logger) { connection in
            guard let before = try await training.exercises.own(id, coach: coach, on: connection, logger: context.logger) else {
                throw try await Self.notOwned(id, viewer: coach, training: training, on: connection, context: context)
            }
            try EntityTag(version: before.version).check(ifMatchOf: request)
            guard let after = try await training.exercises.update(id, with: try body.fields(over: before), on: connection, logger: context.logger) else {
                throw Self.duplicate
            }
            return after
        }
        return EditedResponse(headers: [.eTag: EntityTag(version: stored.version).description], response: ExerciseView(stored))
    }

    /// Deletes a coach's own exercise; `409 exercise_in_use` while a workout uses it.
    @Sendable func remove(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        try context.require(anyOf: .coach)
        let id = try context.exerciseID()
        let training = self.training
        let coach = context.caller.userID
        try await training.postgres.transaction(logger: context.logger) { connection in
            guard let before = try await training.exercises.own(id, coach: coach, on: connection, logger: context.logger) else {
                throw try await Self.notOwned(id, viewer: coach, training: training, on: connection, context: context)
            }
            try EntityTag(version: before.version).check(ifMatchOf: request)
            switch try await training.exercises.delete(id, coach: coach, on: connection, logger: context.logger) {
            case .deleted: return
            case .missing: throw Self.notFound
            case .inUse: throw APIError.conflict("A workout uses this exercise: take it out of the workout first.", code: "exercise_in_use")
            }
        }
        return .noContent
    }

    /// Why a coach may not change an exercise that is not theirs: one of the library is `403`, any
    /// other is `404`, as if it did not exist.
    static func notOwned(_ id: UUID, viewer: UUID, training: Training, on connection: PostgresConnection, context: AuthenticatedContext) async throws -> APIError {
        guard let seen = try await training.exercises.find(id, viewer: viewer, on: connection, logger: context.logger), seen.coachID == nil else { return notFound }
        return APIError.forbidden("The library's exercises cannot be changed; add your own instead.")
    }
}

extension AuthenticatedContext {
    /// The UUID in the `:id` path segment; anything else is 404 like an unknown id.
    func exerciseID() throws -> UUID {
        guard let id = parameters.get("id").flatMap(UUID.init(parsing:)) else { throw ExerciseRoutes.notFound }
        return id
    }
}
