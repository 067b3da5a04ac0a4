import Foundation
import Models
import NIOCore
@testable import ServiceKitHTTP
import Testing

/// `APIRequestDecoder` parses a body once, both for the type and for the keys a strict body checks.
@Suite struct RequestDecoderTests {
    struct Mute: StrictJSONBody, Equatable {
        var durationSeconds: Int?
        var note: String
        enum CodingKeys: String, CodingKey, CaseIterable { case durationSeconds = "duration_seconds", note }
    }

    /// Not strict: a body it does not know the keys of (none in the services; `SourceRulesTests`).
    struct Loose: Decodable, Equatable {
        var note: String
    }

    func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T {
        try APIRequestDecoder.decode(T.self, from: ByteBuffer(string: text))
    }

    func problem(_ body: () throws -> Void) -> APIError? {
        do {
            try body()
            return nil
        } catch {
            return error as? APIError
        }
    }

    @Test func aStrictBodyTakesItsOwnKeysAndRefusesOthersByName() throws {
        #expect(try decode(Mute.self, #"{"duration_seconds": 3600, "note": "a"}"#) == Mute(durationSeconds: 3600, note: "a"))
        #expect(try decode(Mute.self, #"{"note": "a"}"#) == Mute(durationSeconds: nil, note: "a"))
        let misspelt = problem { _ = try decode(Mute.self, #"{"duration": 3600, "note": "a", "zeal": true}"#) }
        #expect(misspelt?.code == "validation_failed")
        #expect(misspelt?.errors?.map(\.field) == ["duration", "zeal"])
        #expect(misspelt?.errors?.first?.message == "is not a field of this request; its fields are duration_seconds, note")
        #expect(try decode(Loose.self, #"{"note": "a", "other": 1}"#) == Loose(note: "a"))
    }

    @Test func whatIsNotTheBodyItShouldBeIsNamed() {
        #expect(problem { _ = try decode(Mute.self, #"{"note": 5}"#) }?.errors?.map(\.field) == ["note"])
        #expect(problem { _ = try decode(Mute.self, #"{"duration_seconds": 1}"#) }?.errors?.first?.message == "is required")
        #expect(problem { _ = try decode(Mute.self, "[1, 2]") }?.code == "validation_failed")
        #expect(problem { _ = try decode(Mute.self, #"{"note": "a""#) }?.code == "malformed_json")
        #expect(problem { _ = try decode(Mute.self, #"{"note": null}"#) }?.errors?.first?.message == "must not be null")
    }

    @Test func aJSONValueBodyIsTakenWhole() throws {
        #expect(try decode(JSONValue.self, #"{"a": [1, {"b": null}]}"#) == .object(["a": .array([.number(1), .object(["b": .null])])]))
        #expect(try decode(JSONValue.self, "[true]") == .array([.bool(true)]))
    }
}
