import Foundation
import HTTPTypes
import Testing
import TestSupport

/// A cursor is client input: every paginated route answers a cursor it did not make with `400
/// invalid_cursor` (or, where one decodes, an ordinary page), never a 5xx.
@Suite struct CursorFuzzTests {
    static let routes = [
        "/v1/profiles/{id}/followers", "/v1/profiles/{id}/following", "/v1/follow-requests", "/v1/blocks", "/v1/mutes",
        "/v1/notifications", "/v1/profiles/search?q=ada", "/v1/profiles/me/warnings",
    ]

    static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    @Test func everyPaginatedRouteRefusesCursorsItDidNotMake() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            var generator = SeededRandom("everyPaginatedRouteRefusesCursorsItDidNotMake")
            let hostile = [
                #"{"micros":9223372036854775807,"id":"00000000-0000-0000-0000-000000000000"}"#, #"{"micros":-9223372036854775808,"id":"00000000-0000-0000-0000-000000000000"}"#,
                #"{"micros":1e300,"id":"x"}"#, #"{"key":"\u0000","id":"00000000-0000-0000-0000-000000000000"}"#, #"{"key":"ada","id":"00000000-0000-0000-0000-000000000000"}"#,
                "null", "[]", String(repeating: "{", count: 3000),
            ].map(Self.base64URL)
            for template in Self.routes {
                let path = template.replacingOccurrences(of: "{id}", with: cook.path)
                var cursors = hostile
                for _ in 0..<25 {
                    let length = Int.random(in: 1...80, using: &generator)
                    cursors.append(String((0..<length).map { _ in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".randomElement(using: &generator)! }))
                }
                for cursor in cursors {
                    let reply = try await env.call(.get, path + (path.contains("?") ? "&" : "?") + "cursor=\(cursor)", as: cook)
                    #expect(
                        reply.status == .ok || (reply.status == .badRequest && ["invalid_cursor", "invalid_text"].contains(reply.code)),
                        "\(template) cursor \(cursor.prefix(40)): \(reply.status) \(reply.code ?? "")")
                }
            }
        }
    }
}
