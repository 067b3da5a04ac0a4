import Foundation
import HTTPTypes
import Models
@testable import Nutrition
import Testing
import TestSupport

/// When the mailbox's owner first proves the address (`maker_dropped`), the diary the account's maker
/// kept goes: the diet profile and goals (back to the defaults), meals, weight and ketones, the share
/// links (they answer `410`), and the coach links either way.
@Suite struct TakeoverCleanupTests {
    typealias Env = NutritionTestEnvironment

    @Test func aFirstProofDropsTheMakersDiary() async throws {
        try await Env.run { env in
            let maker = try await env.user()
            try await env.setProfile(maker, diet: "keto", zone: "Europe/Paris", goal: 1500, unit: "lbs")
            try await env.publish(
                ProfileUpdated(userID: maker.id, dietaryPreferences: [], allergies: [.init(name: "Peanut", severity: .severe)], displayName: nil, avatarURL: nil),
                userID: maker.id, producer: "social")
            let meal = try #require(try await env.meal(maker, at: DiaryTests.daysAgo(1), consume: true)["id"] as? String)
            #expect(try await env.call(.post, "/v1/metrics/weight", as: maker, json: ["value": 70, "unit": "kg"], headers: [HTTPField.Name("Idempotency-Key")!: "maker-1"]).status == .created)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(maker.id)'") == 1)
            let share = try #require(try await env.call(.post, "/v1/meals/\(meal)/share", as: maker).json["token"] as? String)
            #expect(try await env.call(.get, "/v1/shared/\(share)").status == .ok)
            // A coach the maker let in, and a client the maker coached.
            let coach = try await env.user()
            let client = try await env.user()
            _ = try await env.meal(client, at: DiaryTests.daysAgo(0), consume: true)
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: maker.id), userID: maker.id, producer: "invitations")
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: maker.id, clientID: client.id), userID: client.id, producer: "invitations")
            try await waitUntil(.seconds(15)) { try await env.call(.get, "/v1/nutrition/clients/\(maker.path)/meals", as: coach).status == .ok }
            try await waitUntil(.seconds(15)) { try await env.call(.get, "/v1/nutrition/clients/\(client.path)/meals", as: maker).status == .ok }
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(maker.id)' AND allergies <> '[]'") == 1 }
            // The day's photo analyses the maker used, as they are counted.
            try await env.execute("INSERT INTO meal_analysis_days (user_id, local_date, analyses) VALUES ('\(maker.id)', current_date, 3)")

            try await env.publish(UserPasswordChanged(userID: maker.id, method: .reset, makerDropped: true), userID: maker.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM meals WHERE user_id = '\(maker.id)'") == 0 }

            let profile = try await env.call(.get, "/v1/nutrition/profile", as: maker)
            #expect(profile.status == .ok, "\(profile.text)")
            #expect(profile.json["diet"] as? String == "balanced" && profile.json["daily_calorie_goal"] as? Int == 2000, "\(profile.text)")
            #expect(profile.json["time_zone"] as? String == "UTC" && profile.json["weight_unit"] as? String == "kg", "\(profile.text)")
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(maker.id)' AND allergies = '[]'") == 1)
            #expect(try await env.call(.get, "/v1/meals", as: maker).items.isEmpty)
            #expect((try await env.call(.get, "/v1/metrics/weight", as: maker).json["days"] as? [Any])?.isEmpty == true)
            #expect(try await env.count("SELECT count(*) FROM meal_days WHERE user_id = '\(maker.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(maker.id)'") == 0)
            // The owner's day starts with the whole allowance.
            #expect(try await env.count("SELECT count(*) FROM meal_analysis_days WHERE user_id = '\(maker.id)'") == 0)
            #expect(try await env.call(.get, "/v1/shared/\(share)").code == "share_gone")
            #expect(try await env.call(.get, "/v1/nutrition/clients/\(maker.path)/meals", as: coach).status == .notFound)
            #expect(try await env.call(.get, "/v1/nutrition/clients/\(client.path)/meals", as: maker).status == .notFound)
            // The client's own diary is theirs and stays.
            #expect(try await env.call(.get, "/v1/meals", as: client).items.count == 1)

            // An acceptance from before the takeover, delivered late, does not link again; the owner
            // keeps a diary of their own from now on.
            try await env.publish(
                InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: maker.id), userID: maker.id, producer: "invitations", occurredAt: Date() - 60)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'invitation.accepted'") == 3 }
            #expect(try await env.call(.get, "/v1/nutrition/clients/\(maker.path)/meals", as: coach).status == .notFound)
            _ = try await env.meal(maker, at: DiaryTests.daysAgo(0))
            #expect(try await env.call(.get, "/v1/meals", as: maker).items.count == 1)
        }
    }

    /// A reset of a proven account (`maker_dropped: false`) keeps the diary.
    @Test func aResetOfAProvenAccountKeepsTheDiary() async throws {
        try await Env.run { env in
            let owner = try await env.user()
            try await env.setProfile(owner, diet: "keto")
            _ = try await env.meal(owner)
            try await env.publish(UserPasswordChanged(userID: owner.id, method: .reset, makerDropped: false), userID: owner.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'user.password_changed'") == 1 }
            #expect(try await env.call(.get, "/v1/meals", as: owner).items.count == 1)
            #expect(try await env.call(.get, "/v1/nutrition/profile", as: owner).json["diet"] as? String == "keto")
        }
    }
}
