import Foundation
import HTTPTypes
@testable import Invitations
import Models
import ServiceKit
import Testing
import TestSupport

/// The roster entry's id travels in the events about it, so another service can key what a coach
/// prepares for a client on the entry before the client has an account.
@Suite struct RosterEntryEventsTests {
    @Test func theRosterEntryIsNamedWhenAddedAcceptedLeftAndRemoved() async throws {
        try await InvitationsTestEnvironment.run { env in
            let coach = try await env.coach()
            let email = "\(TestEnvironment.uniqueName("re"))@example.com"
            let (created, code) = try await env.invite("Rae", email: email, by: coach)
            let entry = try #require(created.json["id"] as? String).lowercased()

            try await waitUntil(.seconds(10)) { try await env.events("client.invited").contains { ($0["roster_entry_id"] as? String)?.lowercased() == entry } }
            let invited = try #require(try await env.events("client.invited").first { ($0["roster_entry_id"] as? String)?.lowercased() == entry })
            #expect((invited["coach_id"] as? String)?.lowercased() == coach.path)

            let rae = try await env.user("Rae", email: email)
            let auth = env.actAsAuth(granting: rae)
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: rae).status == .ok)
            try await auth.value
            let accepted = try #require(try await env.events("invitation.accepted").first { ($0["client_id"] as? String)?.lowercased() == rae.path })
            #expect((accepted["roster_entry_id"] as? String)?.lowercased() == entry)
            #expect((accepted["coach_id"] as? String)?.lowercased() == coach.path)

            #expect(try await env.call(.delete, "/v1/coach", as: rae).status == .noContent)
            try await waitUntil(.seconds(10)) { try await env.events("client.unlinked").contains { ($0["client_id"] as? String)?.lowercased() == rae.path } }
            let unlinked = try #require(try await env.events("client.unlinked").first { ($0["client_id"] as? String)?.lowercased() == rae.path })
            #expect((unlinked["roster_entry_id"] as? String)?.lowercased() == entry)

            #expect(try await env.call(.delete, "/v1/clients/\(entry)", as: coach).status == .noContent)
            try await waitUntil(.seconds(10)) { try await env.events("client.removed").contains { ($0["roster_entry_id"] as? String)?.lowercased() == entry } }
            // Another coach's entry cannot be removed, and nothing is announced for it.
            let other = try await env.coach("Other")
            let (second, _) = try await env.invite("Sol", email: "\(TestEnvironment.uniqueName("sol"))@example.com", by: coach)
            let secondID = try #require(second.json["id"] as? String).lowercased()
            #expect(try await env.call(.delete, "/v1/clients/\(secondID)", as: other).status == .notFound)
            #expect(try await env.events("client.removed").allSatisfy { ($0["roster_entry_id"] as? String)?.lowercased() != secondID })
        }
    }

    /// Consumers built before the field decode the new events, and new consumers decode old ones.
    @Test func theFieldIsAdditive() throws {
        let old = #"{"invitation_id":"\#(UUID())","coach_id":"\#(UUID())","client_id":"\#(UUID())"}"#
        #expect(try JSONDecoder().decode(InvitationAccepted.self, from: Data(old.utf8)).rosterEntryID == nil)
        let entry = UUID()
        let new = InvitationAccepted(invitationID: UUID(), coachID: UUID(), clientID: UUID(), rosterEntryID: entry)
        let json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(new)) as! [String: Any]
        #expect((json["roster_entry_id"] as? String)?.lowercased() == entry.uuidString.lowercased())
        #expect(json.keys.sorted() == ["client_id", "coach_id", "invitation_id", "roster_entry_id"])
        let unlinked = #"{"coach_id":"\#(UUID())","client_id":"\#(UUID())","reason":"left","has_other_coach":false}"#
        #expect(try JSONDecoder().decode(ClientUnlinked.self, from: Data(unlinked.utf8)).rosterEntryID == nil)
    }
}
