import Foundation
import HTTPTypes
@testable import Invitations
import Models
import ServiceKit
import ServiceKitCore
import ServiceKitHTTP
import Testing
import TestSupport

/// The page the invitation mail's "Get started" link opens: who invites, the app's custom-scheme link,
/// the App Store, the Smart App Banner; friendly 404 and 410 pages; never anything used up.
@Suite struct InvitePageTests {
    typealias Env = InvitationsTestEnvironment

    @Test func thePageNamesTheCoachAndOpensTheAppWithoutUsingTheCode() async throws {
        try await Env.run(["APP_STORE_ID": "987654321"]) { env in
            let coach = try await env.coach("Sam <Strong>")
            let email = "\(TestEnvironment.uniqueName("ana"))@example.com"
            let (_, code) = try await env.invite("Ana Lima", email: email, by: coach)
            // A mail scanner, then the person: the same page, nothing used up.
            for _ in 0..<2 {
                let page = try await env.page("/invite?code=\(code)")
                #expect(page.status == .ok, "\(page.text)")
                #expect(page.pageHeaderProblems.isEmpty, "\(page.pageHeaderProblems)")
                #expect(page.text.contains("invited by Sam &lt;Strong&gt;") && !page.text.contains("<Strong>"), "the coach's name is escaped")
                #expect(page.text.contains("Hello Ana Lima,"))
                #expect(page.text.contains("href=\"pfa://invite?code=\(code)\""))
                #expect(page.text.contains("href=\"https://apps.apple.com/app/id123\""))
                #expect(page.text.contains("<meta name=\"apple-itunes-app\" content=\"app-id=987654321, app-argument=https://app.test/invite?code=\(code)\">"))
                #expect(!page.text.contains("<script"))
            }
            #expect(try await env.call(.get, "/v1/invitations/\(code)").json["status"] as? String == "pending")

            // Accepted: the link is used, and the page says so with 410.
            let ana = try await env.user("Ana", email: email)
            let auth = env.actAsAuth(granting: ana)
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: ana).status == .ok)
            try await auth.value
            let used = try await env.page("/invite?code=\(code)")
            #expect(used.status == .gone && used.text.contains("already used") && !used.text.contains("pfa://"))
            #expect(used.pageHeaderProblems.isEmpty)
        }
    }

    @Test func withoutAnAppStoreIDThereIsNoBannerAndAnUnknownCoachIsYourCoach() async throws {
        try await Env.run { env in
            let coach = try await env.coach()
            let (_, code) = try await env.invite("Bo", email: "\(TestEnvironment.uniqueName("bo"))@example.com", by: coach)
            try await env.execute("DELETE FROM accounts WHERE user_id = '\(coach.id)'")
            let page = try await env.page("/invite?code=\(code)")
            #expect(page.status == .ok && page.text.contains("invited by your coach"), "\(page.text)")
            #expect(!page.text.contains("apple-itunes-app"))
        }
    }

    @Test func revokedExpiredAndUnknownCodesGetAFriendlyPage() async throws {
        try await Env.run { env in
            let coach = try await env.coach()
            let (created, code) = try await env.invite("Cy", email: "\(TestEnvironment.uniqueName("cy"))@example.com", by: coach)
            let id = try #require(created.json["id"] as? String)

            try await env.execute("UPDATE clients SET expires_at = now() - interval '1 minute' WHERE id = '\(id)'")
            let expired = try await env.page("/invite?code=\(code)")
            #expect(expired.status == .gone && expired.text.contains("expired") && !expired.text.contains("pfa://"))
            #expect(expired.pageHeaderProblems.isEmpty)

            #expect(try await env.call(.post, "/v1/clients/\(id)/invitation/revoke", as: coach).status == .ok)
            let revoked = try await env.page("/invite?code=\(code)")
            #expect(revoked.status == .gone && revoked.text.contains("no longer works") && !revoked.text.contains("invited by"))
            #expect(revoked.pageHeaderProblems.isEmpty)

            for path in ["/invite?code=not-a-code-at-all-000000000", "/invite", "/invite?code=", "/invite?code=\(String(repeating: "x", count: 600))"] {
                let unknown = try await env.call(.get, path)
                #expect(unknown.status == .notFound && unknown.text.contains("not valid"), "\(path)")
                #expect(unknown.pageHeaderProblems.isEmpty, "\(path)")
            }
        }
    }

    /// The page looks codes up as the preview does, under the same limit per client address.
    @Test func lookUpsThroughThePageAreLimitedWithThePreviews() async throws {
        try await Env.run(["INVITATION_PREVIEWS_PER_MINUTE": "2"]) { env in
            let from = Env.someAddress()
            #expect(try await env.page("/invite?code=guess-one-000000000000000", from: from).status == .notFound)
            #expect(try await env.call(.get, "/v1/invitations/guess-two-000000000000000", headers: [.forwardedFor: from]).status == .notFound)
            let limited = try await env.page("/invite?code=guess-three-00000000000000", from: from)
            #expect(limited.status == .tooManyRequests && limited.headers[.retryAfter] != nil)
            #expect(limited.pageHeaderProblems.isEmpty)
        }
    }
}

extension InvitationsTestEnvironment {
    /// Opens a page from an address of its own (as the gateway forwards it): the look-up limit counts
    /// per client address in the Redis every test shares.
    func page(_ path: String, from address: String = InvitationsTestEnvironment.someAddress()) async throws -> APIReply {
        try await call(.get, path, headers: [.forwardedFor: address])
    }

    /// A documentation address (2001:db8::/32) in a /64 of its own.
    static func someAddress() -> String {
        "2001:db8:\(String(UInt16.random(in: 1...UInt16.max), radix: 16)):\(String(UInt16.random(in: 1...UInt16.max), radix: 16))::1"
    }
}
