import Foundation
import Hummingbird
import PostgresNIO
import ServiceKit

/// The coach's side of sessions: assigning a workout to a client (by roster entry, before or after
/// the client accepted), pushing a changed workout to the copies not started, unscheduling one, and
/// following a client. Coaches only (`403` to anyone else); another coach's client, session or
/// workout is `404`.
struct AssignmentRoutes {
    let training: Training

    func add(to router: Router<ServiceRequestContext>) {
        let clients = router.group("v1/training/clients", context: AuthenticatedContext.self)
        clients.post(":client_id/assignments", use: assign)
        clients.get(":client_id", use: client)
        router.group("v1/workouts", context: AuthenticatedContext.self).post(":id/push", use: push)
        router.group("v1/training/sessions", context: AuthenticatedContext.self).delete(":id", use: unschedule)
    }

    struct AssignedResponse: ResponseEncodable {
        var items: [SessionView]
        enum CodingKeys: String, CodingKey { case items }
    }

    /// The sessions, each a copy of the workout as it is now, in one statement; the client (once
    /// there is one) hears of them live (`workout_assigned`).
    @Sendable func assign(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<AssignedResponse> {
        try context.requireCoach()
        let entryID = try Self.entryID(context)
        let draft = try AssignmentDraft(try await request.decode(as: AssignmentDraft.Body.self, context: context))
        let training = self.training
        let coach = context.caller.userID
        try await training.awaitRosterEntry(entryID, coach: coach, logger: context.logger)
        let (sessions, unit) = try await training.postgres.transaction(logger: context.logger) { connection -> ([SessionRecord], WeightUnit) in
            let entry = try await training.rosterEntry(entryID, coach: coach, on: connection, logger: context.logger)
            guard entry.stage == .pending || entry.stage == .accepted else { throw SessionErrors.clientNotLinked }
            let full = try await training.sessions.fullDays(of: entry.id, among: draft.days, on: connection, logger: context.logger)
            guard full.isEmpty else { throw SessionErrors.dayFull(full) }
            guard let sessions = try await training.sessions.assign(workout: draft.workoutID, coach: coach, entry: entry, days: draft.days, on: connection, logger: context.logger)
            else { throw SessionErrors.workoutNotFound }
            if let client = entry.clientID {
                try await training.outbox.write(
                    WorkoutAssigned(coachID: coach, clientID: client, workoutID: draft.workoutID, sessionIDs: sessions.map(\.id), dates: sessions.map(\.scheduledOn)),
                    userID: client, live: true, on: connection, logger: context.logger)
            }
            return (sessions, try await training.sessions.settings(of: coach, on: connection, logger: context.logger).unit)
        }
        return EditedResponse(status: .created, response: AssignedResponse(items: sessions.map { SessionView(session: $0, unit: unit) }))
    }

    struct PushResponse: ResponseEncodable {
        var sessionIDs: [UUID]
        var updated: Int
        enum CodingKeys: String, CodingKey { case sessionIDs = "session_ids", updated }
    }

    /// The workout as it is now, copied onto its sessions the clients have not started (logged or
    /// skipped); a started session keeps the copy it was done from. With `If-Match`, only if the
    /// workout is still that version.
    @Sendable func push(_ request: Request, context: AuthenticatedContext) async throws -> PushResponse {
        try context.requireCoach()
        guard let workout = context.parameters.get("id").flatMap(UUID.init(parsing:)) else { throw SessionErrors.workoutNotFound }
        let training = self.training
        let coach = context.caller.userID
        let ids = try await training.postgres.transaction(logger: context.logger) { connection -> [UUID] in
            // The coach's account before the workout, as the purge of a deleted coach takes them.
            try await connection.requireLiveAccount(coach, logger: context.logger)
            guard let version = try await training.sessions.holdWorkout(workout, coach: coach, on: connection, logger: context.logger) else {
                throw SessionErrors.workoutNotFound
            }
            // The version the coach's app showed: an edit from another device since then is not
            // pushed unseen onto every client's plan.
            try EntityTag(version: version).check(ifMatchOf: request)
            return try await training.sessions.push(workout: workout, coach: coach, on: connection, logger: context.logger)
        }
        return PushResponse(sessionIDs: ids.sorted { $0.uuidString < $1.uuidString }, updated: ids.count)
    }

    /// Unschedules a session the client has not started.
    @Sendable func unschedule(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        try context.requireCoach()
        let id = try context.sessionID()
        let training = self.training
        let coach = context.caller.userID
        try await training.postgres.transaction(logger: context.logger) { connection in
            guard let session = try await training.sessions.find(id, party: coach, lock: true, on: connection, logger: context.logger), session.coachID == coach else {
                throw SessionErrors.sessionNotFound
            }
            guard !session.started, try await training.sessions.unschedule(id, coach: coach, on: connection, logger: context.logger) else { throw SessionErrors.started }
        }
        return .noContent
    }

    /// The client's sessions from `from` through `to` (default: the last 30 days through the next 7,
    /// in the client's time zone), what was logged against what was prescribed, and adherence.
    @Sendable func client(_ request: Request, context: AuthenticatedContext) async throws -> ClientProgress {
        try context.requireCoach()
        let entryID = try Self.entryID(context)
        let query = request.uri.queryParameters
        var problems: [Problem.FieldError] = []
        func day(_ name: String) -> String? {
            guard let text = query[name[...]].map(String.init) else { return nil }
            guard LocalDay(text) != nil else {
                problems.append(.init(field: name, message: "must be a date, YYYY-MM-DD"))
                return nil
            }
            return text
        }
        let from = day("from")
        let to = day("to")
        if let from, let to, from > to { problems.append(.init(field: "to", message: "must not be before from")) }
        if !problems.isEmpty { throw APIError.validation(problems) }
        let training = self.training
        let coach = context.caller.userID
        // One snapshot: the sessions, their sets and the counts agree with each other.
        return try await training.postgres.snapshot(logger: context.logger) { connection in
            guard let entry = try await training.roster.find(entryID, on: connection, logger: context.logger), entry.coachID == coach, entry.stage != .removed else {
                throw SessionErrors.clientNotFound
            }
            // What a client who left does is no longer their former coach's to read.
            guard entry.stage != .left else { throw SessionErrors.clientNotLinked }
            return try await ClientProgress.load(entry, from: from, to: to, viewer: coach, training: training, on: connection, logger: context.logger)
        }
    }

    static func entryID(_ context: AuthenticatedContext) throws -> UUID {
        guard let id = context.parameters.get("client_id").flatMap(UUID.init(parsing:)) else { throw SessionErrors.clientNotFound }
        return id
    }
}
