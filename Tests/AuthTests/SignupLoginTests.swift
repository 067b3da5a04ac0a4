@testable import Auth
import Crypto
import Foundation
import HTTPTypes
import JWTKit
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing
import TestSupport

@Suite struct SignupLoginTests {
    @Test func signupReturnsTheUserAndASessionAndEmitsUserRegistered() async throws {
        try await AuthTestEnvironment.run { env in
            let reply = try await env.call(.post, "/v1/auth/signup", json: ["email": "  Ana.Cook@Example.COM ", "password": "plum tart 2024", "display_name": "Ana"])
            #expect(reply.status == .created)
            // The local part as typed; the domain in its (lowercase) ASCII form.
            #expect(reply.json[path: "user.email"] as? String == "Ana.Cook@example.com")
            #expect(reply.json[path: "user.email_verified"] as? Bool == false)
            #expect(reply.json[path: "user.display_name"] as? String == "Ana")
            #expect(reply.json[path: "user.roles"] as? [String] == ["user"])
            #expect(reply.json[path: "session.token_type"] as? String == "Bearer")
            #expect(reply.json[path: "session.expires_in"] as? Int == 900)
            let account = try AuthTestEnvironment.account(reply, email: "ana.cook@example.com", password: "plum tart 2024")

            // The same address in another case, trimmed, is taken.
            let again = try await env.call(.post, "/v1/auth/signup", json: ["email": "ana.cook@example.com", "password": "another good one"])
            #expect(again.status == .conflict)
            #expect(again.code == "email_taken")
            #expect(again.headers[.contentType] == "application/problem+json")

            // Login is case-insensitive too; the old session stays valid.
            let login = try await env.logIn("ANA.COOK@example.com", "plum tart 2024")
            #expect(login.status == .ok)
            #expect(login.headers[.cacheControl] == "no-store", "tokens are not for caches")
            #expect(login.json[path: "user.id"] as? String == account.id)
            let me = try await env.call(.get, "/v1/auth/me", token: account.accessToken)
            #expect(me.status == .ok)
            #expect(me.json["id"] as? String == account.id)

            // One user.registered, and a user.signed_in for each of the two sign-ins.
            try await waitUntil(.seconds(10)) {
                let types = try await env.eventTypes(for: account.id)
                return types.filter { $0 == "user.registered" }.count == 1 && types.filter { $0 == "user.signed_in" }.count == 2
            }
        }
    }

    @Test func signupRefusesBadInputWithTheRightCode() async throws {
        try await AuthTestEnvironment.run { env in
            for email in ["no-at-sign", "two@@example.com", "a@b", "spaces in@example.com", "@example.com", ""] {
                let reply = try await env.call(.post, "/v1/auth/signup", json: ["email": email, "password": "a fine password"])
                #expect(reply.status == .badRequest, "\(email)")
                #expect(reply.code == "invalid_email", "\(email)")
            }
            let cases: [(String, String)] = [
                ("short", "at least 8"),
                ("password1", "most common"),
                ("Sunshine1", "most common"),
                (String(repeating: "é", count: 37), "at most 72 bytes"),  // 74 bytes: bcrypt would cut it
                (String(repeating: "x", count: 73), "at most 72 bytes"),
            ]
            for (password, rule) in cases {
                let reply = try await env.call(.post, "/v1/auth/signup", json: ["email": "\(TestEnvironment.uniqueName("w"))@example.com", "password": password])
                #expect(reply.status == .badRequest, "\(password)")
                #expect(reply.code == "weak_password", "\(password)")
                #expect((reply.json["detail"] as? String)?.contains(rule) == true, "\(password): \(reply.text)")
                #expect((reply.json["errors"] as? [[String: Any]])?.first?["field"] as? String == "password")
            }
            // 72 bytes exactly is accepted.
            _ = try await env.signUp(password: String(repeating: "k", count: 72))

            let malformed = try await env.call(.post, "/v1/auth/signup", raw: "{\"email\": ")
            #expect(malformed.status == .badRequest)
            #expect(malformed.code == "malformed_json")
            let missing = try await env.call(.post, "/v1/auth/signup", json: ["email": "x@example.com"])
            #expect(missing.status == .badRequest)
            #expect((missing.json["errors"] as? [[String: Any]])?.first?["field"] as? String == "password")
            let wrongType = try await env.call(.post, "/v1/auth/signup", json: ["email": 42, "password": "a fine password"])
            #expect(wrongType.status == .badRequest)
            #expect((wrongType.json["errors"] as? [[String: Any]])?.first?["field"] as? String == "email")
            // A key the body does not have is refused, named, rather than ignored.
            let misspelt = try await env.call(.post, "/v1/auth/signup", json: ["email": "x@example.com", "password": "a fine password", "displayName": "Ana"])
            #expect(misspelt.status == .badRequest)
            #expect((misspelt.json["errors"] as? [[String: Any]])?.map { $0["field"] as? String } == ["displayName"])
            // Limits count code points: one letter with 100 combining marks is 101 of them.
            let marked = "a" + String(String.UnicodeScalarView((0..<100).map { Unicode.Scalar(0x300 + UInt32($0 % 0x70))! }))
            let longName = try await env.call(.post, "/v1/auth/signup", json: ["email": "y@example.com", "password": "a fine password", "display_name": marked])
            #expect((longName.json["errors"] as? [[String: Any]])?.first?["field"] as? String == "display_name")
            // A right-to-left override would make the name read otherwise in the verification mail and the apps.
            let flipped = try await env.call(.post, "/v1/auth/signup", json: ["email": "z@example.com", "password": "a fine password", "display_name": "Ana\u{202E}kooc"])
            #expect(flipped.status == .badRequest && (flipped.json["errors"] as? [[String: Any]])?.first?["field"] as? String == "display_name")
            // A NUL in the address of a login: a 400, never a 500.
            let nul = try await env.call(.post, "/v1/auth/login", json: ["email": "a\u{0}b@example.com", "password": "a fine password"])
            #expect(nul.status == .badRequest && nul.code == "invalid_text", "\(nul.text)")
            let notJSON = try await env.call(.post, "/v1/auth/signup", raw: "email=x", headers: [.contentType: "application/x-www-form-urlencoded"])
            #expect(notJSON.status == .unsupportedMediaType)
            let huge = try await env.call(.post, "/v1/auth/signup", raw: "{\"email\": \"" + String(repeating: "a", count: 3 << 20) + "\"}")
            #expect(huge.status == .contentTooLarge)
        }
    }

    /// A wrong password and an unknown email get the same answer after the same work: one bcrypt
    /// check at the configured cost, the unknown email's against a dummy hash (counted by the metric
    /// operators read, not timed: under a test run's load, times say nothing).
    /// After `BCRYPT_COST` is raised, a sign-in with the right password stores it hashed at the new
    /// cost: the stored hashes gain it, and a known address stops answering faster than an unknown
    /// one (checked against a dummy at the configured cost).
    @Test func aSignInHashesAPasswordOfALowerCostAgain() async throws {
        try await AuthTestEnvironment.run(["BCRYPT_COST": "5"]) { env in
            let account = try await env.signUp()
            let weaker = try await PasswordHasher(cost: 4).hash(account.password)
            try await env.execute("UPDATE users SET password_hash = '\(weaker)' WHERE id = '\(account.id)'")
            let costOf = "SELECT count(*) FROM users WHERE id = '\(account.id)' AND password_hash LIKE '$2_$0%s$%'"
            #expect(try await env.count(costOf.replacingOccurrences(of: "%s", with: "4")) == 1)
            #expect(try await env.logIn(account.email, "not the password").status == .unauthorized)
            #expect(try await env.count(costOf.replacingOccurrences(of: "%s", with: "4")) == 1, "a wrong password changes nothing")
            #expect(try await env.logIn(account.email, account.password).status == .ok)
            #expect(try await env.count(costOf.replacingOccurrences(of: "%s", with: "5")) == 1)
            #expect(try await env.logIn(account.email, account.password).status == .ok)
            #expect(try await env.logIn(account.email, "not the password").status == .unauthorized)
        }
    }

    @Test func wrongEmailAndWrongPasswordLookTheSame() async throws {
        let adminPort = try RedisServer.freePort()
        try await AuthTestEnvironment.run(["ADMIN_HTTP_PORT": String(adminPort)]) { env in
            @Sendable func checks() async throws -> Int { Int(try await MetricsScrape.value("auth_password_checks_total", port: adminPort) ?? -1) }
            let account = try await env.signUp()
            let before = try await checks()
            let wrongPassword = try await env.logIn(account.email, "not the password")
            #expect(try await checks() == before + 1)
            let unknownEmail = try await env.logIn("nobody-\(UUID())@example.com", "not the password")
            #expect(try await checks() == before + 2, "the unknown email is checked against the dummy hash")
            let tooLong = try await env.logIn(account.email, String(repeating: "x", count: 100))
            #expect(try await checks() == before + 3, "a password bcrypt would cut is checked too")
            for reply in [wrongPassword, unknownEmail, tooLong] {
                #expect(reply.status == .unauthorized && reply.code == "invalid_credentials", "\(reply.text)")
                #expect(reply.json["detail"] as? String == wrongPassword.json["detail"] as? String)
            }
        }
    }

    /// Sign-ups per client address per hour are limited (before the password is hashed); another
    /// address is not affected.
    @Test func signUpsPerAddressAreLimited() async throws {
        try await AuthTestEnvironment.run(["SIGNUP_MAX_PER_IP_PER_HOUR": "3"]) { env in
            // An address of this run's own: counts live in Redis for the whole hour, across runs.
            let ip: HTTPFields = .from("10.4.\(Int.random(in: 0...255)).\(Int.random(in: 1...254))")
            for _ in 1...3 {
                let made = try await env.call(.post, "/v1/auth/signup", json: ["email": "\(TestEnvironment.uniqueName("s"))@example.com", "password": "a fine password"], headers: ip)
                #expect(made.status == .created)
            }
            let refused = try await env.call(.post, "/v1/auth/signup", json: ["email": "\(TestEnvironment.uniqueName("s"))@example.com", "password": "a fine password"], headers: ip)
            #expect(refused.status == .tooManyRequests && refused.code == "rate_limited" && refused.headers[.retryAfter] != nil, "\(refused.text)")
            let elsewhere = try await env.call(
                .post, "/v1/auth/signup", json: ["email": "\(TestEnvironment.uniqueName("s"))@example.com", "password": "a fine password"],
                headers: .from("10.5.\(Int.random(in: 0...255)).\(Int.random(in: 1...254))"))
            #expect(elsewhere.status == .created)
        }
    }

    @Test func failedLoginsAreThrottledPerAccountAndPerIP() async throws {
        try await AuthTestEnvironment.run(["LOGIN_MAX_FAILURES_PER_IP": "8"]) { env in
            let account = try await env.signUp()
            // One of some sixty thousand: counts live in Redis for the whole window, across runs.
            let guesser: HTTPFields = .from("10.1.\(Int.random(in: 3...255)).\(Int.random(in: 1...254))")
            for attempt in 1...5 {
                let reply = try await env.logIn(account.email, "guess \(attempt)", headers: guesser)
                #expect(reply.code == "invalid_credentials")
            }
            // Blocked for this account from this address, even with the right password...
            let locked = try await env.logIn(account.email, account.password, headers: guesser)
            #expect(locked.status == .tooManyRequests)
            #expect(locked.code == "too_many_attempts")
            let retryAfter = Int(locked.headers[.retryAfter] ?? "") ?? 0
            #expect(retryAfter > 800 && retryAfter <= 900)
            // ...but the owner at another address is not locked out by a stranger's guesses.
            #expect(try await env.logIn(account.email, account.password, headers: .from("10.1.2.1")).status == .ok)

            // Per IP: failures against many accounts from one address add up; a success of the
            // attacker's own account does not reset them.
            let own = try await env.signUp()
            // Addresses and accounts of this run's own: counts live in Redis for the whole window, across runs.
            let victims = (0...8).map { "\(TestEnvironment.uniqueName("victim\($0)"))@example.com" }
            let ip: HTTPFields = .from("10.2.\(Int.random(in: 0...255)).\(Int.random(in: 1...254))")
            for attempt in 1...7 {
                _ = try await env.logIn(victims[attempt], "guess", headers: ip)
            }
            #expect(try await env.logIn(own.email, own.password, headers: ip).status == .ok)
            _ = try await env.logIn(victims[8], "guess", headers: ip)
            let blocked = try await env.logIn(own.email, own.password, headers: ip)
            #expect(blocked.status == .tooManyRequests)
            #expect(blocked.code == "too_many_attempts")
            // Another address is unaffected.
            #expect(try await env.logIn(own.email, own.password, headers: .from("10.3.0.8")).status == .ok)
            // An IPv6 client is counted by its /64: moving to another address within it starts no new count.
            let network = "2001:db8:\(String(Int.random(in: 1...0xffff), radix: 16)):\(String(Int.random(in: 1...0xffff), radix: 16))"
            for attempt in 1...8 {
                _ = try await env.logIn("v6-" + victims[attempt], "guess", headers: .from("\(network)::\(attempt)"))
            }
            #expect(try await env.logIn(own.email, own.password, headers: .from("\(network):1:2:3:4")).code == "too_many_attempts")
            #expect(try await env.logIn(own.email, own.password, headers: .from(network.replacingOccurrences(of: "2001:db8:", with: "2001:db9:") + "::1")).status == .ok)
        }
    }

    /// Guesses sent all at once are counted before bcrypt runs, so no more than the limit get a verdict.
    @Test func parallelGuessesCannotSlipPastTheLimit() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp(password: String(repeating: "k", count: 72))
            // bcrypt sees only 72 bytes; a longer password is wrong, not the same one.
            #expect(try await env.logIn(account.email, account.password + "extra").code == "invalid_credentials")
            #expect(try await env.logIn(account.email, account.password).status == .ok)
            let codes = try await withThrowingTaskGroup(of: String?.self) { group in
                for attempt in 0..<20 {
                    // Over connections of their own, so that the guesses really arrive together; from
                    // this environment's own address, whose counts no other test or earlier run touched.
                    group.addTask {
                        try await ConcurrentClient.send(
                            port: env.client.port!, "POST", "/v1/auth/login", headers: [("X-Forwarded-For", env.clientAddress)],
                            json: ["email": account.email, "password": "parallel guess \(attempt)"]
                        ).json["code"] as? String
                    }
                }
                var codes: [String?] = []
                for try await code in group { codes.append(code) }
                return codes
            }
            #expect(codes.filter { $0 == "invalid_credentials" }.count == 5, "\(codes)")
            #expect(codes.filter { $0 == "too_many_attempts" }.count == 15, "\(codes)")
        }
    }

    /// An attacker with many addresses is never refused by the account's count (that would let a
    /// stranger lock the owner out) but is slowed: past LOGIN_SLOW_AFTER_FAILURES each attempt waits,
    /// doubling. The owner's right password still signs in, from a new address, and starts the count over.
    @Test func guessesFromManyAddressesAreSlowedNotTurnedIntoALockout() async throws {
        try await AuthTestEnvironment.run(["LOGIN_SLOW_AFTER_FAILURES": "2", "LOGIN_MAX_DELAY_MS": "8000", "BCRYPT_COST": "4"]) { env in
            let account = try await env.signUp()
            let clock = ContinuousClock()
            var times: [Duration] = []
            for attempt in 1...6 {
                var code: String?
                times.append(
                    try await clock.measure {
                        code = try await env.logIn(account.email, "guess \(attempt)", headers: .from("10.7.\(attempt).\(Int.random(in: 1...254))")).code
                    })
                #expect(code == "invalid_credentials", "attempt \(attempt)")
            }
            // Past two failures each attempt waits first: 250 ms, then 500, 1000, 2000 (lower bounds,
            // which a busy machine cannot break).
            #expect(times[2] >= .milliseconds(250) && times[3] >= .milliseconds(500) && times[4] >= .milliseconds(1000) && times[5] >= .milliseconds(2000), "\(times)")
            var ownerStatus: HTTPResponse.Status?
            let owner = try await clock.measure { ownerStatus = try await env.logIn(account.email, account.password, headers: .from("10.8.0.1")).status }
            #expect(ownerStatus == .ok && owner >= .milliseconds(4000), "\(owner)")
            // The owner's success starts the account's count over: without that the next attempt
            // would wait 8 s; it waits none (a margin no busy machine spends on one sign-in).
            let next = try await clock.measure { _ = try await env.logIn(account.email, "one more guess", headers: .from("10.8.0.2")) }
            #expect(next < .milliseconds(4000), "\(next)")
        }
    }

    @Test func theSlowdownDoublesFromItsThresholdUpToItsCap() throws {
        let throttle = LoginThrottle(
            redis: RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger),
            limits: .init(perAccountAndIP: 5, perIP: 20, slowAfter: 10, maxDelay: .seconds(5), window: .seconds(900)), logger: TestEnvironment.logger)
        #expect((0...9).allSatisfy { throttle.delay(afterFailures: $0) == nil })
        #expect([10, 11, 12, 13, 14, 15, 40].map { throttle.delay(afterFailures: $0) } == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(5), .seconds(5)])
    }

    /// With Redis stopped, each process counts in memory and enforces the same limits: an outage is
    /// not a window of unlimited guessing, and the owner at another address still signs in.
    @Test(.timeLimit(.minutes(2))) func throttlingHoldsWhileRedisIsAway() async throws {
        let redis = try RedisServer()
        try await redis.start()
        try await AuthTestEnvironment.run(["BCRYPT_COST": "4"], redis: redis.configuration) { env in
            let account = try await env.signUp()
            try await redis.stop()
            let guesser: HTTPFields = .from("10.9.9.\(Int.random(in: 1...254))")
            var codes: [String?] = []
            for attempt in 1...8 { codes.append(try await env.logIn(account.email, "guess \(attempt)", headers: guesser).code) }
            #expect(codes == Array(repeating: "invalid_credentials", count: 5) + Array(repeating: "too_many_attempts", count: 3), "\(codes)")
            #expect(try await env.logIn(account.email, account.password, headers: guesser).code == "too_many_attempts")
            #expect(try await env.logIn(account.email, account.password, headers: .from("10.9.10.1")).status == .ok)
        }
        try? await redis.stop()
    }

    /// The access token verifies with nothing but the published JWKS and textbook ES256 (RFC 7515
    /// §A.3), as any third-party JWT library would do it.
    @Test func accessTokensVerifyAgainstThePublishedJWKS() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let jwksReply = try await env.call(.get, "/.well-known/jwks.json")
            #expect(jwksReply.status == .ok)
            let keys = try #require(jwksReply.json["keys"] as? [[String: String]])
            let parts = account.accessToken.split(separator: ".").map(String.init)
            try #require(parts.count == 3)
            let header = try Self.segment(parts[0])
            #expect(header["alg"] as? String == "ES256")
            let jwk = try #require(keys.first { $0["kid"] == header["kid"] as? String })
            #expect(jwk["kty"] == "EC" && jwk["crv"] == "P-256")
            let x = try #require(Base64URL.decode(jwk["x"]!)), y = try #require(Base64URL.decode(jwk["y"]!))
            let publicKey = try P256.Signing.PublicKey(rawRepresentation: x + y)
            let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64URL.decode(parts[2])))
            #expect(publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8)))

            let claims = try Self.segment(parts[1])
            #expect(claims["sub"] as? String == account.id)
            #expect(claims["sid"] as? String == account.sessionID)
            #expect(claims["roles"] as? [String] == ["user"])
            #expect(claims["email_verified"] as? Bool == false)
            #expect(claims["iss"] as? String == env.config.tokens.issuer)
            let exp = try #require(claims["exp"] as? Double), iat = try #require(claims["iat"] as? Double)
            #expect(exp - iat == 900)
        }
    }

    /// Rotation: with `JWT_PREVIOUS_SIGNING_KEY` set, the JWKS publishes both keys, new tokens are
    /// signed with the current one, and a token the previous key signed before the switch still works.
    @Test func aRotatedKeyKeepsItsTokensValidUntilTheyExpire() async throws {
        let previous = ES256PrivateKey()
        let previousPEM = try P256.Signing.PrivateKey(pemRepresentation: previous.pemRepresentation).publicKey.pemRepresentation
        try await AuthTestEnvironment.run(["JWT_PREVIOUS_SIGNING_KEY": previousPEM, "JWT_PREVIOUS_SIGNING_KEY_ID": "test-key-0"]) { env in
            let keys = try #require(try await env.call(.get, "/.well-known/jwks.json").json["keys"] as? [[String: String]])
            #expect(Set(keys.compactMap { $0["kid"] }) == ["test-key-0", "test-key-1"])

            let account = try await env.signUp()
            let header = try Self.segment(String(account.accessToken.split(separator: ".")[0]))
            #expect(header["kid"] as? String == "test-key-1")

            let issuer = TestIssuer(issuer: env.config.tokens.issuer, audience: env.config.tokens.audience)
            let beforeTheSwitch = try await issuer.token(
                userID: UUID(uuidString: account.id)!, sessionID: UUID(uuidString: account.sessionID),
                key: .init(kid: "test-key-0", privateKey: previous))
            let me = try await env.call(.get, "/v1/auth/me", token: beforeTheSwitch)
            #expect(me.status == .ok && me.json["id"] as? String == account.id)
            // The previous kid with any other key is still a forgery.
            let forged = try await issuer.token(userID: UUID(uuidString: account.id)!, sessionID: UUID(uuidString: account.sessionID), key: .init(kid: "test-key-0"))
            #expect(try await env.call(.get, "/v1/auth/me", token: forged).code == "invalid_token")
        }
        // The previous key may not take the current key's id.
        let error = await #expect(throws: (any Error).self) {
            try await AuthTestEnvironment.run(["JWT_PREVIOUS_SIGNING_KEY": previousPEM, "JWT_PREVIOUS_SIGNING_KEY_ID": "test-key-1"]) { _ in }
        }
        #expect(String(describing: error).contains("JWT_PREVIOUS_SIGNING_KEY_ID must differ"))
    }

    static func segment(_ part: String) throws -> [String: Any] {
        let data = try #require(Base64URL.decode(part))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func tamperedExpiredAndForeignTokensAreRefused() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            var parts = account.accessToken.split(separator: ".").map(String.init)
            var claims = try Self.segment(parts[1])
            claims["roles"] = ["user", "admin"]
            parts[1] = Base64URL.encode(try JSONSerialization.data(withJSONObject: claims))
            let tampered = try await env.call(.get, "/v1/admin/users", token: parts.joined(separator: "."))
            #expect(tampered.status == .unauthorized)
            #expect(tampered.code == "invalid_token")

            // Signed by someone else's key with our kid, and by an unknown issuer.
            let stranger = TestIssuer(issuer: env.config.tokens.issuer, audience: env.config.tokens.audience)
            let forged = try await stranger.token(userID: UUID(uuidString: account.id)!, key: .init(kid: env.signingKey.kid))
            #expect(try await env.call(.get, "/v1/auth/me", token: forged).code == "invalid_token")
            let expired = try await env.token(for: account.id, sessionID: account.sessionID, expiresIn: -120, issuedAt: Date().addingTimeInterval(-1000))
            let expiredReply = try await env.call(.get, "/v1/auth/me", token: expired)
            #expect(expiredReply.status == .unauthorized)
            #expect(expiredReply.code == "token_expired")
            // The same key and claims, unexpired, pass: the refusals above are for the reasons named.
            #expect(try await env.call(.get, "/v1/auth/me", token: try await env.token(for: account.id, sessionID: account.sessionID)).status == .ok)
            let foreign = try await TestIssuer(issuer: "https://evil.test").token()
            #expect(try await env.call(.get, "/v1/auth/me", token: foreign).code == "invalid_token")

            #expect(try await env.call(.get, "/v1/auth/me").code == "unauthorized")
            #expect(try await env.call(.get, "/v1/auth/me", token: "not.a.token").code == "invalid_token")
        }
    }
}
