import Foundation
import Hummingbird
import Models
import PostgresNIO
import ServiceKit

/// A coach's workouts: templates of blocks of sets, seen only by the coach who wrote them.
struct WorkoutRoutes {
    let training: Training

    func add(to router: Router<ServiceRequestContext>) {
        let workouts = router.group("v1/workouts", context: AuthenticatedContext.self)
        workouts.post(use: create)
        workouts.get(use: list)
        workouts.get(":id", use: workout)
        workouts.put(":id", use: replace)
        workouts.delete(":id", use: remove)
    }

    static let notFound = APIError.notFound("No such workout.", code: "workout_not_found")

    @Sendable func create(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<WorkoutView> {
        try context.require(anyOf: .coach)
        let body = try await request.decode(as: WorkoutBody.self, context: context).checked()
        let training = self.training
        let coach = context.caller.userID
        let id = UUID()
        let stored = try await training.postgres.transaction(logger: context.logger) { connection in
            try await connection.requireLiveAccount(coach, logger: context.logger)
            let problems = try await training.workouts.unusable(body, coach: coach, exercises: training.exercises, on: connection, logger: context.logger)
            if !problems.isEmpty { throw APIError.validation(problems) }
            return try await Self.exercisesStillThere {
                try await training.workouts.insert(body, id: id, coach: coach, on: connection, logger: context.logger)
            }
        }
        return EditedResponse(
            status: .created, headers: [.eTag: EntityTag(version: stored.version).description, .location: "/v1/workouts/\(id.uuidString.lowercased())"],
            response: WorkoutView(stored))
    }

    @Sendable func list(_ request: Request, context: AuthenticatedContext) async throws -> Page<WorkoutSummary> {
        try context.require(anyOf: .coach)
        let page = try PageRequest(query: request)
        let after = try page.position(WorkoutCursor.self)
        let training = self.training
        let rows = try await training.postgres.withConnectionOnItsLoop { connection in
            try await training.workouts.list(coach: context.caller.userID, limit: page.limit, after: after, on: connection, logger: context.logger)
        }
        let (items, next) = Cursor.page(rows, limit: page.limit) { WorkoutCursor(createdAt: $0.createdAt, id: $0.id) }
        return Page(items: items.map(WorkoutSummary.init), nextCursor: next)
    }

    @Sendable func workout(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<WorkoutView> {
        try context.require(anyOf: .coach)
        let id = try context.workoutID()
        let training = self.training
        let found = try await training.postgres.withConnectionOnItsLoop { connection in
            try await training.workouts.find(id, coach: context.caller.userID, on: connection, logger: context.logger)
        }
        guard let found else { throw Self.notFound }
        return EditedResponse(headers: [.eTag: EntityTag(version: found.version).description], response: WorkoutView(found))
    }

    /// Replaces the workout. With `If-Match`, only if it is still that version. Sessions already
    /// scheduled keep the copy they were made with.
    @Sendable func replace(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<WorkoutView> {
        try context.require(anyOf: .coach)
        let id = try context.workoutID()
        let body = try await request.decode(as: WorkoutBody.self, context: context).checked()
        let training = self.training
        let coach = context.caller.userID
        let stored = try await training.postgres.transaction(logger: context.logger) { connection in
            guard let before = try await training.workouts.find(id, coach: coach, forUpdate: true, on: connection, logger: context.logger) else { throw Self.notFound }
            try EntityTag(version: before.version).check(ifMatchOf: request)
            let problems = try await training.workouts.unusable(body, coach: coach, exercises: training.exercises, on: connection, logger: context.logger)
            if !problems.isEmpty { throw APIError.validation(problems) }
            return try await Self.exercisesStillThere {
                try await training.workouts.replace(id, with: body, on: connection, logger: context.logger)
            }
        }
        return EditedResponse(headers: [.eTag: EntityTag(version: stored.version).description], response: WorkoutView(stored))
    }

    /// Deletes the workout. With `If-Match`, only if it is still that version.
    @Sendable func remove(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        try context.require(anyOf: .coach)
        let id = try context.workoutID()
        let training = self.training
        let coach = context.caller.userID
        try await training.postgres.transaction(logger: context.logger) { connection in
            guard let before = try await training.workouts.find(id, coach: coach, forUpdate: true, on: connection, logger: context.logger) else { throw Self.notFound }
            try EntityTag(version: before.version).check(ifMatchOf: request)
            try await training.workouts.delete(id, on: connection, logger: context.logger)
        }
        return .noContent
    }

    /// An exercise deleted between the check and the write: the same answer as one that never was.
    static func exercisesStillThere<T>(_ write: () async throws -> T) async throws -> T {
        do {
            return try await write()
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23503" {
            throw APIError.validation([.init(field: "blocks", message: "names an exercise that was just deleted")])
        }
    }
}

extension AuthenticatedContext {
    /// The UUID in the `:id` path segment; anything else is 404 like an unknown id.
    func workoutID() throws -> UUID {
        guard let id = parameters.get("id").flatMap(UUID.init(parsing:)) else { throw WorkoutRoutes.notFound }
        return id
    }
}
