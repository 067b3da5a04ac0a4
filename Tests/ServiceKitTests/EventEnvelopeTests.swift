import Foundation
import Models
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
