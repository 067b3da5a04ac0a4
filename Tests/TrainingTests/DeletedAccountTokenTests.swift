import Foundation
import Models
import Testing
import TestSupport
@testable import Training

/// A deleted account's access token outlives it by up to 15 minutes. What it asks after
/// `user.deleted` makes no row that names the account, which nothing would ever remove.
@Suite struct DeletedAccountTokenTests {
    @Test func aDeletedAccountsTokenMakesNothing() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let exercise = try await env.libraryExercise("Pushups")
            try await env.publish(UserDeleted(userID: coach.id), userID: coach.id, producer: "auth")
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM deleted_accounts") == 1 }

            let settings = try await env.call(.put, "/v1/training/settings", as: coach, json: ["time_zone": "Europe/Paris", "weight_unit": "lbs"])
            #expect(settings.status == .unauthorized && settings.code == "account_deleted", "\(settings.text)")
            let own = try await env.call(.post, "/v1/exercises", as: coach, json: ["name": "Left behind"])
            #expect(own.status == .unauthorized && own.code == "account_deleted", "\(own.text)")
            let workout = try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(exercise))
            #expect(workout.status == .unauthorized && workout.code == "account_deleted", "\(workout.text)")

            #expect(try await env.count("SELECT count(*) FROM user_settings WHERE user_id = '\(coach.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM exercises WHERE coach_id = '\(coach.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM workouts WHERE coach_id = '\(coach.id)'") == 0)
        }
    }

    /// A write made while the account's deletion runs waits for it, then finds the tombstone and makes
    /// nothing: without the wait, it would read before the tombstone commits and write after the
    /// deletion's statements read, and its row would outlive the account.
    @Test func aWriteBesideTheDeletionWaitsAndMakesNothing() async throws {
        try await TrainingTestEnvironment.run { env in
            let exercise = try await env.libraryExercise("Pushups")
            let writes: [(name: String, write: @Sendable (TrainingTestEnvironment.User) async throws -> APIReply)] = [
                ("settings", { coach in try await env.call(.put, "/v1/training/settings", as: coach, json: ["time_zone": "Europe/Paris", "weight_unit": "lbs"]) }),
                ("exercise", { coach in try await env.call(.post, "/v1/exercises", as: coach, json: ["name": "Left behind"]) }),
                ("workout", { coach in try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(exercise)) }),
            ]
            for (name, write) in writes {
                let coach = try await env.coach()
                let reply = try await env.whileDeleting(coach.id) { try await write(coach) }
                #expect(reply.status == .unauthorized && reply.code == "account_deleted", "\(name): \(reply.text)")
            }
            // A comment by a coach on a client's session, which stays the client's.
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let session = try #require(try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)]).first)
            let reply = try await env.whileDeleting(coach.id) {
                try await env.call(.post, "/v1/training/sessions/\(session)/comments", as: coach, json: ["text": "Left behind"])
            }
            #expect(reply.status == .unauthorized && reply.code == "account_deleted", "\(reply.text)")
            #expect(try await env.call(.get, "/v1/training/sessions/\(session)", as: client).status == .ok)

            #expect(try await env.count("SELECT count(*) FROM user_settings") == 0)
            #expect(try await env.count("SELECT count(*) FROM exercises WHERE coach_id IS NOT NULL") == 0)
            #expect(try await env.count("SELECT count(*) FROM workouts WHERE coach_id <> '\(coach.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM session_comments") == 0)
        }
    }
}
