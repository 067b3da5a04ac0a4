import Foundation
import HTTPTypes
import Testing
import TestSupport

/// A share link's token is kept only as its hash, and the idempotency layer keeps no copy of it.
@Suite struct ShareIdempotencyTests {
    typealias Env = NutritionTestEnvironment

    static func key(_ value: String) -> HTTPFields { [HTTPField.Name("Idempotency-Key")!: value] }

    /// The first response holds the token; only its status is kept for the key, so a retry with the
    /// key makes no second link and is told the response cannot come again.
    @Test func aShareLinksTokenIsNeverKeptForItsIdempotencyKey() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let first = try await env.call(.post, "/v1/meals/\(id)/share", as: user, headers: Self.key("share-1"))
            #expect(first.status == .created, "\(first.text)")
            let token = try #require(first.json["token"] as? String)
            #expect(first.headers[HTTPField.Name("X-Idempotency-Holds-Secret")!] == nil, "the mark stays inside")

            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE key = 'share-1' AND status = 201") == 1, "the key is kept")
            let holdingToken = """
                SELECT count(*) FROM idempotency_keys
                WHERE position(convert_to('\(token)', 'UTF8') IN coalesce(body, ''::bytea)) > 0 OR coalesce(headers, '') LIKE '%\(token)%'
                """
            #expect(try await env.count(holdingToken) == 0, "no share token in idempotency_keys")

            let retry = try await env.call(.post, "/v1/meals/\(id)/share", as: user, headers: Self.key("share-1"))
            #expect(retry.status == .conflict && retry.code == "idempotency_answer_withheld", "\(retry.text)")
            #expect(!retry.text.contains(token))
            #expect(try await env.count("SELECT count(*) FROM shares WHERE meal_id = '\(id)'") == 1, "the retry made no second link")
            #expect(try await env.call(.get, "/v1/shared/\(token)").status == .ok, "the first link works")

            // A new key makes a new link; so does a request without one, whose response carries no mark either.
            let second = try await env.call(.post, "/v1/meals/\(id)/share", as: user, headers: Self.key("share-2"))
            #expect(second.status == .created && second.json["token"] as? String != token, "\(second.text)")
            let unkeyed = try await env.call(.post, "/v1/meals/\(id)/share", as: user)
            #expect(unkeyed.status == .created && unkeyed.headers[HTTPField.Name("X-Idempotency-Holds-Secret")!] == nil)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE body IS NOT NULL") == 0)
        }
    }
}
