import Foundation
import HTTPTypes
@testable import Invitations
import Models
import Testing
import TestSupport

/// When the mailbox's owner first proves the address by a reset (`maker_dropped`), the roster the
/// account's maker built and the name and avatar it showed go, as on a disowning verification.
@Suite struct TakeoverCleanupTests {
    @Test func aFirstProofByResetDropsTheMakersRosterAndName() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let maker = try await env.coach("Totally The Owner")
            let (_, mo) = try await env.acceptedClient("Mo", by: maker)
            _ = try await env.invite("Lee", email: "\(TestEnvironment.uniqueName("lee"))@example.com", by: maker)
            let keyed = try await env.call(
                .post, "/v1/clients", as: maker, json: ["name": "Kim", "email": "\(TestEnvironment.uniqueName("kim"))@example.com"], headers: [HTTPField.Name("Idempotency-Key")!: "maker-1"])
            #expect(keyed.status == .created, "\(keyed.text)")
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(maker.id)'") == 1)
            #expect(try await env.call(.get, "/v1/coach", as: mo).status == .ok)

            try await env.publish(UserPasswordChanged(userID: maker.id, method: .reset, makerDropped: true), userID: maker.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM clients WHERE coach_id = '\(maker.id)'") == 0 }
            #expect(try await env.call(.get, "/v1/coach", as: mo).code == "no_coach")
            try await waitUntil(.seconds(10)) { try await env.events("client.unlinked").contains { $0["reason"] as? String == "coach_deleted" } }
            #expect(try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(maker.id)'") == 1, "the account stays known")
            #expect(try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(maker.id)' AND display_name IS NULL AND avatar_url IS NULL") == 1)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(maker.id)'") == 0)
        }
    }

    /// The takeover handled before the account's registration (its handler failed once and waits
    /// for its retry, or the other process holds it): the maker's name does not come back with it.
    @Test func aRegistrationHandledAfterTheTakeoverBringsBackNoName() async throws {
        try await InvitationsTestEnvironment.run { env in
            let id = UUID()
            try await env.publish(UserPasswordChanged(userID: id, method: .disowned, makerDropped: true), userID: id, sequence: 2)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'user.password_changed'") == 1 }
            let registered = UserRegistered(userID: id, email: "\(id)@example.com", displayName: "Totally The Owner", provider: "email")
            try await env.publish(registered, userID: id, occurredAt: Date().addingTimeInterval(-60), sequence: 1)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(id)'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(id)' AND display_name IS NULL") == 1)
        }
    }

    /// A reset that is not a first proof (`maker_dropped: false`) leaves the roster and the name.
    @Test func aResetOfAProvenAccountKeepsTheRoster() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach("Pat Coach")
            _ = try await env.invite("Lee", email: "\(TestEnvironment.uniqueName("lee"))@example.com", by: coach)
            try await env.publish(UserPasswordChanged(userID: coach.id, method: .reset, makerDropped: false), userID: coach.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'user.password_changed'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM clients WHERE coach_id = '\(coach.id)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(coach.id)' AND display_name = 'Pat Coach'") == 1)
        }
    }
}
