@testable import Auth
import Crypto
import Foundation
import HTTPTypes
import ServiceKit
import TestSupport
import Testing

/// Apple and Google ID tokens from local issuers with their own RSA keys and JWKS over HTTP.
@Suite struct ProviderSignInTests {
    static func sha256Hex(_ text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    @Test func appleCreatesTheAccountOnceKeepsTheNameAndChecksTheHashedNonce() async throws {
        try await AuthTestEnvironment.run { env in
            let subject = "001234.\(UUID().uuidString.lowercased())"
            let email = "\(TestEnvironment.uniqueName("x"))@privaterelay.appleid.com"
            let nonce = "raw-nonce-\(UUID())"
            let token = try env.apple.idToken(subject: subject, email: email, emailVerified: "true", nonce: Self.sha256Hex(nonce), extra: ["is_private_email": "true"])
            let first = try await env.call(.post, "/v1/auth/apple", json: ["id_token": token, "nonce": nonce, "name": ["given_name": "Ada", "family_name": "Lovelace"]])
            #expect(first.status == .ok, "\(first.text)")
            #expect(first.json["created"] as? Bool == true)
            #expect(first.json[path: "user.display_name"] as? String == "Ada Lovelace")
            #expect(first.json[path: "user.email_verified"] as? Bool == true)
            #expect(first.json[path: "user.providers"] as? [String] == ["apple"])
            #expect(first.json[path: "user.has_password"] as? Bool == false)
            let userID = try #require(first.json[path: "user.id"] as? String)

            // Next time Apple sends no name; the first one is kept.
            let again = try env.apple.idToken(subject: subject, email: email, nonce: Self.sha256Hex("n2"))
            let second = try await env.call(.post, "/v1/auth/apple", json: ["id_token": again, "nonce": "n2"])
            #expect(second.json["created"] as? Bool == false)
            #expect(second.json[path: "user.id"] as? String == userID)
            #expect(second.json[path: "user.display_name"] as? String == "Ada Lovelace")

            // The raw nonce, not its hash, must be what the app sends; and it must match.
            let mismatch = try await env.call(.post, "/v1/auth/apple", json: ["id_token": again, "nonce": "other"])
            #expect(mismatch.status == .unauthorized)
            #expect(mismatch.code == "invalid_id_token")
            #expect(try await env.call(.post, "/v1/auth/apple", json: ["id_token": again]).code == "invalid_id_token")

            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: userID).contains("user.registered") }
            let registered = try await env.eventTypes(for: userID)
            #expect(registered.filter { $0 == "user.registered" }.count == 1)
        }
    }

    /// Each Google sign-in is a `user.signed_in` event; Google's nonce (sent as is, not hashed) must
    /// match; and a disabled account is refused by its identity as by its password.
    @Test func googleSignInsAreEventsCheckTheNonceAndRefuseADisabledAccount() async throws {
        let adminEmail = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": adminEmail]) { env in
            let boss = try await AdminAndDeletionTests.verifiedAccount(env, email: adminEmail)
            let subject = "sub-\(UUID())"
            let email = "\(TestEnvironment.uniqueName("g"))@gmail.com"
            let first = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email, nonce: "n-1"), "nonce": "n-1"])
            #expect(first.status == .ok && first.json["created"] as? Bool == true, "\(first.text)")
            let userID = try #require(first.json[path: "user.id"] as? String)
            let second = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email)])
            #expect(second.status == .ok && second.json["created"] as? Bool == false)
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: userID).filter { $0 == "user.signed_in" }.count == 2 }

            let mismatch = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email, nonce: "n-2"), "nonce": "n-3"])
            #expect(mismatch.status == .unauthorized && mismatch.code == "invalid_id_token")
            let missing = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email, nonce: "n-2")])
            #expect(missing.code == "invalid_id_token")

            #expect(try await env.call(.post, "/v1/admin/users/\(userID)/disable", token: boss.accessToken).status == .ok)
            let refused = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email)])
            #expect(refused.status == .forbidden && refused.code == "account_disabled")
            // Enabling again writes an event after the refused sign-in: once it is on the stream, anything
            // the refusal had written would be too.
            #expect(try await env.call(.post, "/v1/admin/users/\(userID)/enable", token: boss.accessToken).status == .ok)
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: userID).filter { $0 == "user.status_changed" }.count == 2 }
            #expect(try await env.eventTypes(for: userID).filter { $0 == "user.signed_in" }.count == 2)
        }
    }

    @Test func badIDTokensAreRefused() async throws {
        try await AuthTestEnvironment.run { env in
            let subject = "sub-\(UUID())"
            let email = "\(TestEnvironment.uniqueName("g"))@gmail.com"
            let cases: [(String, String)] = [
                ("another app", try env.google.idToken(subject: subject, email: email, audience: "someone-else.apps.googleusercontent.com")),
                ("another issuer", try env.google.idToken(subject: subject, email: email, issuer: "https://accounts.evil.test")),
                ("expired", try env.google.idToken(subject: subject, email: email, expiresIn: -3600)),
                ("unknown key", try env.google.idToken(subject: subject, email: email, signWith: try ProviderIssuer.otherKey(), kid: "not-published")),
                ("forged with a known kid", try env.google.idToken(subject: subject, email: email, signWith: try ProviderIssuer.otherKey())),
                ("Apple's token at Google", try env.apple.idToken(subject: subject, email: email)),
                ("garbage", "a.b.c"),
            ]
            for (why, token) in cases {
                let reply = try await env.call(.post, "/v1/auth/google", json: ["id_token": token])
                #expect(reply.status == .unauthorized, "\(why): \(reply.text)")
                #expect(reply.code == "invalid_id_token", "\(why)")
            }
            // The same claims, correctly signed, pass: each refusal above is for its own reason.
            let good = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email, nonce: "plain-nonce"), "nonce": "plain-nonce"])
            #expect(good.status == .ok, "\(good.text)")
            #expect(good.json["created"] as? Bool == true)
            #expect(try await env.call(.post, "/v1/auth/google", json: ["nonce": "x"]).status == .badRequest)
        }
    }

    @Test func anAddressTheProviderHasNotVerifiedIsVerifiedByMail() async throws {
        try await AuthTestEnvironment.run { env in
            let email = "\(TestEnvironment.uniqueName("u"))@example.com"
            let reply = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: "g-\(UUID())", email: email, emailVerified: false,
                                                                                                              extra: ["name": "Name\u{7}With Bell"])])
            #expect(reply.status == .ok, "\(reply.text)")
            #expect(reply.json[path: "user.email_verified"] as? Bool == false)
            #expect(reply.json[path: "user.display_name"] as? String == "NameWith Bell")
            let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: email).first))
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token]).status == .ok)
        }
    }

    /// Someone signs in with Google under another person's address, which Google has not verified.
    /// The owner cannot sign up (the address is taken) and resets the password by mail: that proves
    /// the address, and the Google sign-in made without that proof stops reaching the account,
    /// also when the owner first followed the verification link the claim sent them.
    @Test(arguments: [false, true])
    func anAccountClaimedUnderAnUnprovenAddressGoesBackToItsOwnerOnReset(ownerVerifiedFirst: Bool) async throws {
        try await AuthTestEnvironment.run { env in
            let email = "\(TestEnvironment.uniqueName("owner"))@example.com"
            let subject = "g-\(UUID())"
            let claim = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email, emailVerified: false)])
            #expect(claim.status == .ok && claim.json[path: "user.email_verified"] as? Bool == false)
            if ownerVerifiedFirst {
                let verify = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: email).first))
                #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": verify]).status == .ok)
            }
            #expect(try await env.call(.post, "/v1/auth/signup", json: ["email": email, "password": "the owner's password"]).code == "email_taken")
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": email]).status == .accepted)
            let resetMail = try #require(try await env.mails(to: email, count: 2).first { $0.contains("Subject: Reset your") })
            let reset = try AuthTestEnvironment.linkToken(in: resetMail)
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": reset, "password": "the owner's password"]).status == .noContent)
            // The claimant's sign-in no longer reaches the account (and the reset ended its session):
            // with an unverified address it cannot be linked again, so it is refused.
            let again = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email, emailVerified: false)])
            #expect(again.code == "account_exists", "\(again.text)")
            let claimedSession = try #require(claim.json[path: "session.refresh_token"] as? String)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": claimedSession]).status == .unauthorized)
            let owner = try await env.logIn(email, "the owner's password")
            #expect(owner.status == .ok && owner.json[path: "user.email_verified"] as? Bool == true)
            #expect(owner.json[path: "user.providers"] as? [String] == [])
        }
    }

    /// A provider's name is cleaned and cut to 80 code points, at the end of a whole character.
    @Test func aProvidersNameIsCutAtACharactersEnd() {
        #expect(DisplayName.sanitized(String(repeating: "b", count: 100)) == String(repeating: "b", count: 80))
        #expect(DisplayName.sanitized(String(repeating: "a", count: 79) + "\u{1F1EB}\u{1F1F7}") == String(repeating: "a", count: 79))
        #expect(DisplayName.sanitized(String(repeating: "a", count: 78) + "\u{1F1EB}\u{1F1F7}") == String(repeating: "a", count: 78) + "\u{1F1EB}\u{1F1F7}")
        #expect(DisplayName.sanitized("  Ada\u{7} ") == "Ada")
        #expect(DisplayName.sanitized(" \u{0} ") == nil)
    }

    @Test func anIdentityLinksToAnExistingAccountOnlyWhenBothEmailsAreVerified() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let subject = "google-\(UUID())"
            // Our side is not verified yet: no takeover by whoever controls a Google account.
            let early = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: account.email)])
            #expect(early.status == .conflict)
            #expect(early.code == "account_exists")

            let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: account.email).first))
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token]).status == .ok)
            // Google's side unverified: still no.
            let unverified = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: account.email, emailVerified: false)])
            #expect(unverified.code == "account_exists")

            let linked = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: account.email.uppercased())])
            #expect(linked.status == .ok, "\(linked.text)")
            #expect(linked.json["created"] as? Bool == false)
            #expect(linked.json[path: "user.id"] as? String == account.id)
            #expect(linked.json[path: "user.providers"] as? [String] == ["google"])
            #expect(try await env.logIn(account.email, account.password).status == .ok)
        }
    }
}
