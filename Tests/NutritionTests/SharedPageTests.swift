import Foundation
import HTTPTypes
@testable import Nutrition
import ServiceKit
import ServiceKitHTTP
import Testing
import TestSupport

/// The page a share link opens: the snapshot `GET /v1/shared/{token}` serves, with the OpenGraph and
/// Twitter tags a link preview reads; 410 once the link ends, 404 for a link never made.
@Suite struct SharedPageTests {
    typealias Env = NutritionTestEnvironment

    @Test func theShareLinkOpensAPageWithItsCardForLinkPreviews() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let meal = try await env.meal(
                user, name: "Salmon & <avocado> bowl",
                items: [
                    Env.item("Salmon", grams: 150, calories: 310, protein: 31, carbs: 0, fat: 20),
                    Env.item("Avocado", grams: 100, calories: 160, protein: 2, carbs: 9, fat: 15, tags: ["vegetable"]),
                ])
            let id = try #require(meal["id"] as? String)
            let score = try #require(meal["diet_score"] as? Int)
            let share = try await env.call(.post, "/v1/meals/\(id)/share", as: user)
            let token = try #require(share.json["token"] as? String)
            #expect(share.json["url"] as? String == "https://api.test/shared/\(token)", "the link is the page")

            let page = try await env.call(.get, "/shared/\(token)")
            #expect(page.status == .ok, "\(page.text)")
            #expect(page.pageHeaderProblems.isEmpty, "\(page.pageHeaderProblems)")
            let html = page.text
            let name = "Salmon &amp; &lt;avocado&gt; bowl"
            #expect(html.contains("<h1>\(name)</h1>") && !html.contains("<avocado>"), "the name is escaped")
            let card = "https://api.test/v1/shared/\(token)/card.png"
            for tag in [
                "<meta property=\"og:title\" content=\"\(name)\">",
                "<meta property=\"og:type\" content=\"website\">",
                "<meta property=\"og:url\" content=\"https://api.test/shared/\(token)\">",
                "<meta property=\"og:image\" content=\"\(card)\">",
                "<meta property=\"og:image:width\" content=\"1200\">",
                "<meta property=\"og:image:height\" content=\"630\">",
                "<meta name=\"twitter:card\" content=\"summary_large_image\">",
                "<meta name=\"twitter:image\" content=\"\(card)\">",
            ] {
                #expect(html.contains(tag), "\(tag)")
            }
            #expect(html.contains("<meta property=\"og:description\" content=\"470 kcal · 33 g protein · 9 g carbs · 35 g fat · diet score \(score)\">"))
            #expect(html.contains("<dd>470 kcal</dd>") && html.contains("<dd>\(score) / 100 ("))
            #expect(html.contains("1 June 2025") && html.contains("Shared from Test Tracker"))
            // The page shows the card from its own origin (the CSP's img-src 'self'), and it is there.
            #expect(html.contains("<img src=\"/v1/shared/\(token)/card.png\""))
            let png = try await env.call(.get, "/v1/shared/\(token)/card.png")
            #expect(png.status == .ok && png.headers[.contentType] == "image/png")
            #expect(!html.contains(user.path) && !html.contains("<script"))
            // The page counts a view, as the API's read does.
            #expect(try await env.call(.get, "/v1/meals/\(id)", as: user).json["view_count"] as? Int == 1)

            #expect(try await env.call(.delete, "/v1/meals/\(id)/share", as: user).status == .noContent)
            let gone = try await env.call(.get, "/shared/\(token)")
            #expect(gone.status == .gone && gone.text.contains("gone") && !gone.text.contains("og:image") && !gone.text.contains("avocado"))
            #expect(gone.pageHeaderProblems.isEmpty, "\(gone.pageHeaderProblems)")
            for unknown in ["/shared/not-a-token", "/shared/\(String(repeating: "y", count: 200))"] {
                let reply = try await env.call(.get, unknown)
                #expect(reply.status == .notFound && reply.text.contains("not valid"), "\(unknown)")
                #expect(reply.pageHeaderProblems.isEmpty, "\(unknown)")
            }
        }
    }

    /// A share link's token is the key to the meal: request log lines name it `[redacted]`.
    @Test func shareTokensAreRedactedInTheLog() {
        #expect(RequestLog.redacted("/shared/SECRETtoken123") == "/shared/[redacted]")
        #expect(RequestLog.redacted("/v1/shared/SECRETtoken123") == "/v1/shared/[redacted]")
        #expect(RequestLog.redacted("/v1/shared/SECRETtoken123/card.png") == "/v1/shared/[redacted]/card.png")
        #expect(RequestLog.redacted("/v1/meals/abc/share") == "/v1/meals/abc/share")
        // However the path is spelled for the routers, which skip empty segments and read escapes.
        #expect(RequestLog.redacted("/v1/shared//SECRETtoken123") == "/v1/shared//[redacted]")
        #expect(RequestLog.redacted("//v1//shared/SECRETtoken123/") == "//v1//shared/[redacted]/")
        #expect(RequestLog.redacted("//shared/SECRETtoken123?x=1") == "//shared/[redacted]?x=1")
        #expect(RequestLog.redacted("/v1/%73hared/SECRETtoken123") == "/v1/%73hared/[redacted]")
        #expect(RequestLog.redacted("/v1/invitations//mine") == "/v1/invitations//mine")
        #expect(RequestLog.redacted("/v1//invitations/SECRETcode/accept") == "/v1//invitations/[redacted]/accept")
        #expect(RequestLog.redacted("/v1/shared/") == "/v1/shared/")
    }

    /// The service's router skips an empty segment: `/v1/shared//<token>` is the share itself,
    /// which is why the log's redaction reads paths the same way.
    @Test func aShareIsReachedThroughAnEmptySegment() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let token = try await env.shareToken(of: id, as: user)
            #expect(try await env.call(.get, "/v1/shared//\(token)").status == .ok)
        }
    }

    @Test func anExpiredLinksPageIsGone() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let token = try await env.shareToken(of: id, as: user)
            #expect(try await env.call(.get, "/shared/\(token)").status == .ok)
            try await env.execute("UPDATE shares SET expires_at = now() - interval '1 second' WHERE meal_id = '\(id)'")
            let expired = try await env.call(.get, "/shared/\(token)")
            #expect(expired.status == .gone && expired.pageHeaderProblems.isEmpty)
        }
    }
}
