import Foundation
import Models
import Testing
import TestSupport

/// The allergies meals are checked against are the ones social's latest profile event holds: an
/// older event delivered after it (a retry after its handler failed, another process's batch, a
/// replay after Redis lost its data) does not bring back what the user changed since.
@Suite struct ProfileEventOrderTests {
    typealias Env = NutritionTestEnvironment

    @Test func anOlderProfileEventDeliveredLateChangesNothing() async throws {
        try await Env.run { env in
            try await RelayedProducer.run("social", stream: env.config.events.stream) { social in
                let user = try await env.user()
                @Sendable func allergies() async throws -> Int {
                    try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(user.id)' AND allergies::text LIKE '%Peanut%'")
                }
                @Sendable func profile(_ allergies: [Allergy]) -> ProfileUpdated {
                    ProfileUpdated(userID: user.id, dietaryPreferences: [], allergies: allergies, displayName: nil, avatarURL: nil)
                }
                let peanut = try await social.emit(profile([.init(name: "Peanut", severity: .lifeThreatening)]), userID: user.id)
                try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE event_id = '\(peanut.id)'") == 1 }
                #expect(try await allergies() == 1)

                // The profile as it was before, numbered before the peanut allergy, delivered after it.
                let number = try #require(try await EventStream(redis: env.redis, name: env.config.events.stream).envelopes("profile.updated").last?["sequence"] as? Int)
                let late = try EventEnvelope(profile([]), producer: "social", userID: user.id, occurredAt: Date() + 3600)
                _ = try await env.redis.xadd(
                    env.config.events.stream, maxLength: nil,
                    fields: [
                        ("id", late.id.uuidString.lowercased()), ("type", late.type), ("envelope", EventEnvelope.stamping(late.json, sequence: Int64(number) - 1)),
                    ])
                try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE event_id = '\(late.id)'") == 1 }
                #expect(try await allergies() == 1, "an older profile, however late its clock")

                // A newer one applies.
                let cleared = try await social.emit(profile([]), userID: user.id)
                try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE event_id = '\(cleared.id)'") == 1 }
                #expect(try await allergies() == 0)

                // The marks of what was applied name the account: they go with it.
                #expect(try await env.count("SELECT count(*) FROM event_latest WHERE subject = '\(user.id)'") == 1)
                try await env.publish(UserDeleted(userID: user.id), userID: user.id)
                try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM deleted_accounts") > 0 }
                try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM event_latest WHERE subject = '\(user.id)'") == 0 }
            }
        }
    }
}
