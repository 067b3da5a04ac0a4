import Foundation
import HTTPTypes
import Testing
import TestSupport

@testable import Nutrition

/// The share card is drawn once per link (its snapshot does not change while the link lives), kept
/// with the link, and served with a strong `ETag` and a long `Cache-Control`; an ended link is `410`
/// whatever was kept.
@Suite struct ShareCardCachingTests {
    typealias Env = NutritionTestEnvironment

    @Test func aCardIsDrawnOnceAndRevalidatedByItsETag() async throws {
        let adminPort = try RedisServer.freePort()
        try await Env.run(["ADMIN_HTTP_PORT": String(adminPort)]) { env in
            @Sendable func drawn() async throws -> Int { Int(try await MetricsScrape.value("share_cards_drawn_total", port: adminPort) ?? -1) }
            let user = try await env.user()
            let meal = try await env.meal(user, name: "Kept card", items: [Env.item()])
            let id = try #require(meal["id"] as? String)
            let token = try await env.shareToken(of: id, as: user)
            #expect(try await drawn() == 0, "nothing is drawn before it is asked for")

            let first = try await env.call(.get, "/v1/shared/\(token)/card.png")
            #expect(first.status == .ok && first.headers[.contentType] == "image/png")
            let png = Array(first.body.readableBytesView)
            let etag = try #require(first.headers[.eTag])
            // A strong tag: the bytes' SHA-256 in hex, quoted.
            #expect(etag.count == 66 && etag.hasPrefix("\"") && etag.hasSuffix("\"") && etag.dropFirst().dropLast().allSatisfy(\.isHexDigit), "\(etag)")
            let cacheControl = try #require(first.headers[.cacheControl])
            #expect(cacheControl.contains("public") && cacheControl.contains("max-age=3600") && !cacheControl.contains("no-cache"), "\(cacheControl)")
            let second = try await env.call(.get, "/v1/shared/\(token)/card.png")
            #expect(second.status == .ok && Array(second.body.readableBytesView) == png && second.headers[.eTag] == etag)
            #expect(try await drawn() == 1, "two reads, one drawing")

            for header in [etag, "\"other\", \(etag)", "W/\(etag)", "*"] {
                let again = try await env.call(.get, "/v1/shared/\(token)/card.png", headers: [.ifNoneMatch: header])
                #expect(again.status == .notModified && again.body.readableBytes == 0, "\(header)")
                #expect(again.headers[.eTag] == etag && again.headers[.cacheControl] == cacheControl)
            }
            #expect(try await env.call(.get, "/v1/shared/\(token)/card.png", headers: [.ifNoneMatch: "\"other\""]).status == .ok)
            #expect(try await drawn() == 1)

            // Revoked: 410, with or without the tag, and the kept card is let go.
            #expect(try await env.call(.delete, "/v1/meals/\(id)/share", as: user).status == .noContent)
            #expect(try await env.call(.get, "/v1/shared/\(token)/card.png").status == .gone)
            let revalidated = try await env.call(.get, "/v1/shared/\(token)/card.png", headers: [.ifNoneMatch: etag])
            #expect(revalidated.status == .gone && revalidated.code == "share_gone")
            #expect(try await env.count("SELECT count(*) FROM shares WHERE card_png IS NOT NULL") == 0)
            #expect(try await drawn() == 1)
        }
    }
}
