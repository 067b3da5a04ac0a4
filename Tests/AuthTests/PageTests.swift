@testable import Auth
import Foundation
import HTTPTypes
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitHTTP
import Testing
import TestSupport

/// The pages the mails' links open: `/verify-email` and `/reset-password`. Opening a link changes
/// nothing; the forms do what the API does, with its rules and its problems shown in the page.
@Suite struct PageTests {
    typealias Env = AuthTestEnvironment

    @Test func openingTheVerificationLinkConfirmsNothingAndThePasswordDoes() async throws {
        try await Env.run { env in
            let account = try await env.signUp()
            let token = try Env.linkToken(in: try #require(try await env.mails(to: account.email).first))
            let page = try await env.call(.get, "/verify-email?token=\(token)")
            #expect(page.status == .ok, "\(page.text)")
            #expect(page.pageHeaderProblems.isEmpty, "\(page.pageHeaderProblems)")
            #expect(page.text.contains("name=\"password\"") && page.text.contains("name=\"disown\" value=\"1\""))
            #expect(page.text.contains("name=\"token\" value=\"\(token)\"") && page.text.contains("action=\"/verify-email\""))
            // A mail scanner opens the link, twice: nothing is confirmed.
            _ = try await env.call(.get, "/verify-email?token=\(token)")
            #expect(try await env.verified(account) == false)

            let wrong = try await env.postForm("/verify-email", ["token": token, "password": "not the password at all"])
            #expect(wrong.status == .unauthorized)
            #expect(wrong.text.contains("The password is wrong.") && wrong.text.contains("name=\"password\""))
            #expect(!wrong.text.contains("not the password at all"), "a password is never written back")
            #expect(wrong.pageHeaderProblems.isEmpty, "\(wrong.pageHeaderProblems)")
            #expect(try await env.verified(account) == false)
            let empty = try await env.postForm("/verify-email", ["token": token, "password": ""])
            #expect(empty.status == .unauthorized && empty.text.contains("Enter the password"))
            #expect(try await env.verified(account) == false)

            let done = try await env.postForm("/verify-email", ["token": token, "password": account.password])
            #expect(done.status == .ok && done.text.contains("Your address is confirmed"), "\(done.text)")
            #expect(done.pageHeaderProblems.isEmpty)
            #expect(try await env.verified(account) == true)
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: account.id).contains("user.email_verified") }

            // The link is spent: it says so, kindly, and asks for nothing.
            let again = try await env.call(.get, "/verify-email?token=\(token)")
            #expect(again.status == .gone && again.text.contains("already used") && !again.text.contains("name=\"password\""))
            #expect(again.pageHeaderProblems.isEmpty)
            #expect(try await env.postForm("/verify-email", ["token": token, "password": account.password]).status == .gone)
        }
    }

    /// The page counts wrong passwords as the API does (`LOGIN_MAX_FAILURES_PER_ACCOUNT`), and then
    /// refuses even the right one from that address for a while.
    @Test func wrongPasswordsInThePageAreThrottledAsInTheAPI() async throws {
        try await Env.run(["LOGIN_MAX_FAILURES_PER_ACCOUNT": "2"]) { env in
            let account = try await env.signUp()
            let token = try Env.linkToken(in: try #require(try await env.mails(to: account.email).first))
            let guesser = Env.someAddress()
            for _ in 0..<2 {
                #expect(try await env.postForm("/verify-email", ["token": token, "password": "a wrong guess here"], from: guesser).status == .unauthorized)
            }
            let limited = try await env.postForm("/verify-email", ["token": token, "password": account.password], from: guesser)
            #expect(limited.status == .tooManyRequests && limited.headers[.retryAfter] != nil)
            #expect(limited.text.contains("Too many failed attempts") && limited.text.contains("name=\"password\""))
            #expect(limited.pageHeaderProblems.isEmpty)
            // The API counted the page's failures: the same response there.
            let api = try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "password": account.password], headers: .from(guesser))
            #expect(api.status == .tooManyRequests && api.code == "too_many_attempts")
            #expect(try await env.verified(account) == false)
        }
    }

    @Test func disowningInThePageHandsTheAccountToTheMailboxAndAsksForAPassword() async throws {
        try await Env.run { env in
            let maker = try await env.signUp(name: "Not the owner")
            let token = try Env.linkToken(in: try #require(try await env.mails(to: maker.email).first))
            let disowned = try await env.postForm("/verify-email", ["token": token, "disown": "1"])
            #expect(disowned.status == .ok, "\(disowned.text)")
            #expect(disowned.text.contains("This account is now yours") && disowned.text.contains("action=\"/reset-password\""))
            #expect(disowned.text.contains("name=\"password_confirmation\""))
            #expect(disowned.pageHeaderProblems.isEmpty)
            let match = try #require(disowned.text.firstMatch(of: try Regex("name=\"token\" value=\"([A-Za-z0-9_-]{20,})\"")))
            let passwordToken = String(try #require(match.output[1].substring))
            #expect(passwordToken != token)
            // The maker is out: session ended, password gone.
            #expect(try await env.call(.get, "/v1/auth/me", token: maker.accessToken).code == "session_revoked")
            #expect(try await env.logIn(maker.email, maker.password, headers: .from(Env.someAddress())).status == .unauthorized)

            let set = try await env.postForm("/reset-password", ["token": passwordToken, "password": "the owner's own secret", "password_confirmation": "the owner's own secret"])
            #expect(set.status == .ok && set.text.contains("Your password is changed"), "\(set.text)")
            let owner = try await env.logIn(maker.email, "the owner's own secret")
            #expect(owner.status == .ok)
            #expect(owner.json[path: "user.email_verified"] as? Bool == true)
            #expect(owner.json[path: "user.display_name"] is NSNull || owner.json[path: "user.display_name"] == nil)

            // Disowning and a password together is not a form the page sends.
            let other = try await env.signUp()
            let otherToken = try Env.linkToken(in: try #require(try await env.mails(to: other.email).first))
            let both = try await env.postForm("/verify-email", ["token": otherToken, "disown": "1", "password": other.password])
            #expect(both.status == .badRequest && both.pageHeaderProblems.isEmpty)
            #expect(try await env.postForm("/verify-email", ["token": otherToken, "disown": "yes"]).status == .badRequest)
            #expect(try await env.verified(other) == false)
        }
    }

    @Test func theResetPageSetsThePasswordWithTheAPIsRules() async throws {
        try await Env.run { env in
            let account = try await env.signUp()
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": account.email]).status == .accepted)
            let mail = try #require(try await env.mails(to: account.email, count: 2).first { $0.contains("Subject: Reset your") })
            let token = try Env.linkToken(in: mail)
            let page = try await env.call(.get, "/reset-password?token=\(token)")
            #expect(page.status == .ok && page.text.contains("name=\"password_confirmation\"") && page.text.contains("action=\"/reset-password\""))
            #expect(page.pageHeaderProblems.isEmpty, "\(page.pageHeaderProblems)")

            let mismatch = try await env.postForm("/reset-password", ["token": token, "password": "a new pantry secret", "password_confirmation": "another pantry secret"])
            #expect(mismatch.status == .badRequest && mismatch.text.contains("not the same") && mismatch.text.contains("name=\"password\""))
            #expect(!mismatch.text.contains("pantry secret"), "a password is never written back")
            let short = try await env.postForm("/reset-password", ["token": token, "password": "short", "password_confirmation": "short"])
            #expect(short.status == .badRequest && short.text.contains("Use at least 8 characters."))
            let common = try await env.postForm("/reset-password", ["token": token, "password": "password", "password_confirmation": "password"])
            #expect(common.status == .badRequest && common.text.contains("most common passwords"))
            #expect(common.pageHeaderProblems.isEmpty)
            // Nothing changed yet.
            #expect(try await env.logIn(account.email, account.password).status == .ok)

            let done = try await env.postForm("/reset-password", ["token": token, "password": "a new pantry secret", "password_confirmation": "a new pantry secret"])
            #expect(done.status == .ok && done.text.contains("Your password is changed") && !done.text.contains("password_confirmation"))
            #expect(done.pageHeaderProblems.isEmpty)
            #expect(try await env.logIn(account.email, "a new pantry secret").status == .ok)
            #expect(try await env.logIn(account.email, account.password, headers: .from(Env.someAddress())).status == .unauthorized)
            // Every session ended, as with the API.
            #expect(try await env.call(.get, "/v1/auth/me", token: account.accessToken).code == "session_revoked")

            let spent = try await env.call(.get, "/reset-password?token=\(token)")
            #expect(spent.status == .gone && spent.text.contains("already used") && !spent.text.contains("name=\"password\""))
            let twice = try await env.postForm("/reset-password", ["token": token, "password": "a third pantry secret", "password_confirmation": "a third pantry secret"])
            #expect(twice.status == .gone)
            #expect(try await env.logIn(account.email, "a third pantry secret", headers: .from(Env.someAddress())).status == .unauthorized)
        }
    }

    @Test func unknownAndExpiredLinksGetAFriendlyPage() async throws {
        try await Env.run { env in
            for path in ["/verify-email?token=made-up-token-value-aaaaaaaa", "/verify-email", "/reset-password?token=made-up-token-value-aaaaaaaa", "/reset-password?token="] {
                let reply = try await env.call(.get, path)
                #expect(reply.status == .notFound && reply.text.contains("This link is not valid"), "\(path): \(reply.status)")
                #expect(reply.pageHeaderProblems.isEmpty, "\(path): \(reply.pageHeaderProblems)")
            }
            #expect(try await env.postForm("/verify-email", ["token": "made-up-token-value-aaaaaaaa", "password": "whatever it is"]).status == .notFound)
            let reset = try await env.postForm("/reset-password", ["token": "made-up", "password": "a new pantry secret", "password_confirmation": "a new pantry secret"])
            #expect(reset.status == .notFound && reset.text.contains("This link is not valid"))

            // A link past its lifetime: 410, and the right password changes nothing.
            let account = try await env.signUp()
            let token = try Env.linkToken(in: try #require(try await env.mails(to: account.email).first))
            let userID = try #require(UUID(uuidString: account.id))
            try await env.query { client in
                for try await _ in try await client.query(
                    "UPDATE email_tokens SET expires_at = now() - interval '1 minute' WHERE user_id = \(userID)", logger: TestEnvironment.logger)
                {}
            }
            let expired = try await env.call(.get, "/verify-email?token=\(token)")
            #expect(expired.status == .gone && expired.text.contains("expired") && !expired.text.contains("name=\"password\""))
            #expect(expired.pageHeaderProblems.isEmpty)
            #expect(try await env.postForm("/verify-email", ["token": token, "password": account.password]).status == .gone)
            #expect(try await env.verified(account) == false)
        }
    }

    @Test func aBodyThePagesFormsDoNotSendIsRefusedWithAPage() async throws {
        try await Env.run { env in
            let json = try await env.call(.post, "/verify-email", json: ["token": "abc", "password": "whatever it is"])
            #expect(json.status == .unsupportedMediaType && json.pageHeaderProblems.isEmpty)
            let unknown = try await env.postForm("/reset-password", ["token": "abc", "password": "x", "password_confirmation": "x", "admin": "1"])
            #expect(unknown.status == .badRequest && unknown.text.contains("admin"))
            let twice = try await env.postForm("/verify-email", ["token": "abc", "token": "def"])
            #expect(twice.status == .badRequest)
            let large = try await env.postForm("/verify-email", ["token": String(repeating: "a", count: 17 * 1024)])
            #expect(large.status == .contentTooLarge && large.pageHeaderProblems.isEmpty)
            // A GET-only question: the pages answer 405 to other methods, as every route does.
            #expect(try await env.call(.delete, "/verify-email").status == .methodNotAllowed)
        }
    }
}

extension AuthTestEnvironment {
    /// Posts a page's form as a browser does, from an address of its own by default: wrong passwords
    /// count per client address in the Redis every test shares.
    func postForm(_ path: String, _ fields: KeyValuePairs<String, String>, from address: String = AuthTestEnvironment.someAddress()) async throws -> Reply {
        var headers = HTTPFields.from(address)
        headers[.contentType] = FormEncoding.contentType
        return try await call(.post, path, raw: FormEncoding.encode(fields), headers: headers)
    }

    static func someAddress() -> String {
        "10.\(Int.random(in: 0...255)).\(Int.random(in: 0...255)).\(Int.random(in: 1...254))"
    }

    /// Whether the account's address is verified, as it sees it.
    func verified(_ account: Account) async throws -> Bool? {
        try await call(.get, "/v1/auth/me", token: account.accessToken).json["email_verified"] as? Bool
    }
}
