@testable import Auth
import Foundation
import HTTPTypes
import ServiceKit
import ServiceKitCore
import ServiceKitRedis
import Testing
import TestSupport

/// When the mailbox's owner first proves the address by a password reset, what the account's maker
/// set goes as it does on a disowning verification, and the other services are told to drop theirs.
@Suite struct TakeoverCleanupTests {
    /// Other tests' failed sign-ins from this address count in the same Redis; the limits have tests
    /// of their own.
    static let settings = ["LOGIN_MAX_FAILURES_PER_IP": "100000", "LOGIN_SLOW_AFTER_FAILURES": "100000"]

    /// The maker signs up with the victim's address, chooses a name and takes the coach role; the
    /// victim, who never signed up, asks for a reset and sets a password: no name, no coach, and
    /// `user.password_changed` says `maker_dropped`.
    @Test func aResetOfANeverProvenAccountDropsWhatItsMakerSet() async throws {
        try await AuthTestEnvironment.run(Self.settings) { env in
            let victim = "\(TestEnvironment.uniqueName("victim"))@example.com"
            let maker = try await env.signUp(victim, password: "the maker's own password", name: "Totally The Owner")
            #expect(try await env.call(.post, "/v1/auth/roles/coach", token: maker.accessToken).status == .ok)

            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": victim]).status == .accepted)
            let mail = try #require(try await env.mails(to: victim, count: 2).first { $0.contains("Subject: Reset your") })
            let reset = try await env.call(.post, "/v1/auth/password/reset", json: ["token": try AuthTestEnvironment.linkToken(in: mail), "password": "the victim's own secret"])
            #expect(reset.status == .noContent, "\(reset.text)")

            let owner = try await env.logIn(victim, "the victim's own secret")
            #expect(owner.status == .ok, "\(owner.text)")
            #expect(owner.json[path: "user.id"] as? String == maker.id)
            #expect(owner.json[path: "user.email_verified"] as? Bool == true)
            #expect(owner.json[path: "user.display_name"] is NSNull || owner.json[path: "user.display_name"] == nil, "the maker's name went")
            #expect(owner.json[path: "user.roles"] as? [String] == ["user"], "the coach role the maker took went")
            let access = try #require(owner.json[path: "session.access_token"] as? String)
            #expect(try AdminAndDeletionTests.roles(in: access) == ["user"])

            let changed = try await Self.passwordChanged(env, of: maker.id)
            #expect(changed["method"] as? String == "reset")
            #expect(changed["maker_dropped"] as? Bool == true)
            try await waitUntil(.seconds(10)) {
                try await Self.envelopes(env, "user.roles_changed").contains {
                    ($0["data"] as? [String: Any])?["user_id"] as? String == maker.id && ($0["data"] as? [String: Any])?["removed"] as? [String] == ["coach"]
                }
            }
        }
    }

    /// A reset of an account whose address was already proven keeps its name and roles: its owner
    /// set them, and the other services keep what it made.
    @Test func aResetOfAProvenAccountKeepsItsNameAndRoles() async throws {
        try await AuthTestEnvironment.run(Self.settings) { env in
            let account = try await env.signUp(name: "Pat Owner")
            let verify = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: account.email).first))
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": verify], token: account.accessToken).status == .ok)
            #expect(try await env.call(.post, "/v1/auth/roles/coach", token: account.accessToken).status == .ok)

            #expect(try await env.call(.post, "/v1/auth/password/forgot", json: ["email": account.email]).status == .accepted)
            let mail = try #require(try await env.mails(to: account.email, count: 2).first { $0.contains("Subject: Reset your") })
            let reset = try await env.call(.post, "/v1/auth/password/reset", json: ["token": try AuthTestEnvironment.linkToken(in: mail), "password": "a brand new secret"])
            #expect(reset.status == .noContent, "\(reset.text)")

            let owner = try await env.logIn(account.email, "a brand new secret")
            #expect(owner.json[path: "user.display_name"] as? String == "Pat Owner")
            #expect(owner.json[path: "user.roles"] as? [String] == ["user", "coach"])
            let changed = try await Self.passwordChanged(env, of: account.id)
            #expect(changed["method"] as? String == "reset")
            #expect(changed["maker_dropped"] as? Bool == false)
        }
    }

    /// A disowning verification says `maker_dropped` too, beside `disowned`.
    @Test func aDisowningVerificationSaysMakerDropped() async throws {
        try await AuthTestEnvironment.run(Self.settings) { env in
            let victim = "\(TestEnvironment.uniqueName("victim"))@example.com"
            let maker = try await env.signUp(victim, password: "the maker's own password")
            let token = try AuthTestEnvironment.linkToken(in: try #require(try await env.mails(to: victim).first))
            #expect(try await env.call(.post, "/v1/auth/email/verify", json: ["token": token, "disown": true]).status == .ok)
            let changed = try await Self.passwordChanged(env, of: maker.id)
            #expect(changed["method"] as? String == "disowned")
            #expect(changed["maker_dropped"] as? Bool == true)
        }
    }

    static func envelopes(_ env: AuthTestEnvironment, _ type: String) async throws -> [[String: Any]] {
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        defer { Task { await redis.close() } }
        return try await EventStream(redis: redis, name: env.config.events.stream).envelopes(type)
    }

    /// The `data` of the account's one `user.password_changed`, once the relay has put it on the stream.
    static func passwordChanged(_ env: AuthTestEnvironment, of userID: String) async throws -> [String: Any] {
        let mine: @Sendable () async throws -> [[String: Any]] = {
            try await envelopes(env, "user.password_changed").compactMap { $0["data"] as? [String: Any] }.filter { $0["user_id"] as? String == userID }
        }
        try await waitUntil(.seconds(10)) { try await !mine().isEmpty }
        let found = try await mine()
        #expect(found.count == 1)
        return try #require(found.first)
    }
}
