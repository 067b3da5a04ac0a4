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
}
