import Foundation
import Models
import ServiceKitEvents
import Testing

/// The envelope's wire form: made once from the payload, read back without the payload's type.
@Suite struct EventEnvelopeTests {
    struct Pinged: EventPayload {
        static let eventType = "test.pinged"
        static let version = 2
        var count: Int
        var note: String?
        var at: Date
    }

    @Test func theWireFormIsTheEnvelopeWithThePayloadAsData() throws {
        let id = UUID(uuidString: "6DE81EAE-51EA-4B58-ADBB-31D983E88BF0")!
        let user = UUID(uuidString: "955F0438-2512-4A69-AE2E-5643FB6CD53F")!
        let at = Date(timeIntervalSince1970: 1_767_225_600.25)
        let envelope = try EventEnvelope(Pinged(count: 3, note: "a/b \"c\"", at: at), producer: "auth", userID: user, id: id, occurredAt: at)
        #expect(
            envelope.json
                == #"{"data":{"at":"2026-01-01T00:00:00.250Z","count":3,"note":"a/b \"c\""},"id":"6de81eae-51ea-4b58-adbb-31d983e88bf0","occurred_at":"2026-01-01T00:00:00.250Z","producer":"auth","type":"test.pinged","user_id":"955f0438-2512-4a69-ae2e-5643fb6cd53f","version":2}"#
        )
        let anonymous = try EventEnvelope(Pinged(count: 1, note: nil, at: at), producer: "auth", userID: nil, id: id, occurredAt: at)
        #expect(!anonymous.json.contains("user_id"))
    }

    @Test func aReadEnvelopeHasItsFieldsAndDecodesItsPayload() throws {
        let at = Date(timeIntervalSince1970: 1_767_225_600.25)
        let sent = try EventEnvelope(Pinged(count: 3, note: nil, at: at), producer: "social", userID: nil, occurredAt: at)
        let read = try EventEnvelope(json: sent.json)
        #expect(read == sent)
        #expect((read.id, read.type, read.version, read.producer, read.userID) == (sent.id, "test.pinged", 2, "social", nil))
        #expect(try read.decode(Pinged.self).count == 3)
        #expect(try read.data()["count"] == .number(3))
    }

    /// The relay adds the outbox row's number; a consumer reads it back, and an envelope relayed
    /// before envelopes carried one reads as it did, without.
    @Test func theRelaysNumberIsReadBackAndAnEnvelopeWithoutOneStillReads() throws {
        let id = UUID(uuidString: "6DE81EAE-51EA-4B58-ADBB-31D983E88BF0")!
        let at = Date(timeIntervalSince1970: 1_767_225_600.25)
        let written = try EventEnvelope(Pinged(count: 3, note: nil, at: at), producer: "invitations", userID: nil, id: id, occurredAt: at)
        #expect(written.sequence == nil && !written.json.contains("sequence"))
        let relayed = EventEnvelope.stamping(written.json, sequence: 9_007_199_254_740_993)
        #expect(
            relayed
                == #"{"sequence":9007199254740993,"data":{"at":"2026-01-01T00:00:00.250Z","count":3},"id":"6de81eae-51ea-4b58-adbb-31d983e88bf0","occurred_at":"2026-01-01T00:00:00.250Z","producer":"invitations","type":"test.pinged","version":2}"#
        )
        let read = try EventEnvelope(json: relayed)
        #expect(read.sequence == 9_007_199_254_740_993)
        #expect((read.id, read.type, read.version, read.occurredAt, read.producer) == (id, "test.pinged", 2, at, "invitations"))
        #expect(try read.decode(Pinged.self).count == 3)
        #expect(EventEnvelope.stamping("{}", sequence: 7) == #"{"sequence":7}"#)

        let before = try EventEnvelope(
            json: #"{"data":{"at":"2026-01-01T00:00:00Z","count":1},"id":"6de81eae-51ea-4b58-adbb-31d983e88bf0","occurred_at":"2026-01-01T00:00:00Z","#
                + #""producer":"invitations","type":"test.pinged","version":2}"#)
        #expect(before.sequence == nil && before.type == "test.pinged")

        // Numbers order one producer's events only; without one, the clock is all there is.
        #expect(EventOrder(read, among: "invitations") == EventOrder(read, among: "invitations"))
        #expect(EventOrder(read, among: "invitations").sequence == 9_007_199_254_740_993)
        #expect(EventOrder(read, among: "auth").sequence == nil)
        #expect(EventOrder(before, among: "invitations").sequence == nil)
        #expect(EventOrder(before, among: "invitations").occurredAt == Date(timeIntervalSince1970: 1_767_225_600))
    }

    /// The fields with a set of values (`reason`, `method`, `kind`) are plain strings on the wire; a
    /// value a newer producer added decodes as `unknown` and is written back as it came.
    @Test func aFieldsValueAddedLaterDecodesAndIsWrittenBackUnchanged() throws {
        let id = UUID(uuidString: "6DE81EAE-51EA-4B58-ADBB-31D983E88BF0")!
        let user = UUID(uuidString: "955F0438-2512-4A69-AE2E-5643FB6CD53F")!
        let at = Date(timeIntervalSince1970: 1_767_225_600)
        let removed = try EventEnvelope(FollowRemoved(followerID: user, followeeID: id, reason: .block), producer: "social", userID: user, id: id, occurredAt: at)
        #expect(
            removed.json
                == #"{"data":{"followee_id":"6de81eae-51ea-4b58-adbb-31d983e88bf0","follower_id":"955f0438-2512-4a69-ae2e-5643fb6cd53f","reason":"block"},"id":"6de81eae-51ea-4b58-adbb-31d983e88bf0","occurred_at":"2026-01-01T00:00:00.000Z","producer":"social","type":"follow.removed","user_id":"955f0438-2512-4a69-ae2e-5643fb6cd53f","version":1}"#
        )
        #expect(try EventEnvelope(json: removed.json).decode(FollowRemoved.self).reason == .block)

        func later<Payload: EventPayload>(_ type: Payload.Type, _ data: String) throws -> Payload {
            let json =
                #"{"data":"# + data + #","id":"6de81eae-51ea-4b58-adbb-31d983e88bf0","occurred_at":"2026-01-01T00:00:00Z","producer":"p","type":""#
                + Payload.eventType + #"","version":1}"#
            return try EventEnvelope(json: json).decode(Payload.self)
        }
        let ids = #""coach_id":"\#(id)","client_id":"\#(user)""#
        let unlinked = try later(ClientUnlinked.self, #"{\#(ids),"reason":"coach_merged","has_other_coach":false}"#)
        #expect(unlinked.reason == .unknown("coach_merged") && unlinked.reason.rawValue == "coach_merged")
        #expect(try later(ClientUnlinked.self, #"{\#(ids),"reason":"coach_deleted","has_other_coach":false}"#).reason == .coachDeleted)
        let changed = try later(UserPasswordChanged.self, #"{"user_id":"\#(user)","method":"passkey"}"#)
        #expect(changed.method == .unknown("passkey") && !changed.makerDropped)
        #expect(try later(UserPasswordChanged.self, #"{"user_id":"\#(user)","method":"disowned"}"#).makerDropped)
        let notified = try later(NotificationCreated.self, #"{"notification_id":"\#(id)","user_id":"\#(user)","kind":"comment"}"#)
        #expect(notified.kind == .unknown("comment"))
        #expect(try later(FollowRemoved.self, #"{"follower_id":"\#(id)","followee_id":"\#(user)","reason":"mute"}"#).reason.rawValue == "mute")

        // Relayed on, the value is the text that came.
        let relayed = try EventEnvelope(unlinked, producer: "invitations", userID: user, id: id, occurredAt: at)
        #expect(relayed.json.contains(#""reason":"coach_merged""#))
        #expect(ClientUnlinked.Reason(rawValue: "left") == .left && NotificationCreated.Kind.followRequest.rawValue == "follow_request")
    }

    @Test func aPayloadOfAnotherTypeOrABrokenEnvelopeIsRefused() throws {
        struct Other: EventPayload { static let eventType = "test.other"; var count: Int }
        let read = try EventEnvelope(json: try EventEnvelope(Pinged(count: 3, note: nil, at: Date()), producer: "auth", userID: nil).json)
        #expect(throws: DecodingError.self) { try read.decode(Other.self) }
        #expect(throws: (any Error).self) { try EventEnvelope(json: #"{"id":"not-a-uuid","type":"x","version":1,"occurred_at":"2026-01-01T00:00:00Z","producer":"p"}"#) }
        #expect(throws: (any Error).self) { try EventEnvelope(json: "[]") }
        let withoutData = #"{"id":"6DE81EAE-51EA-4B58-ADBB-31D983E88BF0","type":"test.pinged","version":2,"occurred_at":"2026-01-01T00:00:00Z","producer":"p"}"#
        #expect(throws: (any Error).self) { try EventEnvelope(json: withoutData) }
        #expect(try EventEnvelope(json: String(withoutData.dropLast()) + #","data":[1,{"a":null}]}"#).type == "test.pinged")
    }
}
