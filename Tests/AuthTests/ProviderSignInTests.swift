@testable import Auth
import Crypto
import Foundation
import HTTPTypes
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing
import TestSupport

/// Apple and Google ID tokens from local issuers with their own RSA keys and JWKS over HTTP.
@Suite struct ProviderSignInTests {
    @Test func appleCreatesTheAccountOnceKeepsTheNameAndChecksTheHashedNonce() async throws {
        try await AuthTestEnvironment.run { env in
            let subject = "001234.\(UUID().uuidString.lowercased())"
            let email = "\(TestEnvironment.uniqueName("x"))@privaterelay.appleid.com"
            let first = try await env.signIn(
                with: .apple, subject: subject, email: email, emailVerified: "true", extra: ["is_private_email": "true"],
                name: ["given_name": "Ada", "family_name": "Lovelace"])
            #expect(first.status == .ok, "\(first.text)")
            #expect(first.json["created"] as? Bool == true)
            #expect(first.json[path: "user.display_name"] as? String == "Ada Lovelace")
            #expect(first.json[path: "user.email_verified"] as? Bool == true)
            #expect(first.json[path: "user.providers"] as? [String] == ["apple"])
            #expect(first.json[path: "user.has_password"] as? Bool == false)
            let userID = try #require(first.json[path: "user.id"] as? String)

            // Next time Apple sends no name; the first one is kept.
            let second = try await env.signIn(with: .apple, subject: subject, email: email)
            #expect(second.json["created"] as? Bool == false)
            #expect(second.json[path: "user.id"] as? String == userID)
            #expect(second.json[path: "user.display_name"] as? String == "Ada Lovelace")

            // The nonce as issued, not its hash, is what the app sends; and the token must carry it.
            let nonce = try await env.nonce()
            let hashed = try await env.call(
                .post, "/v1/auth/apple",
                json: [
                    "id_token": try env.idToken(.apple, nonce: nonce, subject: subject, email: email),
                    "nonce": AuthTestEnvironment.sha256Hex(nonce),
                ])
            #expect(hashed.status == .unauthorized && hashed.code == "invalid_nonce", "\(hashed.text)")
            let other = try await env.nonce()
            let mismatch = try await env.call(.post, "/v1/auth/apple", json: ["id_token": try env.idToken(.apple, nonce: nonce, subject: subject, email: email), "nonce": other])
            #expect(mismatch.status == .unauthorized)
            #expect(mismatch.code == "invalid_id_token")
            let unhashed = try env.apple.idToken(subject: subject, email: email, nonce: nonce)
            #expect(try await env.call(.post, "/v1/auth/apple", json: ["id_token": unhashed, "nonce": nonce]).code == "invalid_id_token")

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
            let first = try await env.signIn(with: .google, subject: subject, email: email)
            #expect(first.status == .ok && first.json["created"] as? Bool == true, "\(first.text)")
            let userID = try #require(first.json[path: "user.id"] as? String)
            let second = try await env.signIn(with: .google, subject: subject, email: email)
            #expect(second.status == .ok && second.json["created"] as? Bool == false)
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: userID).filter { $0 == "user.signed_in" }.count == 2 }

            let (n2, n3) = (try await env.nonce(), try await env.nonce())
            let mismatch = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.idToken(.google, nonce: n2, subject: subject, email: email), "nonce": n3])
            #expect(mismatch.status == .unauthorized && mismatch.code == "invalid_id_token")
            let missing = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.idToken(.google, nonce: n2, subject: subject, email: email)])
            #expect(missing.status == .badRequest && missing.code == "validation_failed" && missing.text.contains("nonce"), "\(missing.text)")

            #expect(try await env.call(.post, "/v1/admin/users/\(userID)/disable", token: boss.accessToken).status == .ok)
            let refused = try await env.signIn(with: .google, subject: subject, email: email)
            #expect(refused.status == .forbidden && refused.code == "account_disabled")
            // Enabling again writes an event after the refused sign-in: once it is on the stream, anything
            // the refusal had written would be too.
            #expect(try await env.call(.post, "/v1/admin/users/\(userID)/enable", token: boss.accessToken).status == .ok)
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: userID).filter { $0 == "user.status_changed" }.count == 2 }
            #expect(try await env.eventTypes(for: userID).filter { $0 == "user.signed_in" }.count == 2)
        }
    }

    /// A provider whose keys cannot be fetched is `503 provider_unavailable`, to be tried again; the
    /// fetch's own error (the address, its answer) is logged, not told the client.
    @Test func aProviderOutOfReachIsUnavailableWithoutItsInternals() async throws {
        // A server that answers, but not with keys: 404 for the path.
        let elsewhere = try ProviderIssuer(issuer: "https://accounts.google.com", clientID: AuthTestEnvironment.googleClientID)
        try await elsewhere.start()
        defer { elsewhere.stop() }
        let url = elsewhere.jwksURL + "/moved"
        try await AuthTestEnvironment.run(["GOOGLE_JWKS_URL": url]) { env in
            let reply = try await env.signIn(with: .google, subject: "g-\(UUID())", email: "\(TestEnvironment.uniqueName("g"))@example.com")
            #expect(reply.status == .serviceUnavailable && reply.code == "provider_unavailable", "\(reply.text)")
            let detail = try #require(reply.json["detail"] as? String)
            #expect(!detail.contains(url) && !detail.contains("404"), "\(detail)")
        }
    }

    /// A sign-in through an identity racing the address's owner taking the account back (the
    /// identity its maker linked removed, every session ended) makes no session after it: the
    /// sign-in holds the identity and the account, so it waits, and then finds no identity.
    @Test func aSignInThroughAnIdentityRacingATakeoverMakesNoSession() async throws {
        try await AuthTestEnvironment.run { env in
            let subject = "sub-\(UUID())"
            // Google does not answer for this domain: the identity is linked unproven.
            let email = "\(TestEnvironment.uniqueName("corp"))@corp.example"
            let made = try await env.signIn(with: .google, subject: subject, email: email)
            #expect(made.status == .ok, "\(made.text)")
            let userID = try #require(made.json[path: "user.id"] as? String)
            let nonce = try await env.nonce()
            let token = try env.idToken(.google, nonce: nonce, subject: subject, email: email)
            let takeover = [
                "SELECT 1 FROM users WHERE id = '\(userID)' FOR UPDATE", "DELETE FROM identities WHERE user_id = '\(userID)'",
                "DELETE FROM sessions WHERE user_id = '\(userID)'",
            ]
            let answer = try await env.whileHeld(takeover) { try await env.call(.post, "/v1/auth/google", json: ["id_token": token, "nonce": nonce]) }
            #expect(answer.status == .conflict && answer.code == "account_exists", "\(answer.text)")
            #expect(try await env.sessionCount(of: userID) == 0)
        }
    }

    /// A provider sign-in needs a nonce this server issued, unexpired, used once: an ID token and nonce
    /// copied from a sign-in, sent again (even several times at once), sign no one in.
    @Test func aSignInNeedsAFreshNonceFromThisServerUsedOnce() async throws {
        try await AuthTestEnvironment.run { env in
            let issued = try await env.call(.post, "/v1/auth/nonce")
            #expect(issued.status == .ok)
            let dates = ISO8601DateFormatter()
            dates.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            let expiresAt = try #require((issued.json["expires_at"] as? String).flatMap(dates.date(from:)))
            #expect(abs(expiresAt.timeIntervalSinceNow - 600) < 5)
            #expect(try await env.nonce() != env.nonce())

            let subject = "sub-\(UUID())"
            let email = "\(TestEnvironment.uniqueName("n"))@gmail.com"
            func signIn(nonce: String) async throws -> AuthTestEnvironment.Reply {
                try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.idToken(.google, nonce: nonce, subject: subject, email: email), "nonce": nonce])
            }
            let key = try P256.Signing.PrivateKey(pemRepresentation: try #require(env.config.environment["JWT_SIGNING_KEY"]))
            let real = try await env.nonce()
            let tampered = String(real.prefix(20)) + (real.dropFirst(20).first == "A" ? "B" : "A") + real.dropFirst(21)
            let refused: [(String, String)] = [
                ("made up by the app", "client-made-\(UUID())"),
                ("tampered with", tampered),
                ("expired", ProviderNonces(signingKey: key).issue(now: Date().addingTimeInterval(-601)).nonce),
                ("issued under another key", ProviderNonces(signingKey: P256.Signing.PrivateKey()).issue().nonce),
            ]
            for (why, nonce) in refused {
                let reply = try await signIn(nonce: nonce)
                #expect(reply.status == .unauthorized && reply.code == "invalid_nonce", "\(why): \(reply.text)")
            }

            // Once, then never again; the same sign-in sent four times at once gets in once.
            #expect(try await signIn(nonce: real).status == .ok)
            #expect(try await signIn(nonce: real).code == "invalid_nonce")
            let nonce = try await env.nonce()
            let body = String(
                decoding: try JSONSerialization.data(withJSONObject: ["id_token": try env.idToken(.google, nonce: nonce, subject: subject, email: email), "nonce": nonce]),
                as: UTF8.self)
            let replies = try await withThrowingTaskGroup(of: AuthTestEnvironment.Reply.self) { group in
                for _ in 0..<4 { group.addTask { try await env.call(.post, "/v1/auth/google", raw: body) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.filter { $0.status == .ok }.count == 1)
            #expect(replies.filter { $0.code == "invalid_nonce" }.count == 3, "\(replies.map(\.text))")

            // A spent nonce is kept until it expires; the janitor removes it an hour after that (a
            // replica whose clock is behind still refuses it), and not before.
            let spent = try await env.query { client in
                try await client.query("SELECT count(*)::int, coalesce(bool_and(expires_at > now() + interval '5 minutes'), false) FROM spent_provider_sign_ins", logger: TestEnvironment.logger)
                    .collect().first!.decode((Int, Bool).self)
            }
            #expect(spent.0 == 2 && spent.1)
            try await env.query { client in
                try await client.query(
                    """
                    UPDATE spent_provider_sign_ins SET expires_at = now() - CASE WHEN value_hash = (SELECT value_hash FROM spent_provider_sign_ins ORDER BY value_hash LIMIT 1)
                        THEN interval '2 hours' ELSE interval '50 minutes' END
                    """, logger: TestEnvironment.logger)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await AuthJanitor(postgres: client, logger: TestEnvironment.logger).run() }
                    try await waitUntil(.seconds(10)) {
                        try await client.query("SELECT 1 FROM spent_provider_sign_ins WHERE expires_at < now() - interval '1 hour'", logger: TestEnvironment.logger).collect().isEmpty
                    }
                    group.cancelAll()
                }
                let left = try await client.query("SELECT count(*)::int FROM spent_provider_sign_ins", logger: TestEnvironment.logger).collect().first!.decode(Int.self)
                #expect(left == 1, "the one expired 50 minutes ago stays")
            }
        }
        // Where apps already shipped send none, a sign-in may come without one: then its ID token is
        // what is spent, so it signs in once too. A nonce that is sent is still checked, and a token
        // that carries one cannot come without it.
        try await AuthTestEnvironment.run(["PROVIDER_NONCE_REQUIRED": "false"]) { env in
            let subject = "sub-\(UUID())"
            let email = "\(TestEnvironment.uniqueName("o"))@gmail.com"
            let token = try env.google.idToken(subject: subject, email: email)
            let without = try await env.call(.post, "/v1/auth/google", json: ["id_token": token])
            #expect(without.status == .ok, "\(without.text)")
            let again = try await env.call(.post, "/v1/auth/google", json: ["id_token": token])
            #expect(again.status == .unauthorized && again.code == "invalid_id_token", "\(again.text)")
            let madeUp = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.google.idToken(subject: subject, email: email, nonce: "app-made"), "nonce": "app-made"])
            #expect(madeUp.code == "invalid_nonce")
            let nonce = try await env.nonce()
            let stripped = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.idToken(.google, nonce: nonce, subject: subject, email: email)])
            #expect(stripped.status == .unauthorized && stripped.code == "invalid_id_token", "\(stripped.text)")
            #expect(try await env.signIn(with: .google, subject: subject, email: email).status == .ok)
            // A nonce spelt another way (plain base64's `+` and `/`, padding) is not the nonce.
            let issued = try await env.nonce()
            for variant in [issued.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/"), issued + "=="] where variant != issued {
                let reply = try await env.call(.post, "/v1/auth/google", json: ["id_token": try env.idToken(.google, nonce: variant, subject: subject, email: email), "nonce": variant])
                #expect(reply.code == "invalid_nonce", "\(variant)")
            }
        }
    }

    @Test func badIDTokensAreRefused() async throws {
        try await AuthTestEnvironment.run { env in
            let subject = "sub-\(UUID())"
            let email = "\(TestEnvironment.uniqueName("g"))@gmail.com"
            // Each with a good nonce of its own, so that only its one defect is refused.
            let cases: [(String, (String) throws -> String)] = [
                ("another app", { try env.google.idToken(subject: subject, email: email, nonce: $0, audience: "someone-else.apps.googleusercontent.com") }),
                ("another issuer", { try env.google.idToken(subject: subject, email: email, nonce: $0, issuer: "https://accounts.evil.test") }),
                ("expired", { try env.google.idToken(subject: subject, email: email, nonce: $0, expiresIn: -3600) }),
                ("unknown key", { try env.google.idToken(subject: subject, email: email, nonce: $0, signWith: try ProviderIssuer.otherKey(), kid: "not-published") }),
                ("forged with a known kid", { try env.google.idToken(subject: subject, email: email, nonce: $0, signWith: try ProviderIssuer.otherKey()) }),
                ("Apple's token at Google", { try env.apple.idToken(subject: subject, email: email, nonce: $0) }),
                ("garbage", { _ in "a.b.c" }),
            ]
            for (why, token) in cases {
                let nonce = try await env.nonce()
                let reply = try await env.call(.post, "/v1/auth/google", json: ["id_token": try token(nonce), "nonce": nonce])
                #expect(reply.status == .unauthorized, "\(why): \(reply.text)")
                #expect(reply.code == "invalid_id_token", "\(why)")
            }
            // The same claims, correctly signed, pass: each refusal above is for its own reason.
            let good = try await env.signIn(with: .google, subject: subject, email: email)
            #expect(good.status == .ok, "\(good.text)")
            #expect(good.json["created"] as? Bool == true)
            #expect(try await env.call(.post, "/v1/auth/google", json: ["nonce": try await env.nonce()]).status == .badRequest)
        }
    }

    @Test func anAddressTheProviderHasNotVerifiedIsVerifiedByMail() async throws {
        try await AuthTestEnvironment.run { env in
            let email = "\(TestEnvironment.uniqueName("u"))@example.com"
            let reply = try await env.signIn(with: .google, subject: "g-\(UUID())", email: email, emailVerified: false, extra: ["name": "Name\u{7}With Bell"])
            #expect(reply.status == .ok, "\(reply.text)")
            #expect(reply.json[path: "user.email_verified"] as? Bool == false)
            #expect(reply.json[path: "user.display_name"] as? String == "NameWith Bell")
            let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: email).first))
            let access = try #require(reply.json[path: "session.access_token"] as? String)
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token]).code == "proof_required")
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token], token: access).status == .ok)
        }
    }

    /// Someone signs in with Google under another person's address, which Google has not verified.
    /// The owner cannot sign up (the address is taken) and resets the password by mail, or follows
    /// the verification mail's "I did not sign up" link: either proves the address, and the Google
    /// sign-in made without that proof stops reaching the account.
    @Test(arguments: [false, true])
    func anAccountClaimedUnderAnUnprovenAddressGoesBackToItsOwnerOnReset(ownerVerifiedFirst: Bool) async throws {
        try await AuthTestEnvironment.run { env in
            let email = "\(TestEnvironment.uniqueName("owner"))@example.com"
            let subject = "g-\(UUID())"
            let claim = try await env.signIn(with: .google, subject: subject, email: email, emailVerified: false)
            #expect(claim.status == .ok && claim.json[path: "user.email_verified"] as? Bool == false)
            #expect(try await env.call(.post, "/v1/auth/signup", json: ["email": email, "password": "the owner's password"]).code == "email_taken")
            let reset: String
            if ownerVerifiedFirst {
                let verify = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: email).first))
                let disowned = try await env.call(.post, "/v1/auth/email/verify", json: ["token": verify, "disown": true])
                #expect(disowned.status == .ok, "\(disowned.text)")
                reset = try #require(disowned.json["password_token"] as? String)
            } else {
                #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": email]).status == .accepted)
                let resetMail = try #require(try await env.mails(to: email, count: 2).first { $0.contains("Subject: Reset your") })
                reset = try AuthTestEnvironment.linkToken(in: resetMail)
            }
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": reset, "password": "the owner's password"]).status == .noContent)
            // The claimant's sign-in no longer reaches the account (and the reset ended its session):
            // with an unverified address it cannot be linked again, so it is refused.
            let again = try await env.signIn(with: .google, subject: subject, email: email, emailVerified: false)
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

    /// An identity links to an existing account by email only when the provider answers for the
    /// address (Google: its own domains, or the token's hosted domain `hd`), or with the account's
    /// password; a verified account keeps its password when linked.
    @Test func anIdentityLinksToAnExistingAccountWithAVouchedAddressOrThePassword() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await AdminAndDeletionTests.verifiedAccount(env)
            let subject = "google-\(UUID())"
            // Google says verified, but does not answer for an example.com address it has no `hd` for.
            let unvouched = try await env.signIn(with: .google, subject: subject, email: account.email)
            #expect(unvouched.status == .conflict && unvouched.code == "account_exists", "\(unvouched.text)")
            let otherDomain = try await env.signIn(with: .google, subject: subject, email: account.email, extra: ["hd": "elsewhere.example"])
            #expect(otherDomain.code == "account_exists")
            let unverified = try await env.signIn(with: .google, subject: subject, email: account.email, emailVerified: false, extra: ["hd": "example.com"])
            #expect(unverified.code == "account_exists")

            // With the account's password: linked (a wrong one is refused and links nothing).
            let nonce = try await env.nonce()
            let token = try env.idToken(.google, nonce: nonce, subject: subject, email: account.email)
            let wrong = try await env.call(.post, "/v1/auth/google", json: ["id_token": token, "nonce": nonce, "password": "not the password"])
            #expect(wrong.status == .unauthorized && wrong.code == "invalid_credentials", "\(wrong.text)")
            let linked = try await env.call(.post, "/v1/auth/google", json: ["id_token": token, "nonce": nonce, "password": account.password])
            #expect(linked.status == .ok, "\(linked.text)")
            #expect(linked.json["created"] as? Bool == false)
            #expect(linked.json[path: "user.id"] as? String == account.id)
            #expect(linked.json[path: "user.providers"] as? [String] == ["google"])
            #expect(try await env.logIn(account.email, account.password).status == .ok)

            // The Workspace domain named by `hd` is Google's to answer for: a second verified account
            // links by address alone, keeping its password.
            let second = try await AdminAndDeletionTests.verifiedAccount(env)
            let workspace = try await env.signIn(with: .google, subject: "google-\(UUID())", email: second.email.uppercased(), extra: ["hd": "EXAMPLE.com"])
            #expect(workspace.status == .ok, "\(workspace.text)")
            #expect(workspace.json[path: "user.id"] as? String == second.id)
            #expect(workspace.json[path: "user.has_password"] as? Bool == true)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": second.refreshToken]).status == .ok)
        }
    }

    /// A Google sign-in linked with the account's password goes with a password reset or change:
    /// whoever else knew the password could have linked their own. One Google answers for stays, and
    /// so does the sign-in an account was made with; the owner links again with the new password.
    @Test(arguments: [false, true])
    func aSignInLinkedWithThePasswordEndsWithAResetOrAChange(byReset: Bool) async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await AdminAndDeletionTests.verifiedAccount(env)
            // Google does not answer for an example.com address it has no `hd` for: linked with the password.
            let withPassword = "google-\(UUID())"
            func linkWithPassword(_ password: String) async throws -> AuthTestEnvironment.Reply {
                let nonce = try await env.nonce()
                let token = try env.idToken(.google, nonce: nonce, subject: withPassword, email: account.email)
                return try await env.call(.post, "/v1/auth/google", json: ["id_token": token, "nonce": nonce, "password": password])
            }
            let linked = try await linkWithPassword(account.password)
            #expect(linked.status == .ok && linked.json[path: "user.id"] as? String == account.id, "\(linked.text)")
            // The Workspace domain named by `hd` is Google's to answer for: linked by the address alone.
            let vouched = "google-\(UUID())"
            let workspace = try await env.signIn(with: .google, subject: vouched, email: account.email, extra: ["hd": "example.com"])
            #expect(workspace.status == .ok && workspace.json[path: "user.id"] as? String == account.id, "\(workspace.text)")
            let identities = "SELECT count(*) FROM identities WHERE user_id = '\(account.id)'"
            #expect(try await env.count(identities) == 2)

            let newPassword = "a brand new horse battery"
            if byReset {
                #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": account.email]).status == .accepted)
                let resetMail = try #require(try await env.mails(to: account.email, count: 2).first { $0.contains("Subject: Reset your") })
                let reset = try await env.call(.post, "/v1/auth/password/reset", json: ["token": try AuthTestEnvironment.linkToken(in: resetMail), "password": newPassword])
                #expect(reset.status == .noContent, "\(reset.text)")
            } else {
                let change = try await env.call(
                    .post, "/v1/auth/password/change", json: ["current_password": account.password, "password": newPassword], token: account.accessToken)
                #expect(change.status == .noContent, "\(change.text)")
            }
            #expect(try await env.count(identities) == 1)
            let again = try await env.signIn(with: .google, subject: withPassword, email: account.email)
            #expect(again.status == .conflict && again.code == "account_exists", "\(again.text)")
            let stays = try await env.signIn(with: .google, subject: vouched, email: account.email, extra: ["hd": "example.com"])
            #expect(stays.status == .ok && stays.json[path: "user.id"] as? String == account.id, "\(stays.text)")
            #expect(try await linkWithPassword(account.password).code == "invalid_credentials")
            let relinked = try await linkWithPassword(newPassword)
            #expect(relinked.status == .ok && relinked.json[path: "user.id"] as? String == account.id, "\(relinked.text)")

            // An account made with Google keeps that sign-in when it sets a password by reset.
            let made = "google-\(UUID())"
            let gmail = "\(TestEnvironment.uniqueName("made"))@gmail.com"
            let created = try await env.signIn(with: .google, subject: made, email: gmail)
            #expect(created.status == .ok && created.json["created"] as? Bool == true, "\(created.text)")
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": gmail]).status == .accepted)
            let resetMail = try #require(try await env.mails(to: gmail).first { $0.contains("Subject: Reset your") })
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": try AuthTestEnvironment.linkToken(in: resetMail), "password": newPassword]).status == .noContent)
            let returning = try await env.signIn(with: .google, subject: made, email: gmail)
            #expect(returning.status == .ok && returning.json[path: "user.id"] as? String == created.json[path: "user.id"] as? String, "\(returning.text)")
        }
    }
}
