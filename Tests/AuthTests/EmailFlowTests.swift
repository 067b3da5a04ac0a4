@testable import Auth
import Foundation
import HTTPTypes
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing
import TestSupport

/// Mail really leaves over SMTP to a local sink; the tests follow the links in it.
@Suite struct EmailFlowTests {
    @Test func signupMailVerifiesTheAddressOnceAndTheNextTokenSaysSo() async throws {
        try await AuthTestEnvironment.run { env in
            // Whoever signs up chooses the name, and may not own the address: the mail does not echo it.
            let account = try await env.signUp(name: "Win a prize at evil.example")
            let mail = try #require(try await env.mails(to: account.email).first)
            #expect(mail.contains("Subject: Confirm your email for Test Kitchen"))
            #expect(mail.contains("https://app.test/verify-email?token="))
            #expect(mail.contains("Content-Type: text/html"))
            #expect(mail.contains("Hello,") && !mail.contains("evil.example") && !mail.contains("prize"))
            // Nor does a reset's, asked for by anyone who knows the address, while it is unproven.
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": account.email]).status == .accepted)
            let reset = try #require(try await env.mails(to: account.email, count: 2).first { $0.contains("Subject: Reset your") })
            #expect(reset.contains("Hello,") && !reset.contains("evil.example") && !reset.contains("prize"))
            let token = try AuthTestEnvironment.linkToken(in: mail)

            let verified = try await env.call(.post, "/v1/auth/email/verify", json: ["token": token], token: account.accessToken)
            #expect(verified.status == .ok)
            #expect(verified.json["email_verified"] as? Bool == true)
            #expect(verified.json["password_token"] as? String == nil)
            let again = try await env.call(.post, "/v1/auth/email/verify", json: ["token": token], token: account.accessToken)
            #expect(again.status == .badRequest)
            #expect(again.code == "token_used")
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": "made-up-token-value-aaaaaaaa"]).code == "invalid_token")

            // The access token carries the new state after a refresh.
            let refreshed = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken])
            let access = try #require(refreshed.json["access_token"] as? String)
            let claims = try SignupLoginTests.segment(String(access.split(separator: ".")[1]))
            #expect(claims["email_verified"] as? Bool == true)
            #expect(try await env.call(.get, "/v1/auth/me", token: access).json["email_verified"] as? Bool == true)
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: account.id).contains("user.email_verified") }

            // Already verified: nothing to resend.
            #expect(try await env.call(.post, "/v1/auth/email/verify/resend", token: access).code == "already_verified")
        }
    }

    @Test func resendIsForSignedInUsersAndThrottled() async throws {
        try await AuthTestEnvironment.run(["EMAIL_VERIFY_RESEND_PER_HOUR": "2"]) { env in
            let account = try await env.signUp()
            #expect(try await env.call(.post, "/v1/auth/email/verify/resend").status == .unauthorized)
            #expect(try await env.call(.post, "/v1/auth/email/verify/resend", token: account.accessToken).status == .accepted)
            #expect(try await env.call(.post, "/v1/auth/email/verify/resend", token: account.accessToken).status == .accepted)
            let limited = try await env.call(.post, "/v1/auth/email/verify/resend", token: account.accessToken)
            #expect(limited.status == .tooManyRequests)
            #expect(limited.headers[.retryAfter] != nil)
            let mails = try await env.mails(to: account.email, count: 3)
            #expect(mails.count == 3)
            // The newest link works.
            let newest = try AuthTestEnvironment.linkToken(in: mails.last!)
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": newest], token: account.accessToken).status == .ok)
        }
    }

    /// A verification link lives 24 h and a reset link 1 h; past that each is `token_expired` and
    /// changes nothing. (Time is moved by moving the token's own timestamps back.)
    @Test func mailLinksExpireAfterTheirLifetime() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let verify = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: account.email).first))
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": account.email]).status == .accepted)
            let resetMail = try #require(try await env.mails(to: account.email, count: 2).first { $0.contains("Subject: Reset your") })
            let reset = try AuthTestEnvironment.linkToken(in: resetMail)

            let userID = try #require(UUID(uuidString: account.id))
            let lifetimes = try await env.query { client -> [String: Double] in
                let rows = try await client.query(
                    """
                    SELECT purpose, extract(epoch FROM expires_at - created_at)::float8 FROM email_tokens WHERE user_id = \(userID)
                    """, logger: TestEnvironment.logger)
                var lifetimes: [String: Double] = [:]
                for try await (purpose, seconds) in rows.decode((String, Double).self) { lifetimes[purpose] = seconds }
                return lifetimes
            }
            #expect(lifetimes == ["verify_email": 86_400, "reset_password": 3_600])

            // Each link a minute past its lifetime.
            try await env.query { client in
                for try await _ in try await client.query(
                    """
                    UPDATE email_tokens SET created_at = created_at - (expires_at - created_at) - interval '1 minute',
                                            expires_at = expires_at - (expires_at - created_at) - interval '1 minute'
                    WHERE user_id = \(userID)
                    """, logger: TestEnvironment.logger)
                {}
            }
            let lateVerify = try await env.call(.post, "/v1/auth/email/verify", json: ["token": verify], token: account.accessToken)
            #expect(lateVerify.status == .badRequest && lateVerify.code == "token_expired")
            #expect(try await env.call(.get, "/v1/auth/me", token: account.accessToken).json["email_verified"] as? Bool == false)
            let lateReset = try await env.call(.post, "/v1/auth/password/reset", json: ["token": reset, "password": "new pantry secret"])
            #expect(lateReset.status == .badRequest && lateReset.code == "token_expired")
            #expect(try await env.logIn(account.email, account.password).status == .ok)
            #expect(try await env.logIn(account.email, "new pantry secret").status == .unauthorized)
        }
    }

    @Test func passwordResetByMailEndsEverySessionAndWorksOnce() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let otherDevice = try AuthTestEnvironment.account(try await env.logIn(account.email, account.password), email: account.email, password: account.password)

            // Unknown addresses get the same response and no mail.
            let unknown = try await env.call(.post, "/v1/auth/password/forgot", json: ["email": "nobody-\(UUID())@example.com"])
            #expect(unknown.status == .accepted)
            let known = try await env.call(.post, "/v1/auth/password/forgot", json: ["email": account.email.uppercased()])
            #expect(known.status == .accepted)
            #expect(known.text == unknown.text)
            let mails = try await env.mails(to: account.email, count: 2)
            let reset = try #require(mails.first { $0.contains("Subject: Reset your Test Kitchen password") })
            #expect(reset.contains("https://app.test/reset-password?token="))
            let token = try AuthTestEnvironment.linkToken(in: reset)

            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": token, "password": "short"]).code == "weak_password")
            let done = try await env.call(.post, "/v1/auth/password/reset", json: ["token": token, "password": "new pantry secret"])
            #expect(done.status == .noContent)
            let twice = try await env.call(.post, "/v1/auth/password/reset", json: ["token": token, "password": "another pantry secret"])
            #expect(twice.status == .badRequest)
            #expect(twice.code == "token_used")

            // Every session ended: refresh tokens are refused, access tokens too at auth.
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken]).status == .unauthorized)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": otherDevice.refreshToken]).status == .unauthorized)
            #expect(try await env.call(.get, "/v1/auth/me", token: account.accessToken).code == "session_revoked")
            #expect(try await env.logIn(account.email, account.password).code == "invalid_credentials")
            let fresh = try await env.logIn(account.email, "new pantry secret")
            #expect(fresh.status == .ok)
            // The link came to the address, so the address is proven.
            #expect(fresh.json[path: "user.email_verified"] as? Bool == true)
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: account.id).contains("user.password_changed") }
        }
    }

    @Test func changingThePasswordNeedsTheCurrentOneAndEndsOtherSessions() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let other = try AuthTestEnvironment.account(try await env.logIn(account.email, account.password), email: account.email, password: account.password)
            let wrong = try await env.call(.post, "/v1/auth/password/change", json: ["current_password": "nope nope nope", "password": "brand new secret"], token: account.accessToken)
            #expect(wrong.status == .forbidden)
            #expect(wrong.code == "invalid_credentials")
            #expect(try await env.call(.post, "/v1/auth/password/change", json: ["current_password": account.password, "password": "12345678"], token: account.accessToken).code == "weak_password")
            #expect(try await env.call(.post, "/v1/auth/password/change", json: ["current_password": account.password, "password": "brand new secret"]).status == .unauthorized)
            let changed = try await env.call(.post, "/v1/auth/password/change", json: ["current_password": account.password, "password": "brand new secret"], token: account.accessToken)
            #expect(changed.status == .noContent)
            #expect(try await env.call(.get, "/v1/auth/me", token: account.accessToken).status == .ok)
            #expect(try await env.call(.get, "/v1/auth/me", token: other.accessToken).code == "session_revoked")
            #expect(try await env.logIn(account.email, "brand new secret").status == .ok)
            let notice = try await env.mails(to: account.email, count: 2)
            #expect(notice.contains { $0.contains("password was changed") })
        }
    }
}
