import Foundation
import Models
import PostgresNIO
import Testing
import TestSupport

/// A client's role follows the order invitations' database gave their link's events, whatever the
/// clocks of the invitations processes that wrote them say.
@Suite struct ClientRoleOrderTests {
    @Test func aClientsRoleFollowsTheOrderTheLinkEventsCommittedWhateverTheProducersClocks() async throws {
        try await AuthTestEnvironment.run { env in
            try await RelayedProducer.run("invitations", stream: env.config.events.stream) { invitations in
                let client = try await env.signUp()
                let clientID = try #require(UUID(uuidString: client.id))
                let coachID = UUID()
                let hour: TimeInterval = 3600
                /// Written by an invitations process whose clock is `skew` off, and handled here.
                @Sendable func emit<Payload: EventPayload>(_ payload: Payload, clockSkew skew: TimeInterval) async throws {
                    let event = try await invitations.emit(payload, userID: clientID, clockSkew: skew)
                    try await waitUntil(.seconds(15)) {
                        try await env.query { postgres in
                            try await postgres.query("SELECT 1 FROM inbox WHERE event_id = \(event.id)", logger: TestEnvironment.logger).collect().count == 1
                        }
                    }
                }
                @Sendable func roles() async throws -> [String]? {
                    try await env.call(.get, "/v1/auth/me", token: client.accessToken).json["roles"] as? [String]
                }
                let accepted = InvitationAccepted(invitationID: UUID(), coachID: coachID, clientID: clientID)
                let left = ClientUnlinked(coachID: coachID, clientID: clientID, reason: .left, hasOtherCoach: false)

                // Accepted through a process an hour ahead, left through one whose clock is right.
                try await emit(accepted, clockSkew: hour)
                #expect(try await roles() == ["user", "client"])
                try await emit(left, clockSkew: 0)
                #expect(try await roles() == ["user"], "the client left")

                // Left through the process an hour ahead, accepted again through the right one.
                try await emit(accepted, clockSkew: 0)
                try await emit(left, clockSkew: hour)
                #expect(try await roles() == ["user"])
                try await emit(accepted, clockSkew: 0)
                #expect(try await roles() == ["user", "client"], "the client came back")

                // Left through a process an hour behind.
                try await emit(left, clockSkew: -hour)
                #expect(try await roles() == ["user"], "the client left again")
            }
        }
    }
}
