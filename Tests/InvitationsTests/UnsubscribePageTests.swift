import Foundation
import HTTPTypes
import Testing
import TestSupport

/// The page an invitation mail's unsubscribe link opens: a page like the others, with their headers.
@Suite struct UnsubscribePageTests {
    typealias Env = InvitationsTestEnvironment

    /// No site can frame its button (`frame-ancestors 'none'`), the token does not leave with a
    /// click (`Referrer-Policy: no-referrer`), and opening it unsubscribes nothing.
    @Test func theUnsubscribePageHasThePagesHeaders() async throws {
        try await Env.run { env in
            let coach = try await env.coach()
            let email = "\(TestEnvironment.uniqueName("di"))@example.com"
            _ = try await env.invite("Di", email: email, by: coach)
            let mail = try #require(try await env.mails(to: email).first)
            let link = try #require(mail.firstMatch(of: try Regex("List-Unsubscribe: <https://api.test(/v1/invitations/unsubscribe\\?token=[A-Za-z0-9_-]+)>")))
            let path = String(try #require(link.output[1].substring))
            let page = try await env.page(path)
            #expect(page.status == .ok, "\(page.text)")
            #expect(page.pageHeaderProblems.isEmpty, "\(page.pageHeaderProblems)")
            #expect(page.headers[HTTPField.Name("Content-Security-Policy")!]?.contains("frame-ancestors 'none'") == true)
            #expect(page.headers[HTTPField.Name("Referrer-Policy")!] == "no-referrer")
            #expect(page.text.contains("<form method=\"post\" action=\"/v1/invitations/unsubscribe?token="), "\(page.text)")
            #expect(try await env.count("SELECT count(*) FROM unsubscribed_addresses") == 0)
        }
    }
}
