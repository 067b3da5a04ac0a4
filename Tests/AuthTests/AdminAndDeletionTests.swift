@testable import Auth
import Foundation
import HTTPTypes
import Models
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

@Suite struct AdminAndDeletionTests {
    /// Signs up `email`, follows the verification link, and refreshes: the returned access token
    /// carries what the account has now.
    static func verifiedAccount(_ env: AuthTestEnvironment, email: String = "\(TestEnvironment.uniqueName("v"))@example.com") async throws -> AuthTestEnvironment.Account {
        var account = try await env.signUp(email)
        let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: email).first))
        #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token], token: account.accessToken).status == .ok)
        let refreshed = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken])
        account.accessToken = try #require(refreshed.json["access_token"] as? String)
        account.refreshToken = try #require(refreshed.json["refresh_token"] as? String)
        return account
    }

    static func roles(in token: String) throws -> [String] {
        try SignupLoginTests.segment(String(token.split(separator: ".")[1]))["roles"] as? [String] ?? []
    }

    /// `auth create-admin EMAIL`, the real executable against the service's database: an unverified
    /// account is refused, a verified one gains the role, a new address becomes an admin who can sign
    /// in with `ADMIN_PASSWORD`, and running it again changes nothing.
    @Test func createAdminCommandMakesTheFirstAdmin() async throws {
        try await AuthTestEnvironment.run { env in
            let db = env.config.database
            func createAdmin(_ arguments: [String], password: String? = nil) async throws -> (status: Int32, output: String) {
                let output = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("create-admin")).path
                defer { try? FileManager.default.removeItem(atPath: output) }
                var environment = [
                    "PATH": "/usr/bin:/bin", "LOG_LEVEL": "error", "BCRYPT_COST": "4",
                    "DATABASE_URL": "postgres://\(db.user):\(db.password ?? "")@\(db.host):\(db.port)/\(db.database)",
                ]
                environment["ADMIN_PASSWORD"] = password
                let process = try ChildProcess(
                    [TestEnvironment.binDirectory.appendingPathComponent("auth").path, "create-admin"] + arguments,
                    environment: environment, outputPath: output)
                let status = try await process.wait(timeout: .seconds(60))
                return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
            }

            let unverified = try await env.signUp()
            let refused = try await createAdmin([unverified.email])
            #expect(refused.status == 1 && refused.output.contains("is not proven by mail"), "\(refused)")
            #expect(try await createAdmin(["not-an-address"]).status == 1)

            let verified = try await Self.verifiedAccount(env)
            let promoted = try await createAdmin([verified.email])
            #expect(promoted.status == 0 && promoted.output.contains("is now an admin"), "\(promoted)")
            let refreshed = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": verified.refreshToken])
            #expect(try Self.roles(in: try #require(refreshed.json["access_token"] as? String)) == ["user", "admin"])

            let email = "\(TestEnvironment.uniqueName("boss"))@example.com"
            #expect(try await createAdmin([email], password: "short").output.contains("ADMIN_PASSWORD"))
            let created = try await createAdmin([email], password: "the pantry boss password")
            #expect(created.status == 0 && created.output.contains("created admin \(email)") && !created.output.contains("the pantry boss password"), "\(created)")
            let login = try await env.logIn(email, "the pantry boss password")
            #expect(login.status == .ok)
            #expect(try Self.roles(in: try #require(login.json[path: "session.access_token"] as? String)) == ["user", "admin"])
            #expect(login.json[path: "user.email_verified"] as? Bool == true)
            let again = try await createAdmin([email])
            #expect(again.status == 0 && again.output.contains("is already an admin"), "\(again)")

            // Two admins: one may delete the account; the last one may not (nobody could administer).
            let bossToken = try #require(login.json[path: "session.access_token"] as? String)
            #expect(try await env.call(.delete, "/v1/auth/account", json: ["password": "the pantry boss password"], token: bossToken).status == .accepted)
            // The deleted admin's token still verifies for a while: a keyed request of it is refused
            // on the account's tombstone, and keeps nothing that names the account.
            let bossID = try #require(login.json[path: "user.id"] as? String)
            let boss = try #require(UUID(uuidString: bossID))
            let keyed = try await env.call(
                .post, "/v1/admin/users/\(verified.id)/disable", token: bossToken, headers: [HTTPField.Name("Idempotency-Key")!: "after-deletion"])
            #expect(keyed.status == .unauthorized && keyed.code == "account_deleted", "\(keyed.text)")
            let kept = try await env.query { client -> Int in
                let rows = try await client.query(
                    """
                    SELECT (SELECT count(*) FROM idempotency_keys WHERE user_id = \(boss))
                         + (SELECT count(*) FROM deleted_accounts WHERE user_hash = sha256(convert_to(\(boss.uuidString.lowercased()), 'UTF8'))) * 10
                    """, logger: TestEnvironment.logger)
                for try await count in rows.decode(Int.self) { return count }
                return -1
            }
            #expect(kept == 10, "the tombstone alone")
            let verifiedLogin = try await env.logIn(verified.email, verified.password)
            let verifiedToken = try #require(verifiedLogin.json[path: "session.access_token"] as? String)
            let lastOne = try await env.call(.delete, "/v1/auth/account", json: ["password": verified.password], token: verifiedToken)
            #expect(lastOne.status == .conflict && lastOne.code == "last_admin", "\(lastOne.text)")
            #expect(try await env.logIn(verified.email, verified.password).status == .ok)
        }
    }

    @Test func adminsComeFromConfigurationOnceTheirEmailIsVerifiedAndManageRoles() async throws {
        let adminEmail = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": "someone@else.test, \(adminEmail.uppercased())"]) { env in
            // Unverified, the configured address is not admin yet.
            let squatter = try await env.signUp(adminEmail)
            #expect(try Self.roles(in: squatter.accessToken) == ["user"])
            #expect(try await env.call(.get, "/v1/admin/users", token: squatter.accessToken).status == .forbidden)
            let admin = try await Self.verifiedAccount(env, email: "\(TestEnvironment.uniqueName("v2"))@example.com")
            #expect(try Self.roles(in: admin.accessToken) == ["user"])

            // A verified configured address becomes admin.
            let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: adminEmail).first))
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "password": squatter.password]).status == .ok)
            let boss = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": squatter.refreshToken])
            let bossToken = try #require(boss.json["access_token"] as? String)
            #expect(try Self.roles(in: bossToken) == ["user", "admin"])

            // Search and pagination.
            let cook = try await env.signUp("\(TestEnvironment.uniqueName("cook"))@example.com", name: "Pastry Chef")
            let page1 = try await env.call(.get, "/v1/admin/users?limit=2", token: bossToken)
            #expect(page1.status == .ok)
            #expect((page1.json["items"] as? [Any])?.count == 2)
            let cursor = try #require(page1.json["next_cursor"] as? String)
            let page2 = try await env.call(.get, "/v1/admin/users?limit=2&cursor=\(cursor)", token: bossToken)
            #expect((page2.json["items"] as? [Any])?.count == 1)
            #expect(page2.json["next_cursor"] is NSNull || page2.json["next_cursor"] == nil)
            let found = try await env.call(.get, "/v1/admin/users?query=pastry", token: bossToken)
            #expect((found.json["items"] as? [[String: Any]])?.first?["id"] as? String == cook.id)
            // Letters outside ASCII in any case, whatever the database's locale (the tests' is C).
            let chef = try await env.signUp("\(TestEnvironment.uniqueName("chef"))@example.com", name: "Émile Pâtissier")
            let accented = try await env.call(.get, "/v1/admin/users?query=%C3%A9mile%20p%C3%82t", token: bossToken)
            #expect((accented.json["items"] as? [[String: Any]])?.first?["id"] as? String == chef.id, "\(accented.text)")
            #expect(try await env.call(.get, "/v1/admin/users?cursor=bogus", token: bossToken).code == "invalid_cursor")
            // A cursor is client input: a well-formed one naming a date no timestamp holds (it stopped
            // the process once, overflowing on the way to PostgreSQL) is refused like any other.
            for hostile in [
                #"{"c":1e300,"i":"00000000-0000-0000-0000-000000000000"}"#, #"{"c":-1e19,"i":"00000000-0000-0000-0000-000000000000"}"#,
                #"{"c":"x","i":"00000000-0000-0000-0000-000000000000"}"#, String(repeating: "[", count: 5000),
            ] {
                let cursor = Data(hostile.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
                let reply = try await env.call(.get, "/v1/admin/users?cursor=\(cursor)", token: bossToken)
                #expect(reply.status == .badRequest && reply.code == "invalid_cursor", "\(hostile.prefix(40)): \(reply.status)")
            }
            var generator = SeededRandom("adminUserListRandomCursors")
            for _ in 0..<200 {
                let length = Int.random(in: 1...60, using: &generator)
                let cursor = String((0..<length).map { _ in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".randomElement(using: &generator)! })
                let reply = try await env.call(.get, "/v1/admin/users?cursor=\(cursor)", token: bossToken)
                #expect(reply.status == .badRequest || reply.status == .ok, "\(cursor): \(reply.status)")
            }
            #expect(try await env.call(.get, "/v1/admin/users?limit=1000", token: bossToken).status == .badRequest)
            // A NUL reaches PostgreSQL, which cannot hold it in text: a 400, never a 500.
            #expect(try await env.call(.get, "/v1/admin/users?query=pa%00stry", token: bossToken).code == "invalid_text")

            // Roles: grant, conflict, revoke, and the token learns at the next refresh.
            #expect(try await env.call(.post, "/v1/admin/users/\(cook.id)/roles/creator", token: admin.accessToken).status == .forbidden)
            let granted = try await env.call(.post, "/v1/admin/users/\(cook.id)/roles/coach", token: bossToken)
            #expect(granted.json["roles"] as? [String] == ["user", "coach"])
            let conflict = try await env.call(.post, "/v1/admin/users/\(cook.id)/roles/client", token: bossToken)
            #expect(conflict.status == .conflict)
            #expect(conflict.code == "role_conflict")
            #expect(try await env.call(.post, "/v1/admin/users/\(cook.id)/roles/wizard", token: bossToken).code == "invalid_role")
            #expect(try await env.call(.delete, "/v1/admin/users/\(cook.id)/roles/user", token: bossToken).code == "invalid_role")
            #expect(try await env.call(.post, "/v1/admin/users/\(UUID())/roles/creator", token: bossToken).status == .notFound)
            let cookRefresh = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": cook.refreshToken])
            #expect(try Self.roles(in: try #require(cookRefresh.json["access_token"] as? String)) == ["user", "coach"])
            let revoked = try await env.call(.delete, "/v1/admin/users/\(cook.id)/roles/coach", token: bossToken)
            #expect(revoked.json["roles"] as? [String] == ["user"])
            #expect(try await env.call(.delete, "/v1/admin/users/\(squatter.id)/roles/admin", token: bossToken).code == "cannot_change_self")
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: cook.id).filter { $0 == "user.roles_changed" }.count == 2 }
        }
    }

    /// Admin rights are checked against the account as it is now, not the roles in the token.
    @Test func aDemotedAdminsTokenNoLongerAdministers() async throws {
        let first = "\(TestEnvironment.uniqueName("boss"))@example.com", second = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": "\(first),\(second)"]) { env in
            let a = try await Self.verifiedAccount(env, email: first)
            let b = try await Self.verifiedAccount(env, email: second)
            #expect(try Self.roles(in: a.accessToken) == ["user", "admin"])
            #expect(try await env.call(.get, "/v1/admin/users", token: a.accessToken).status == .ok)
            #expect(try await env.call(.delete, "/v1/admin/users/\(a.id)/roles/admin", token: b.accessToken).status == .ok)
            // a's token still says admin, for a few minutes; it no longer works, not even on itself.
            #expect(try await env.call(.get, "/v1/admin/users", token: a.accessToken).status == .forbidden)
            #expect(try await env.call(.post, "/v1/admin/users/\(a.id)/roles/admin", token: a.accessToken).status == .forbidden)
            #expect(try await env.call(.post, "/v1/admin/users/\(b.id)/disable", token: a.accessToken).status == .forbidden)
            #expect(try await env.call(.post, "/v1/admin/users/\(b.id)/enable", token: b.accessToken).code == "cannot_change_self")
            // ADMIN_EMAILS granted the role once: a's next refresh and sign-in do not give it back.
            let refreshed = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": a.refreshToken])
            #expect(try Self.roles(in: try #require(refreshed.json["access_token"] as? String)) == ["user"])
            let signedIn = try await env.logIn(a.email, a.password)
            #expect(try Self.roles(in: try #require(signedIn.json[path: "session.access_token"] as? String)) == ["user"])
            // An admin can still give it back by hand.
            #expect(try await env.call(.post, "/v1/admin/users/\(a.id)/roles/admin", token: b.accessToken).status == .ok)
        }
        // Made admin by hand before ADMIN_EMAILS could (the address not yet verified), then demoted:
        // verifying the address later does not bring the role back either.
        let third = "\(TestEnvironment.uniqueName("boss"))@example.com", fourth = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": "\(fourth),\(third)"]) { env in
            let boss = try await Self.verifiedAccount(env, email: fourth)
            let early = try await env.signUp(third)
            #expect(try await env.call(.post, "/v1/admin/users/\(early.id)/roles/admin", token: boss.accessToken).status == .ok)
            #expect(try await env.call(.delete, "/v1/admin/users/\(early.id)/roles/admin", token: boss.accessToken).status == .ok)
            let verify = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: third).first))
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": verify], token: early.accessToken).status == .ok)
            let refreshed = try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": early.refreshToken])
            #expect(try Self.roles(in: try #require(refreshed.json["access_token"] as? String)) == ["user"])
        }
    }

    /// An address `ADMIN_EMAILS` lists once it was proven (the list changed since) is made admin at
    /// its next refresh or sign-in, once however many race for it: one `user.roles_changed`, and every
    /// racing refresh's token carries the role, the ones that waited for the winner's grant too.
    @Test func racingRefreshesGrantAConfiguredAdminOnce() async throws {
        let boss = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": boss]) { env in
            let port = try #require(env.client.port)
            let account = try await Self.verifiedAccount(env, email: boss)
            // Six devices signed in.
            var refreshTokens: [String] = []
            for _ in 0..<6 {
                let reply = try await env.logIn(boss, account.password)
                refreshTokens.append(try AuthTestEnvironment.account(reply, email: boss, password: account.password).refreshToken)
            }
            // As if the address was listed after it was proven: no grant made yet, the role not held.
            try await env.execute("DELETE FROM configured_admin_grants WHERE user_id = '\(account.id)'")
            try await env.execute("UPDATE users SET roles = ARRAY['user'] WHERE id = '\(account.id)'")
            // The account's `user.roles_changed` events on the stream, each once (a batch the relay sent
            // again counts once), once the outbox holds none: the relay sends a batch before it
            // commits taking it out.
            @Sendable func rolesChanged() async throws -> Int {
                try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM outbox WHERE type = 'user.roles_changed'") == 0 }
                let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
                defer { Task { await redis.close() } }
                let entries = try await redis.xrange(env.config.events.stream, count: 10_000)
                return Set(
                    entries.compactMap { entry in
                        entry.fields["type"] == "user.roles_changed" && entry.fields["envelope"]?.contains(account.id.lowercased()) == true ? entry.fields["id"] : nil
                    }
                ).count
            }
            let before = try await rolesChanged()
            let replies = try await withThrowingTaskGroup(of: ConcurrentClient.Reply.self) { group in
                for refreshToken in refreshTokens {
                    group.addTask { try await ConcurrentClient.send(port: port, "POST", "/v1/auth/token/refresh", json: ["refresh_token": refreshToken]) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.map(\.status) == Array(repeating: 200, count: 6), "\(replies.map(\.status))")
            for reply in replies {
                #expect(try Self.roles(in: try #require(reply.json["access_token"] as? String)) == ["user", "admin"])
            }
            #expect(try await env.count("SELECT count(*) FROM configured_admin_grants WHERE user_id = '\(account.id)'") == 1)
            #expect(try await rolesChanged() == before + 1)
        }
    }

    /// Two admins taking each other's rights at the same moment: one wins, and the other is no
    /// longer an admin when its turn comes, so an admin is always left. Disabling works the same way.
    @Test func twoAdminsDemotingEachOtherAtOnceLeaveOne() async throws {
        let first = "\(TestEnvironment.uniqueName("boss"))@example.com", second = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": "\(first),\(second)"]) { env in
            let port = try #require(env.client.port)
            /// Each of the pair calls `method path` on the other at once; the statuses, and who can still administer.
            func race(_ pair: [AuthTestEnvironment.Account], _ method: String, _ action: String) async throws -> ([Int], [AuthTestEnvironment.Account]) {
                let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                    for (caller, target) in [(pair[0], pair[1]), (pair[1], pair[0])] {
                        group.addTask {
                            try await ConcurrentClient.send(
                                port: port, method, "/v1/admin/users/\(target.id)/\(action)",
                                headers: [("Authorization", "Bearer \(caller.accessToken)")]
                            ).status
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                var admins: [AuthTestEnvironment.Account] = []
                for account in pair where try await env.call(.get, "/v1/admin/users", token: account.accessToken).status == .ok { admins.append(account) }
                return (statuses.sorted(), admins)
            }
            let a = try await Self.verifiedAccount(env, email: first)
            let b = try await Self.verifiedAccount(env, email: second)
            let (demotions, left) = try await race([a, b], "DELETE", "roles/admin")
            #expect(demotions == [200, 403])
            let survivor = try #require(left.count == 1 ? left.first : nil)
            // The survivor makes a third admin; the two disable each other at once.
            var c = try await Self.verifiedAccount(env)
            #expect(try await env.call(.post, "/v1/admin/users/\(c.id)/roles/admin", token: survivor.accessToken).status == .ok)
            c.accessToken = try #require(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": c.refreshToken]).json["access_token"] as? String)
            let (disables, remaining) = try await race([survivor, c], "POST", "disable")
            // The loser is refused as no longer an admin (403), or as signed out by the disabling (401).
            #expect(disables.first == 200 && [401, 403].contains(disables.last ?? 0), "\(disables)")
            #expect(remaining.count == 1)
        }
    }

    /// An admin demoted, or disabled, while its grant or its enabling waits behind the changes
    /// before it, changes nothing: every change to roles or to whether an account may sign in checks
    /// its caller again under one lock, not only the changes that take rights away.
    @Test func anAdminDemotedWhileItsChangeWaitsChangesNothing() async throws {
        let first = "\(TestEnvironment.uniqueName("boss"))@example.com", second = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": "\(first),\(second)"]) { env in
            let a = try await Self.verifiedAccount(env, email: first)
            let b = try await Self.verifiedAccount(env, email: second)
            let c = try await Self.verifiedAccount(env)
            let adminChanges = "SELECT pg_advisory_xact_lock(hashtext('auth.admin-changes'))"
            let grant = try await env.whileHeld([adminChanges, "UPDATE users SET roles = array_remove(roles, 'admin') WHERE id = '\(a.id)'"]) {
                try await env.call(.post, "/v1/admin/users/\(c.id)/roles/admin", token: a.accessToken)
            }
            #expect(grant.status == .forbidden, "\(grant.text)")
            #expect(try await env.count("SELECT count(*) FROM users WHERE id = '\(c.id)' AND roles @> ARRAY['admin']") == 0)
            #expect(try await env.call(.post, "/v1/admin/users/\(c.id)/disable", token: b.accessToken).status == .ok)
            let enable = try await env.whileHeld([adminChanges, "UPDATE users SET disabled_at = now() WHERE id = '\(b.id)'"]) {
                try await env.call(.post, "/v1/admin/users/\(c.id)/enable", token: b.accessToken)
            }
            #expect(enable.status == .forbidden, "\(enable.text)")
            #expect(try await env.count("SELECT count(*) FROM users WHERE id = '\(c.id)' AND disabled_at IS NOT NULL") == 1)
        }
    }

    @Test func disablingEndsSessionsAndRefusesSignInUntilEnabled() async throws {
        let adminEmail = "\(TestEnvironment.uniqueName("boss"))@example.com"
        try await AuthTestEnvironment.run(["ADMIN_EMAILS": adminEmail]) { env in
            let boss = try await Self.verifiedAccount(env, email: adminEmail)
            let user = try await env.signUp()
            let disabled = try await env.call(.post, "/v1/admin/users/\(user.id)/disable", token: boss.accessToken)
            #expect(disabled.status == .ok)
            #expect(disabled.json["disabled"] as? Bool == true)
            #expect(try await env.call(.get, "/v1/auth/me", token: user.accessToken).status == .unauthorized)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": user.refreshToken]).status == .unauthorized)
            let refused = try await env.logIn(user.email, user.password)
            #expect(refused.status == .forbidden)
            #expect(refused.code == "account_disabled")
            // A wrong password still says only invalid_credentials.
            #expect(try await env.logIn(user.email, "wrong password here").code == "invalid_credentials")
            #expect(try await env.call(.post, "/v1/admin/users/\(boss.id)/disable", token: boss.accessToken).code == "cannot_change_self")

            #expect(try await env.call(.post, "/v1/admin/users/\(user.id)/enable", token: boss.accessToken).json["disabled"] as? Bool == false)
            #expect(try await env.logIn(user.email, user.password).status == .ok)
        }
    }

    /// An event on the stream as the invitations service's relay puts it there.
    static func publish<Payload: EventPayload>(_ env: AuthTestEnvironment, _ payload: Payload, userID: UUID, occurredAt: Date) async throws {
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        try await EventStream(redis: redis, name: env.config.events.stream).publish(payload, producer: "invitations", userID: userID, occurredAt: occurredAt)
        await redis.close()
    }

    @Test func coachIsSelfServeByDefaultAndAClientsRoleFollowsTheirCoachLinks() async throws {
        try await AuthTestEnvironment.run { env in
            let coach = try await env.signUp()
            let became = try await env.call(.post, "/v1/auth/roles/coach", token: coach.accessToken)
            #expect(became.status == .ok)
            #expect(became.json["roles"] as? [String] == ["user", "coach"])

            // invitation.accepted, as the invitations service would emit it, reaches auth's consumer.
            let client = try await env.signUp()
            let clientID = UUID(uuidString: client.id)!, coachID = UUID(uuidString: coach.id)!
            let now = Date()
            try await Self.publish(env, InvitationAccepted(invitationID: UUID(), coachID: coachID, clientID: clientID), userID: clientID, occurredAt: now)
            try await waitUntil(.seconds(10)) {
                try await env.call(.get, "/v1/auth/me", token: client.accessToken).json["roles"] as? [String] == ["user", "client"]
            }
            // A client cannot become a coach.
            #expect(try await env.call(.post, "/v1/auth/roles/coach", token: client.accessToken).code == "role_conflict")

            // An unlink from before that acceptance, delivered late, changes nothing; a switch keeps
            // the role; leaving the last coach takes it away.
            try await Self.publish(env, ClientUnlinked(coachID: UUID(), clientID: clientID, reason: .left, hasOtherCoach: false), userID: clientID, occurredAt: now - 60)
            try await Self.publish(env, ClientUnlinked(coachID: coachID, clientID: clientID, reason: .switched, hasOtherCoach: true), userID: clientID, occurredAt: now + 1)
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: client.id).filter { $0 == "client.unlinked" }.count == 2 }
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await env.call(.get, "/v1/auth/me", token: client.accessToken).json["roles"] as? [String] == ["user", "client"])
            try await Self.publish(env, ClientUnlinked(coachID: coachID, clientID: clientID, reason: .left, hasOtherCoach: false), userID: clientID, occurredAt: now + 2)
            try await waitUntil(.seconds(10)) {
                try await env.call(.get, "/v1/auth/me", token: client.accessToken).json["roles"] as? [String] == ["user"]
            }
        }
        try await AuthTestEnvironment.run(["COACH_SELF_SERVE": "false"]) { env in
            let user = try await env.signUp()
            #expect(try await env.call(.post, "/v1/auth/roles/coach", token: user.accessToken).status == .forbidden)
        }
    }

    /// A client who accepted and then left, whose acceptance is handled after the unlink (the other
    /// process took it first, or a failed try was retried): the late acceptance gives no role back;
    /// a later one does.
    @Test func anAcceptanceHandledAfterTheClientLeftGivesNoRoleBack() async throws {
        try await AuthTestEnvironment.run { env in
            let coach = try await env.signUp()
            let client = try await env.signUp()
            let clientID = UUID(uuidString: client.id)!, coachID = UUID(uuidString: coach.id)!
            let now = Date()
            try await Self.publish(env, ClientUnlinked(coachID: coachID, clientID: clientID, reason: .left, hasOtherCoach: false), userID: clientID, occurredAt: now)
            try await Self.publish(env, InvitationAccepted(invitationID: UUID(), coachID: coachID, clientID: clientID), userID: clientID, occurredAt: now - 1)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'invitation.accepted'") == 1 }
            #expect(try await env.call(.get, "/v1/auth/me", token: client.accessToken).json["roles"] as? [String] == ["user"])
            try await Self.publish(env, InvitationAccepted(invitationID: UUID(), coachID: coachID, clientID: clientID), userID: clientID, occurredAt: now + 1)
            try await waitUntil(.seconds(10)) {
                try await env.call(.get, "/v1/auth/me", token: client.accessToken).json["roles"] as? [String] == ["user", "client"]
            }
        }
    }

    /// An unlink for a reason this release does not know (a newer invitations added it) is still
    /// an unlink: it decodes, and the role goes as for any other reason.
    @Test func anUnlinkForAReasonAddedLaterStillTakesTheClientRoleAway() async throws {
        try await AuthTestEnvironment.run { env in
            let coach = try await env.signUp()
            let client = try await env.signUp()
            let clientID = UUID(uuidString: client.id)!, coachID = UUID(uuidString: coach.id)!
            let now = Date()
            try await Self.publish(env, InvitationAccepted(invitationID: UUID(), coachID: coachID, clientID: clientID), userID: clientID, occurredAt: now)
            try await waitUntil(.seconds(10)) {
                try await env.call(.get, "/v1/auth/me", token: client.accessToken).json["roles"] as? [String] == ["user", "client"]
            }
            let merged = ClientUnlinked.Reason(rawValue: "coach_merged")
            #expect(merged == .unknown("coach_merged"))
            try await Self.publish(env, ClientUnlinked(coachID: coachID, clientID: clientID, reason: merged, hasOtherCoach: false), userID: clientID, occurredAt: now + 1)
            try await waitUntil(.seconds(10)) {
                try await env.call(.get, "/v1/auth/me", token: client.accessToken).json["roles"] as? [String] == ["user"]
            }
        }
    }

    /// Signing up with someone's address and deleting the account again and again mails the address
    /// at most five times an hour: past that the account is made without a mail, and asking for one
    /// again is `429`.
    @Test func signingUpAndDeletingAgainMailsTheAddressFiveTimesAnHour() async throws {
        try await AuthTestEnvironment.run { env in
            let address = "\(TestEnvironment.uniqueName("flooded"))@example.com"
            var last: AuthTestEnvironment.Account?
            for round in 1...6 {
                let account = try await env.signUp(address)
                last = account
                guard round < 6 else { break }
                let deleted = try await env.call(.delete, "/v1/auth/account", json: ["password": account.password], token: account.accessToken)
                #expect(deleted.status == .accepted, "\(deleted.text)")
            }
            let account = try #require(last)
            #expect(try await env.count("SELECT count(*) FROM email_tokens WHERE user_id = '\(account.id)'") == 0, "no link made for the sixth")
            #expect(try await env.mails(to: address, count: 5).count == 5)
            let again = try await env.call(.post, "/v1/auth/email/verify/resend", token: account.accessToken)
            #expect(again.status == .tooManyRequests && again.code == "rate_limited", "\(again.text)")
            #expect(try await env.count("SELECT count(*) FROM email_tokens WHERE user_id = '\(account.id)'") == 0)
        }
    }

    @Test func deletingAnAccountRemovesEverythingAndFreesTheEmail() async throws {
        try await AuthTestEnvironment.run { env in
            let account = try await env.signUp()
            let other = try await env.signUp()
            // Its verification mail has gone out (and the row of it is kept, without its body).
            _ = try #require(try await env.mails(to: account.email).first)
            #expect(try await env.call(.delete, "/v1/auth/account", token: account.accessToken).status == .badRequest)
            let wrong = try await env.call(.delete, "/v1/auth/account", json: ["password": "not mine at all"], token: account.accessToken)
            #expect(wrong.status == .forbidden)
            let deleted = try await env.call(.delete, "/v1/auth/account", json: ["password": account.password], token: account.accessToken)
            #expect(deleted.status == .accepted)

            let left = try await env.query { client -> Int in
                let rows = try await client.query(
                    """
                    SELECT (SELECT count(*) FROM users WHERE id = \(UUID(uuidString: account.id)!))
                         + (SELECT count(*) FROM sessions WHERE user_id = \(UUID(uuidString: account.id)!))
                         + (SELECT count(*) FROM email_tokens WHERE user_id = \(UUID(uuidString: account.id)!))
                         + (SELECT count(*) FROM identities WHERE user_id = \(UUID(uuidString: account.id)!))
                         + (SELECT count(*) FROM mail_outbox WHERE lower(recipient) = lower(\(account.email)))
                    """, logger: TestEnvironment.logger)
                for try await count in rows.decode(Int.self) { return count }
                return -1
            }
            #expect(left == 0)
            #expect(try await env.call(.get, "/v1/auth/me", token: account.accessToken).status == .unauthorized)
            #expect(try await env.call(.post, "/v1/auth/token/refresh", json: ["refresh_token": account.refreshToken]).status == .unauthorized)
            #expect(try await env.logIn(account.email, account.password).code == "invalid_credentials")
            try await waitUntil(.seconds(10)) { try await env.eventTypes(for: account.id).contains("user.deleted") }
            // The address is free again; the other account is untouched.
            _ = try await env.signUp(account.email)
            #expect(try await env.call(.get, "/v1/auth/me", token: other.accessToken).status == .ok)
        }
    }

    @Test func aProviderOnlyAccountIsDeletedAfterARecentSignIn() async throws {
        try await AuthTestEnvironment.run { env in
            let (subject, email) = ("apple-\(UUID())", "\(TestEnvironment.uniqueName("a"))@privaterelay.appleid.com")
            let nonce = try await env.nonce()
            let firstSignIn: [String: Any] = ["id_token": try env.idToken(.apple, nonce: nonce, subject: subject, email: email), "nonce": nonce]
            let account = try AuthTestEnvironment.account(try await env.call(.post, "/v1/auth/apple", json: firstSignIn), email: "", password: "")
            // A session started long ago is not enough.
            try await env.query { client in
                try await client.query("UPDATE sessions SET created_at = now() - interval '10 minutes'", logger: TestEnvironment.logger)
            }
            let stale = try await env.call(.delete, "/v1/auth/account", token: account.accessToken)
            #expect(stale.status == .forbidden)
            #expect(stale.code == "reauthentication_required")
            // The first sign-in sent again (its token has not expired) is no sign-in: its nonce is spent.
            let replayed = try await env.call(.post, "/v1/auth/apple", json: firstSignIn)
            #expect(replayed.status == .unauthorized && replayed.code == "invalid_nonce", "\(replayed.text)")
            let fresh = try AuthTestEnvironment.account(try await env.signIn(with: .apple, subject: subject, email: email), email: "", password: "")
            #expect(try await env.call(.delete, "/v1/auth/account", token: fresh.accessToken).status == .accepted)
            // Signing in with the same Apple id again makes a new account.
            let again = try await env.signIn(with: .apple, subject: subject, email: email)
            #expect(again.json["created"] as? Bool == true)
        }
    }
}
