@testable import Auth
import Foundation
import HTTPTypes
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitHTTP
import ServiceKitTokens
import Testing
import TestSupport

/// Whoever proves the mailbox owns the account, and a proof alone keeps nothing someone else set
/// before it: the attacks step by step, through HTTP, with the mail read back from the SMTP sink.
@Suite struct AccountTakeoverTests {
    /// A disowning link is for an address nobody has proven: one that outlived the proof (issued
    /// beside it) is spent, and the proven account keeps its password and its sessions.
    @Test func aDisowningLinkOfAProvenAccountIsSpent() async throws {
        try await AuthTestEnvironment.run { env in
            let owner = try await env.signUp()
            let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: owner.email).first))
            // Proven while this link stayed unspent, as a resend beside the verification leaves one.
            try await env.execute("UPDATE users SET email_verified = true, email_proven_by_mail = true WHERE id = '\(owner.id)'")
            let disowned = try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "disown": true])
            #expect(disowned.status == .badRequest && disowned.code == "token_used", "\(disowned.text)")
            #expect(try await env.sessionCount(of: owner.id) == 1)
            #expect(try await env.logIn(owner.email, owner.password).status == .ok)
        }
    }

    /// A resend that a verification overtakes mails no link: it checks the account again under its
    /// lock, after the verification spent every verify link.
    @Test func aResendOvertakenByTheVerificationMailsNothing() async throws {
        try await AuthTestEnvironment.run { env in
            let owner = try await env.signUp()
            _ = try await env.mails(to: owner.email)
            let verification = [
                "SELECT 1 FROM users WHERE id = '\(owner.id)' FOR UPDATE",
                "UPDATE users SET email_verified = true, email_proven_by_mail = true WHERE id = '\(owner.id)'",
                "UPDATE email_tokens SET used_at = now() WHERE user_id = '\(owner.id)' AND purpose = 'verify_email'",
            ]
            let resent = try await env.whileHeld(verification) { try await env.call(.post, "/v1/auth/email/verify/resend", token: owner.accessToken) }
            #expect(resent.status == .conflict && resent.code == "already_verified", "\(resent.text)")
            #expect(try await env.count("SELECT count(*) FROM email_tokens WHERE user_id = '\(owner.id)' AND used_at IS NULL") == 0)
        }
    }

    /// An attacker signs up with the victim's address and their own password and keeps the session.
    /// The victim, following the mailed link without that password, cannot verify the account for
    /// the attacker; they disown it instead, and the attacker's refresh token and password stop
    /// working. `ADMIN_EMAILS` makes the victim admin through that clean proof.
    @Test func theMailboxOwnerWhoDidNotSignUpDisownsTheAccount() async throws {
        let victim = "\(TestEnvironment.uniqueName("victim"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": victim]) { env in
            let attacker = try await env.signUp(victim, password: "attacker's own password", name: "Totally The Owner")
            #expect(try await env.call(.post, "/v1/auth/roles/coach", token: attacker.accessToken).status == .ok)
            let mail = try #require(try await env.mails(to: victim).first)
            let unfolded = mail.replacingOccurrences(of: "=\r\n", with: "").replacingOccurrences(of: "=\n", with: "").replacingOccurrences(of: "=3D", with: "=")
            #expect(unfolded.contains("If you did not sign up"))
            let token = try AuthTestEnvironment.linkToken(in: mail)
            #expect(unfolded.contains("token=\(token)&disown=1"))

            // The link alone, a wrong password, or another account's token: not enough, and the link
            // still works afterwards.
            let bare = try await env.call(.post, "/v1/auth/email/verify", json: ["token": token])
            #expect(bare.status == .unauthorized && bare.code == "proof_required", "\(bare.text)")
            #expect(bare.headers[.contentType] == "application/problem+json")
            let guessed = try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "password": "correct horse battery"])
            #expect(guessed.status == .unauthorized && guessed.code == "invalid_credentials")
            let stranger = try await env.signUp()
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token], token: stranger.accessToken).code == "proof_required")
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "disown": true, "password": "x"]).code == "validation_failed")
            #expect(try await env.call(.get, "/v1/auth/me", token: attacker.accessToken).json["email_verified"] as? Bool == false)

            let disowned = try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "disown": true])
            #expect(disowned.status == .ok, "\(disowned.text)")
            #expect(disowned.json["email_verified"] as? Bool == true)
            let passwordToken = try #require(disowned.json["password_token"] as? String)
            #expect(disowned.json["password_token_expires_at"] is String)
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "disown": true]).code == "token_used")

            // Everything the attacker set is gone.
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": attacker.refreshToken]).status == .unauthorized)
            #expect(try await env.call(.get, "/v1/auth/me", token: attacker.accessToken).code == "session_revoked")
            #expect(try await env.logIn(victim, attacker.password).code == "invalid_credentials")

            // The victim chooses the first password with the token the response carried, once.
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": passwordToken, "password": "the victim's own secret"]).status == .noContent)
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": passwordToken, "password": "again a new secret"]).code == "token_used")
            let owner = try await env.logIn(victim, "the victim's own secret")
            #expect(owner.status == .ok, "\(owner.text)")
            #expect(owner.json[path: "user.id"] as? String == attacker.id)
            #expect(owner.json[path: "user.email_verified"] as? Bool == true)
            #expect(owner.json[path: "user.display_name"] as? String == nil, "the name the attacker chose went with the password")
            #expect(owner.json[path: "user.roles"] as? [String] == ["user", "admin"])
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: attacker.id).contains("user.password_changed") }
        }
    }

    /// The reset mail is the mailbox owner's way in to an account someone else set up with their
    /// address: the maker changing its password does not spend the owner's link.
    @Test func theMakersPasswordChangeLeavesTheOwnersResetLink() async throws {
        try await AuthTestEnvironment.run { env in
            let victim = "\(TestEnvironment.uniqueName("squatted"))@example.com"
            let maker = try await env.signUp(victim, password: "the maker's first password")
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": victim]).status == .accepted)
            let reset = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: victim, count: 2).first { $0.contains("Subject: Reset your") }))
            let changed = try await env.call(
                .post, "/v1/auth/password/change", json: ["current_password": "the maker's first password", "password": "the maker's next password"],
                token: maker.accessToken)
            #expect(changed.status == .noContent, "\(changed.text)")
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": reset, "password": "the owner's own secret"]).status == .noContent)
            #expect(try await env.logIn(victim, "the owner's own secret").status == .ok)
            #expect(try await env.logIn(victim, "the maker's next password").code == "invalid_credentials")

            // A proven account's change spends its reset links, as before.
            let owner = try await env.signUp()
            try await env.execute("UPDATE users SET email_verified = true, email_proven_by_mail = true WHERE id = '\(owner.id)'")
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": owner.email]).status == .accepted)
            let link = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: owner.email, count: 2).first { $0.contains("Subject: Reset your") }))
            #expect(
                try await env.call(
                    .post, "/v1/auth/password/change", json: ["current_password": owner.password, "password": "a proven new password"], token: owner.accessToken
                ).status == .noContent)
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": link, "password": "someone else's"]).code == "token_used")
        }
    }

    /// The person who set the account up keeps everything: from the app (its access token) or from
    /// the page (the password), sessions and password stay.
    @Test(arguments: ["app", "page"])
    func theOneWhoSignedUpVerifiesAndKeepsEverything(from place: String) async throws {
        let configured = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": configured]) { env in
            let account = try await env.signUp(configured)
            let other = try AuthTestEnvironment.account(try await env.logIn(account.email, account.password), email: account.email, password: account.password)
            let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: account.email).first))
            let verified =
                place == "app"
                ? try await env.call(.post, "/v1/auth/email/verify", json: ["token": token], token: account.accessToken)
                : try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "password": account.password])
            #expect(verified.status == .ok, "\(verified.text)")
            #expect(verified.json["password_token"] as? String == nil)
            let refreshed = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken])
            #expect(refreshed.status == .ok)
            #expect(try AdminAndDeletionTests.roles(in: try #require(refreshed.json["access_token"] as? String)) == ["user", "admin"])
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": other.refreshToken]).status == .ok)
            #expect(try await env.logIn(account.email, account.password).status == .ok)
        }
    }

    /// A session that has ended is no proof, even with an access token still unexpired.
    @Test func anEndedSessionIsNoProof() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: account.email).first))
            #expect(try await env.call(.post, "/v1/auth/logout", token: account.accessToken).status == .noContent)
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token], token: account.accessToken).code == "proof_required")
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "password": account.password]).status == .ok)
        }
    }

    /// The same attack, finished by a provider: the victim signs in with Google under their Gmail
    /// address, which Google answers for. The account becomes theirs without the attacker's password
    /// and sessions; and a provider's claim never makes anyone admin.
    @Test func aProviderSignInToAnUnprovenAccountRemovesWhatItsMakerSet() async throws {
        let victim = "\(TestEnvironment.uniqueName("victim"))@gmail.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": victim]) { env in
            let attacker = try await env.signUp(victim, password: "attacker's own password", name: "Totally The Owner")
            let subject = "g-\(UUID())"
            let google = try await env.signIn(with: .google, subject: subject, email: victim)
            #expect(google.status == .ok, "\(google.text)")
            #expect(google.json["created"] as? Bool == false)
            #expect(google.json[path: "user.id"] as? String == attacker.id)
            #expect(google.json[path: "user.has_password"] as? Bool == false)
            #expect(google.json[path: "user.providers"] as? [String] == ["google"])
            #expect(google.json[path: "user.email_verified"] as? Bool == true)
            #expect(google.json[path: "user.display_name"] as? String == nil)
            #expect(try AdminAndDeletionTests.roles(in: try #require(google.json[path: "session.access_token"] as? String)) == ["user"])

            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": attacker.refreshToken]).status == .unauthorized)
            #expect(try await env.logIn(victim, attacker.password).code == "invalid_credentials")
            // The attacker's verification link is dead too.
            let link = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: victim).first))
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": link, "disown": true]).code == "token_used")
            #expect(try await env.signIn(with: .google, subject: subject, email: victim).json["created"] as? Bool == false)
        }
    }

    /// Google vouches for an address only on its own domains or the token's hosted domain, Apple only
    /// on its own: elsewhere their `email_verified` makes an account whose address is proven by mail,
    /// and never an admin.
    @Test func googleVouchesOnlyForItsOwnAndHostedDomains() async throws {
        let configured = "\(TestEnvironment.uniqueName("boss"))@gmail.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": configured]) { env in
            let company = "\(TestEnvironment.uniqueName("left"))@company.example"
            let elsewhere = try await env.signIn(with: .google, subject: "g-\(UUID())", email: company)
            #expect(elsewhere.status == .ok && elsewhere.json["created"] as? Bool == true, "\(elsewhere.text)")
            #expect(elsewhere.json[path: "user.email_verified"] as? Bool == false)
            #expect(try await env.mails(to: company).first?.contains("Subject: Confirm your email") == true)

            let hosted = "\(TestEnvironment.uniqueName("staff"))@company.example"
            let workspace = try await env.signIn(with: .google, subject: "g-\(UUID())", email: hosted, extra: ["hd": "company.example"])
            #expect(workspace.json[path: "user.email_verified"] as? Bool == true)
            let googlemail = try await env.signIn(with: .google, subject: "g-\(UUID())", email: "\(TestEnvironment.uniqueName("gm"))@googlemail.com")
            #expect(googlemail.json[path: "user.email_verified"] as? Bool == true)
            // Apple the same way: its own iCloud addresses, not a company address it once checked.
            let icloud = try await env.signIn(with: .apple, subject: "a-\(UUID())", email: "\(TestEnvironment.uniqueName("ap"))@icloud.com", emailVerified: "true")
            #expect(icloud.json[path: "user.email_verified"] as? Bool == true)
            let appleElsewhere = try await env.signIn(
                with: .apple, subject: "a-\(UUID())", email: "\(TestEnvironment.uniqueName("ap"))@company.example", emailVerified: "true")
            #expect(appleElsewhere.status == .ok && appleElsewhere.json[path: "user.email_verified"] as? Bool == false)

            // The configured admin address, claimed by Google, is verified but not admin: only a
            // mail proof (here, a password reset) is.
            let boss = try await env.signIn(with: .google, subject: "g-\(UUID())", email: configured)
            let bossToken = try #require(boss.json[path: "session.access_token"] as? String)
            #expect(boss.json[path: "user.email_verified"] as? Bool == true)
            #expect(try AdminAndDeletionTests.roles(in: bossToken) == ["user"])
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": configured]).status == .accepted)
            let reset = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: configured).first { $0.contains("Subject: Reset your") }))
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": reset, "password": "the boss's new secret"]).status == .noContent)
            #expect(try await env.logIn(configured, "the boss's new secret").json[path: "user.roles"] as? [String] == ["user", "admin"])
        }
    }

    /// With `PROVIDER_NONCE_REQUIRED=false`, a spent ID token spelt another way (padding, the unused
    /// low bits of the last character, plain base64's `+` and `/`) is still the spent token.
    @Test func aSpentIDTokenReSpeltIsRefused() async throws {
        try await AuthTestEnvironment.run(["PROVIDER_NONCE_REQUIRED": "false"]) { env in
            let subject = "sub-\(UUID())"
            let email = "\(TestEnvironment.uniqueName("o"))@gmail.com"
            // A token whose signature has a `-` or `_` to re-spell as `+` or `/`.
            var token = try env.google.idToken(subject: subject, email: email)
            while !token.split(separator: ".")[2].contains(where: { $0 == "-" || $0 == "_" }) {
                token = try env.google.idToken(subject: subject, email: email, extra: ["jti": UUID().uuidString])
            }
            let parts = token.split(separator: ".").map(String.init)
            let signature = parts[2]
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
            let last = try #require(alphabet.firstIndex(of: signature.last!))
            let lowBits = String(signature.dropLast()) + String(alphabet[last ^ 1])
            let spellings = [
                signature + "=", signature + "==", lowBits,
                signature.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/"),
            ]
            // Not even before the token is spent: each spelling is refused as malformed.
            for spelling in spellings {
                let reply = try await env.call(.post, "/v1/auth/google", json: ["id_token": "\(parts[0]).\(parts[1]).\(spelling)"])
                #expect(reply.status == .unauthorized && reply.code == "invalid_id_token", "\(spelling): \(reply.text)")
            }
            #expect(try await env.call(.post, "/v1/auth/google", json: ["id_token": token]).status == .ok)
            for spelling in spellings {
                let reply = try await env.call(.post, "/v1/auth/google", json: ["id_token": "\(parts[0]).\(parts[1]).\(spelling)"])
                #expect(reply.status == .unauthorized && reply.code == "invalid_id_token", "\(spelling): \(reply.text)")
            }
            #expect(try await env.call(.post, "/v1/auth/google", json: ["id_token": token]).code == "invalid_id_token")
        }
    }
}
