import Foundation
import HTTPTypes
import Models
import ServiceKit
import Testing
import TestSupport

/// Whether a coach reads a client's diary follows the order invitations' database gave the link's
/// events, whatever the clocks of the invitations processes that wrote them say.
@Suite struct CoachLinkOrderTests {
    typealias Env = NutritionTestEnvironment

    @Test func aLinksEventsCountInTheOrderTheyCommittedWhateverTheProducersClocks() async throws {
        try await Env.run { env in
            try await RelayedProducer.run("invitations", stream: env.config.events.stream) { invitations in
                let client = try await env.user()
                let coach = try await env.user()
                let diary = "/v1/nutrition/clients/\(client.path)/meals"
                let hour: TimeInterval = 3600
                /// Written by an invitations process whose clock is `skew` off, and handled here.
                @Sendable func emit<Payload: EventPayload>(_ payload: Payload, clockSkew skew: TimeInterval) async throws {
                    let event = try await invitations.emit(payload, userID: client.id, clockSkew: skew)
                    try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE event_id = '\(event.id)'") == 1 }
                }
                let accepted = InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id)
                let left = ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false)

                // Accepted through a process an hour ahead, left through one whose clock is right.
                try await emit(accepted, clockSkew: hour)
                #expect(try await env.call(.get, diary, as: coach).status == .ok)
                try await emit(left, clockSkew: 0)
                #expect(try await env.call(.get, diary, as: coach).status == .notFound, "the client left")

                // Left through the process an hour ahead, accepted again through the right one.
                try await emit(accepted, clockSkew: 0)
                #expect(try await env.call(.get, diary, as: coach).status == .ok)
                try await emit(left, clockSkew: hour)
                #expect(try await env.call(.get, diary, as: coach).status == .notFound)
                try await emit(accepted, clockSkew: 0)
                #expect(try await env.call(.get, diary, as: coach).status == .ok, "the client came back")

                // Left through a process an hour behind.
                try await emit(left, clockSkew: -hour)
                #expect(try await env.call(.get, diary, as: coach).status == .notFound, "the client left again")

                // An acceptance numbered before that unlink, delivered late (a retry), gives nothing
                // back, however late its clock says it happened.
                let unlinked = try #require(try await EventStream(redis: env.redis, name: env.config.events.stream).envelopes("client.unlinked").last)
                let number = try #require(unlinked["sequence"] as? Int)
                let late = try EventEnvelope(accepted, producer: "invitations", userID: client.id, occurredAt: Date() + hour)
                _ = try await env.redis.xadd(
                    env.config.events.stream, maxLength: nil,
                    fields: [
                        ("id", late.id.uuidString.lowercased()), ("type", late.type),
                        ("envelope", EventEnvelope.stamping(late.json, sequence: Int64(number) - 1)),
                    ])
                try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE event_id = '\(late.id)'") == 1 }
                #expect(try await env.call(.get, diary, as: coach).status == .notFound, "a late acceptance")
            }
        }
    }

    /// An acceptance and the unlink that followed it, handled at the same moment (two processes
    /// share the stream): the acceptance waits for the unlink in flight and then links nothing.
    @Test func anAcceptanceHandledWhileItsUnlinkIsInFlightLinksNothing() async throws {
        try await Env.run { env in
            try await RelayedProducer.run("invitations", stream: env.config.events.stream) { invitations in
                let client = try await env.user()
                let coach = try await env.user()
                let unlinked = try EventEnvelope(ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false), producer: "invitations", userID: client.id)
                // Numbered after any acceptance the producer writes here.
                let after = try EventEnvelope(json: EventEnvelope.stamping(unlinked.json, sequence: Int64.max / 2))
                let (started, starting) = AsyncStream<EventEnvelope>.makeStream()
                try await env.withConnection { connection in
                    _ = try await connection.query("BEGIN", logger: TestEnvironment.logger)
                    try await CoachLinkStore().unlink(
                        coach: coach.id, client: client.id, order: EventOrder(after, among: "invitations"), on: connection, logger: TestEnvironment.logger)
                    starting.yield(try await invitations.emit(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id), userID: client.id))
                    starting.finish()
                    try await env.awaitLockWait()
                    _ = try await connection.query("COMMIT", logger: TestEnvironment.logger)
                }
                for await accepted in started {
                    try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE event_id = '\(accepted.id)'") == 1 }
                }
                #expect(try await env.count("SELECT count(*) FROM coach_links WHERE client_id = '\(client.id)'") == 0)
                #expect(try await env.call(.get, "/v1/nutrition/clients/\(client.path)/meals", as: coach).status == .notFound)
            }
        }
    }
}
