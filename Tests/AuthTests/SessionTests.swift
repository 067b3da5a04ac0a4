@testable import Auth
import Foundation
import HTTPTypes
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing
import TestSupport

@Suite struct SessionTests {
    /// Apps send their last access token with every request: once it has expired, refreshing (and
    /// signing in) must still work with it attached, while a route that needs a caller refuses it.
    @Test func anExpiredAccessTokenAttachedDoesNotStopARefreshOrASignIn() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let expired = try await env.token(for: account.id, sessionID: account.sessionID, expiresIn: 900, issuedAt: Date().addingTimeInterval(-3600))
            #expect(try await env.call(.get, "/v1/auth/me", token: expired).code == "token_expired")
            let refreshed = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken], token: expired)
            #expect(refreshed.status == .ok, "\(refreshed.text)")
            let login = try await env.call(.post, "/v1/auth/login", json: ["email": account.email, "password": account.password], token: "garbage")
            #expect(login.status == .ok, "\(login.text)")
            let fresh = try #require(refreshed.json["access_token"] as? String)
            #expect(try await env.call(.get, "/v1/auth/me", token: fresh).status == .ok)
        }
    }

    @Test func refreshRotatesAndAReusedTokenEndsTheSession() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let first = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken])
            #expect(first.status == .ok)
            let second = try #require(first.json["refresh_token"] as? String)
            #expect(second != account.refreshToken)
            #expect(first.json["session_id"] as? String == account.sessionID)

            let third = try #require(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": second]).json["refresh_token"] as? String)

            // The first token again, once what it was exchanged for was used: theft is assumed and the
            // whole session ends, the live token too.
            let reused = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken])
            #expect(reused.status == .unauthorized)
            #expect(reused.code == "refresh_token_reused")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": third]).code == "invalid_refresh_token")
            #expect(try await env.call(.get, "/v1/auth/me", token: account.accessToken).code == "session_revoked")

            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": "garbage"]).code == "invalid_refresh_token")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": 12]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", raw: "[]").status == .badRequest)
        }
    }

    /// A password change and an account's deletion check the password outside their transaction
    /// too. A reset committing in between (a new password, every session ended) wins: the change
    /// does not set the password the reset replaced, and the deletion does not happen.
    @Test(arguments: ["change", "delete"]) func aPasswordChangeOrDeletionRacingAResetComesToNothing(_ request: String) async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let answer = try await env.whileHeld(AuthTestEnvironment.reset(of: account.id)) {
                request == "change"
                    ? try await env.call(
                        .post, "/v1/auth/password/change", json: ["current_password": account.password, "password": "the holder's new horse"], token: account.accessToken)
                    : try await env.call(.delete, "/v1/auth/account", json: ["password": account.password], token: account.accessToken)
            }
            #expect(answer.status == .unauthorized && answer.code == "session_revoked", "\(answer.json)")
            let hash = try await env.query { client -> String? in
                let rows = try await client.query(PostgresQuery(unsafeSQL: "SELECT password_hash FROM users WHERE id = '\(account.id)'"), logger: TestEnvironment.logger)
                for try await hash in rows.decode(String?.self) { return hash }
                return nil
            }
            #expect(hash == "replaced by the reset", "the account stays, with the reset's password")
        }
    }

    /// A login checks the password outside its transaction (bcrypt is slow). A reset committing in
    /// between (the row locked, a new password, every session ended) must not be followed by a
    /// session made with the old password.
    @Test func aLoginRacingAPasswordResetMakesNoSessionAfterIt() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let login = try await env.whileHeld(AuthTestEnvironment.reset(of: account.id)) { try await env.logIn(account.email, account.password) }
            #expect(login.status == .unauthorized, "\(login.json)")
            #expect(login.code == "invalid_credentials")
            #expect(try await env.sessionCount(of: account.id) == 0)
        }
    }

    /// One token sent five times at once (a client retrying, or a thief racing it), with no grace:
    /// one rotation wins, the next finds the token spent and ends the session (the winner's token
    /// with it), and any later one finds nothing.
    @Test func concurrentUsesOfOneTokenRotateOnceAndEndTheSession() async throws {
        try await AuthTestEnvironment.run(["REFRESH_REUSE_GRACE_SECONDS": "0"]) { env in
            let account = try await env.signUp()
            let replies = try await Self.refreshAtOnce(env, account.refreshToken, times: 5)
            let rotated = replies.filter { $0.0 == .ok }
            #expect(rotated.count == 1, "\(replies)")
            #expect(replies.filter { $0.1 == "refresh_token_reused" }.count >= 1, "\(replies)")
            #expect(replies.allSatisfy { $0.0 == .ok || ($0.0 == .unauthorized && ["refresh_token_reused", "invalid_refresh_token"].contains($0.1 ?? "")) }, "\(replies)")
            let next = try #require(rotated.first?.2)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": next]).code == "invalid_refresh_token")
            #expect(try await env.count("SELECT count(*) FROM sessions") == 0)
        }
    }

    static func refreshAtOnce(_ env: AuthTestEnvironment, _ token: String, times: Int) async throws -> [(HTTPResponse.Status, String?, String?)] {
        try await withThrowingTaskGroup(of: (HTTPResponse.Status, String?, String?).self) { group in
            for _ in 0..<times {
                group.addTask {
                    let reply = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": token])
                    return (reply.status, reply.code, reply.json["refresh_token"] as? String)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    /// A refresh whose answer was lost on the way (a network handover, an app suspended mid-refresh):
    /// the client sends the spent token again, and within the grace, what it was exchanged for
    /// still unused, it gets new tokens instead of losing its session; the unused ones are spent.
    @Test func aRefreshWhoseAnswerWasLostIsAnsweredAgainWithinTheGrace() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let lost = try #require(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken]).json["refresh_token"] as? String)
            let again = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken])
            #expect(again.status == .ok, "\(again.text)")
            #expect(again.json["session_id"] as? String == account.sessionID)
            let kept = try #require(again.json["refresh_token"] as? String)
            #expect(kept != lost)
            let access = try #require(again.json["access_token"] as? String)
            #expect(try await env.call(.get, "/v1/auth/me", token: access).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM refresh_tokens WHERE used_at IS NULL") == 1, "one live token: the last issued")
            // The client goes on with what it got.
            let next = try #require(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": kept]).json["refresh_token"] as? String)
            // The lost answer's token, now that the session has moved on past it, is a thief's.
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": lost]).code == "refresh_token_reused")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": next]).code == "invalid_refresh_token")
            #expect(try await env.count("SELECT count(*) FROM sessions") == 0)
        }
    }

    /// Past the grace a spent token ends the session, though what it was exchanged for is unused.
    @Test func aSpentTokenPastTheGraceEndsTheSession() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let next = try #require(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken]).json["refresh_token"] as? String)
            // The exchange, 61 seconds ago.
            try await env.execute("UPDATE refresh_tokens SET used_at = used_at - interval '61 seconds', created_at = created_at - interval '61 seconds'")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken]).code == "refresh_token_reused")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": next]).code == "invalid_refresh_token")
        }
    }

    /// One token sent five times at once, within the grace: each is answered, the session keeps one
    /// live token (the last issued), and the tokens the others were given are spent: the first of
    /// them presented once the grace is over ends the session, as a thief's would.
    @Test func concurrentUsesOfOneTokenWithinTheGraceLeaveOneLiveToken() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let replies = try await Self.refreshAtOnce(env, account.refreshToken, times: 5)
            #expect(replies.allSatisfy { $0.0 == .ok }, "\(replies)")
            let issued = replies.compactMap(\.2)
            #expect(Set(issued).count == 5)
            #expect(try await env.count("SELECT count(*) FROM refresh_tokens WHERE used_at IS NULL") == 1)
            var live: [String] = []
            for token in issued where try await env.count("SELECT count(*) FROM refresh_tokens WHERE used_at IS NULL AND token_hash = sha256('\(token)'::bytea)") == 1 {
                live.append(token)
            }
            #expect(live.count == 1)
            let stale = try #require(issued.first { $0 != live.first })
            try await env.execute("UPDATE refresh_tokens SET used_at = used_at - interval '61 seconds', created_at = created_at - interval '61 seconds'")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": stale]).code == "refresh_token_reused")
            #expect(try await env.count("SELECT count(*) FROM sessions") == 0)
        }
    }

    /// A session being ended (here by hand, as a reused token or a logout ends it: the session's
    /// row, then its tokens by the cascade) while its current token is presented: the refresh waits
    /// for the session and then finds nothing. Locking the token first deadlocked with the cascade.
    @Test func aRefreshWaitingOnASessionBeingEndedDoesNotDeadlock() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let first = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken])
            let current = try #require(first.json["refresh_token"] as? String)
            try await env.query { client in
                try await client.withConnection { connection in
                    try await connection.query("BEGIN", logger: TestEnvironment.logger)
                    try await connection.query("SELECT 1 FROM sessions WHERE id = \(UUID(uuidString: account.sessionID)!) FOR UPDATE", logger: TestEnvironment.logger)
                    let refresh = Task { try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": current]) }
                    // The refresh is waiting on a lock before the session is ended.
                    try await waitUntil(.seconds(10)) {
                        try await env.query { other in
                            var waiting = 0
                            for try await count in try await other.query(
                                "SELECT count(*)::int FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()", logger: TestEnvironment.logger
                            ).decode(Int.self) { waiting = count }
                            return waiting > 0
                        }
                    }
                    try await connection.query("DELETE FROM sessions WHERE id = \(UUID(uuidString: account.sessionID)!)", logger: TestEnvironment.logger)
                    try await connection.query("COMMIT", logger: TestEnvironment.logger)
                    let reply = try await refresh.value
                    #expect(reply.status == .unauthorized && reply.code == "invalid_refresh_token", "\(reply.text)")
                }
            }
        }
    }

    @Test func sessionsSlideFor30DaysAndExpireAfterThat() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let expiresIn = try await env.query { client -> Double in
                let rows = try await client.query("SELECT extract(epoch FROM expires_at - now())::float8 FROM sessions", logger: TestEnvironment.logger)
                for try await value in rows.decode(Double.self) { return value }
                return 0
            }
            #expect(abs(expiresIn - 30 * 86_400) < 60)
            // Used again 28 days later, two days before the end: the refresh moves the end to 30 days
            // after this use.
            try await env.query { client in
                try await client.query("UPDATE sessions SET last_used_at = now() - interval '28 days', expires_at = now() + interval '2 days'", logger: TestEnvironment.logger)
            }
            let refreshed = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken])
            #expect(refreshed.status == .ok)
            let next = try #require(refreshed.json["refresh_token"] as? String)
            let (slid, lastUsedAgo) = try await env.query { client -> (Double, Double) in
                let rows = try await client.query(
                    "SELECT extract(epoch FROM expires_at - now())::float8, extract(epoch FROM now() - last_used_at)::float8 FROM sessions", logger: TestEnvironment.logger)
                for try await row in rows.decode((Double, Double).self) { return row }
                return (0, 0)
            }
            #expect(abs(slid - 30 * 86_400) < 60 && lastUsedAgo < 60, "expires in \(slid) s, last used \(lastUsedAgo) s ago")
            // Last used 31 days ago: the refresh is refused and the session is gone.
            try await env.query { client in
                try await client.query("UPDATE sessions SET expires_at = now() - interval '1 day'", logger: TestEnvironment.logger)
            }
            let expired = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": next])
            #expect(expired.code == "session_expired")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": next]).code == "invalid_refresh_token")
        }
    }

    @Test func listEndAndLogOutOfSessions() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let phone = try AuthTestEnvironment.account(
                try await env.logIn(account.email, account.password, headers: [.userAgent: "FoodApp/3.1 iPhone", HTTPField.Name("X-Forwarded-For")!: "10.0.0.42"]),
                email: account.email, password: account.password)
            let stranger = try await env.signUp()

            let list = try await env.call(.get, "/v1/auth/sessions", token: account.accessToken)
            #expect(list.status == .ok)
            let items = try #require(list.json["items"] as? [[String: Any]])
            #expect(items.count == 2)
            let current = try #require(items.first { $0["current"] as? Bool == true })
            #expect(current["id"] as? String == account.sessionID)
            let phoneSession = try #require(items.first { $0["id"] as? String == phone.sessionID })
            #expect(phoneSession["user_agent"] as? String == "FoodApp/3.1 iPhone")
            #expect(phoneSession["ip"] as? String == "10.0.0.42")
            #expect(phoneSession["created_at"] as? String != nil && phoneSession["last_used_at"] as? String != nil)

            // Another user's session id is not found, not ended.
            let foreign = try await env.call(.delete, "/v1/auth/sessions/\(phone.sessionID)", token: stranger.accessToken)
            #expect(foreign.status == .notFound)
            #expect(try await env.call(.get, "/v1/auth/me", token: phone.accessToken).status == .ok)
            #expect(try await env.call(.delete, "/v1/auth/sessions/not-a-uuid", token: account.accessToken).status == .notFound)

            #expect(try await env.call(.delete, "/v1/auth/sessions/\(phone.sessionID)", token: account.accessToken).status == .noContent)
            #expect(try await env.call(.get, "/v1/auth/me", token: phone.accessToken).code == "session_revoked")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": phone.refreshToken]).code == "invalid_refresh_token")

            // Logout (this session), then logout everywhere.
            let tablet = try AuthTestEnvironment.account(try await env.logIn(account.email, account.password), email: account.email, password: account.password)
            #expect(try await env.call(.post, "/v1/auth/logout", token: tablet.accessToken).status == .noContent)
            #expect(try await env.call(.get, "/v1/auth/me", token: tablet.accessToken).code == "session_revoked")
            #expect(try await env.call(.get, "/v1/auth/me", token: account.accessToken).status == .ok)
            let laptop = try AuthTestEnvironment.account(try await env.logIn(account.email, account.password), email: account.email, password: account.password)
            #expect(try await env.call(.post, "/v1/auth/logout", json: ["scope": "everything"], token: laptop.accessToken).status == .badRequest)
            #expect(try await env.call(.post, "/v1/auth/logout", json: ["scope": "all"], token: laptop.accessToken).status == .noContent)
            #expect(try await env.call(.get, "/v1/auth/me", token: account.accessToken).code == "session_revoked")
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken]).code == "invalid_refresh_token")
            // The stranger was not touched.
            #expect(try await env.call(.get, "/v1/auth/me", token: stranger.accessToken).status == .ok)
        }
    }

    /// Every way sessions end is announced on the user's live stream with the sessions it ended (and
    /// whether that was all of them): the gateway ends the event streams those sessions opened, and
    /// no other.
    @Test func everyWaySessionsEndIsAnnouncedLive() async throws {
        let boss = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": boss]) { env in
            let admin = try await AdminAndDeletionTests.verifiedAccount(env, email: boss)
            var account = try await AdminAndDeletionTests.verifiedAccount(env)
            let other = try await env.signUp()
            let session: @Sendable (String) async throws -> AuthTestEnvironment.Account = { [account] password in
                try AuthTestEnvironment.account(try await env.logIn(account.email, password), email: account.email, password: password)
            }
            var expected: [(sessions: Set<String>, all: Bool)] = []

            let phone = try await session(account.password)
            #expect(try await env.call(.delete, "/v1/auth/sessions/\(phone.sessionID)", token: account.accessToken).status == .noContent)
            expected.append(([phone.sessionID], false))

            let tablet = try await session(account.password)
            #expect(try await env.call(.post, "/v1/auth/logout", token: tablet.accessToken).status == .noContent)
            expected.append(([tablet.sessionID], false))

            let stolen = try await session(account.password)
            let rotated = try #require(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": stolen.refreshToken]).json["refresh_token"] as? String)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": rotated]).status == .ok)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": stolen.refreshToken]).code == "refresh_token_reused")
            expected.append(([stolen.sessionID], false))

            // A password change ends the other sessions, not the one that changed it.
            let laptop = try await session(account.password)
            let changed = try await env.call(
                .post, "/v1/auth/password/change", json: ["current_password": account.password, "password": "a newer horse battery"], token: account.accessToken)
            #expect(changed.status == .noContent, "\(changed.text)")
            account.password = "a newer horse battery"
            expected.append(([laptop.sessionID], false))

            let watch = try await session(account.password)
            #expect(try await env.call(.post, "/v1/auth/logout", json: ["scope": "all"], token: watch.accessToken).status == .noContent)
            expected.append(([account.sessionID, watch.sessionID], true))

            let kitchen = try await session(account.password)
            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": account.email]).status == .accepted)
            let resetMail = try await env.mails(to: account.email, count: 3).first { $0.contains("Subject: Reset your") }
            let resetToken = try AuthTestEnvironment.linkToken(in: try #require(resetMail))
            #expect(try await env.call(.post, "/v1/auth/password/reset", json: ["token": resetToken, "password": "the newest horse battery"]).status == .noContent)
            expected.append(([kitchen.sessionID], true))

            let car = try await session("the newest horse battery")
            #expect(try await env.call(.post, "/v1/admin/users/\(account.id)/disable", token: admin.accessToken).status == .ok)
            expected.append(([car.sessionID], true))

            let (user, count) = (account.id, expected.count)
            try await waitUntil(.seconds(10)) { try await env.sessionsEnded(for: user).count >= count }
            let announced = try await env.sessionsEnded(for: account.id)
            #expect(announced.map(\.sessions) == expected.map(\.sessions))
            #expect(announced.map(\.all) == expected.map(\.all))
            // Nothing of it reached anyone else's stream.
            #expect(try await env.sessionsEnded(for: other.id).isEmpty)
        }
    }

    @Test func meDescribesTheAccount() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp(name: "Chef Dee")
            let me = try await env.call(.get, "/v1/auth/me", token: account.accessToken)
            #expect(me.status == .ok)
            #expect(me.json["email"] as? String == account.email)
            #expect(me.json["display_name"] as? String == "Chef Dee")
            #expect(me.json["email_verified"] as? Bool == false)
            #expect(me.json["roles"] as? [String] == ["user"])
            #expect(me.json["providers"] as? [String] == [])
            #expect(me.json["has_password"] as? Bool == true)
            #expect(me.json["created_at"] as? String != nil)
            #expect(me.json["last_sign_in_at"] as? String != nil)
        }
    }
}
