import Foundation
import Models
import Testing
import TestSupport

/// What invitations knows of an account comes from auth's and social's events, which can arrive
/// before the `user.registered` that makes the account here (two processes take turns at the
/// stream; a failed handler is retried after later events): none of them is lost.
@Suite struct AccountEventOrderTests {
    @Test func eventsBeforeTheRegistrationAreNotLost() async throws {
        try await InvitationsTestEnvironment.run { env in
            let id = UUID()
            let email = "\(TestEnvironment.uniqueName("early"))@privaterelay.appleid.com"
            try await env.publish(UserEmailVerified(userID: id, email: email, vouchedBy: "apple"), userID: id)
            try await env.publish(UserRolesChanged(userID: id, roles: [.user, .coach], added: [.coach], removed: []), userID: id)
            try await env.publish(
                ProfileUpdated(userID: id, dietaryPreferences: [], allergies: [], displayName: "Early Bird", avatarURL: "/v1/profiles/\(id)/avatar?v=1"),
                userID: id, producer: "social")
            try await env.publish(UserRegistered(userID: id, email: email, displayName: nil, provider: "apple"), userID: id)
            try await waitUntil(.seconds(20)) {
                try await env.count(
                    """
                    SELECT count(*) FROM accounts WHERE user_id = '\(id)' AND email_verified AND email_vouched_by = 'apple'
                      AND roles @> ARRAY['coach'] AND display_name = 'Early Bird' AND avatar_url IS NOT NULL
                    """) == 1
            }
            // The name and avatar cleared in the profile are cleared here: each event has them whole.
            try await env.publish(ProfileUpdated(userID: id, dietaryPreferences: [], allergies: [], displayName: nil, avatarURL: nil), userID: id, producer: "social")
            try await waitUntil(.seconds(20)) {
                try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(id)' AND display_name IS NULL AND avatar_url IS NULL") == 1
            }

            // Roles with no account here yet, and nothing to make one: retried until the registration lands.
            let later = UUID()
            try await env.publish(UserRolesChanged(userID: later, roles: [.user, .coach], added: [.coach], removed: []), userID: later)
            try await Task.sleep(for: .milliseconds(500))
            try await env.publish(
                UserRegistered(userID: later, email: "\(TestEnvironment.uniqueName("later"))@example.com", displayName: nil, provider: "password"), userID: later)
            try await waitUntil(.seconds(20)) { try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(later)' AND roles @> ARRAY['coach']") == 1 }

            // The same after a backlog: roles made twenty minutes ago, read here before their account's
            // registration (whose handling failed once, or another process holds it), still land.
            let behind = UUID()
            try await env.publish(UserRolesChanged(userID: behind, roles: [.user, .coach], added: [.coach], removed: []), userID: behind, occurredAt: Date() - 1_200)
            try await Task.sleep(for: .milliseconds(500))
            try await env.publish(
                UserRegistered(userID: behind, email: "\(TestEnvironment.uniqueName("behind"))@example.com", displayName: nil, provider: "password"), userID: behind,
                occurredAt: Date() - 1_260)
            try await waitUntil(.seconds(20)) { try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(behind)' AND roles @> ARRAY['coach']") == 1 }
        }
    }
}
