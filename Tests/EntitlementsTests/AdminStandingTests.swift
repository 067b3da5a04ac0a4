import Foundation
import HTTPTypes
import Models
import Testing
import TestSupport

/// The admin routes check the caller's standing as auth's events last told it, not only the roles
/// in a token that lives on for 15 minutes; and a grant for a deleted account is refused.
@Suite struct AdminStandingTests {
    typealias Env = EntitlementsTestEnvironment

    /// Publishes `payload` about `user` as auth would, then waits until the service has handled it:
    /// a `user.registered` about the same user follows it (events about one user are handled in
    /// stream order) and its customer row is awaited.
    static func announce<Payload: EventPayload>(_ payload: Payload, about user: UUID, occurredAt: Date = Date(), in env: Env) async throws {
        let stream = EventStream(redis: env.redis, name: env.config.events.stream)
        try await stream.publish(payload, producer: "auth", userID: user, occurredAt: occurredAt)
        let marker = "\(TestEnvironment.uniqueName("marker"))@example.com"
        try await stream.publish(UserRegistered(userID: user, email: marker, displayName: nil, provider: "email"), producer: "auth", userID: user)
        try await waitUntil(.seconds(15)) {
            try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(user)' AND email_normalized = '\(marker)'") == 1
        }
    }

    static func grant(_ env: Env, to user: Env.User, as admin: Env.User) async throws -> APIReply {
        try await env.call(
            .post, "/v1/admin/entitlements/\(user.path)/grants", as: admin,
            json: ["tier": "pro", "until": ISO8601DateFormatter().string(from: env.clock.now() + 86_400), "reason": "support"])
    }

    @Test func aDemotedOrDisabledAdminIsRefusedAtOnceWithItsStillValidToken() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let admin = env.admin
            #expect(try await Self.grant(env, to: user, as: admin).status == .created)

            // auth takes admin away; the token still says admin for up to 15 minutes.
            try await Self.announce(UserRolesChanged(userID: admin.id, roles: [.user], added: [], removed: [.admin]), about: admin.id, in: env)
            let refused = try await Self.grant(env, to: user, as: admin)
            #expect(refused.status == .forbidden && refused.code == "forbidden", "\(refused.text)")
            #expect(try await env.call(.get, "/v1/admin/entitlements/\(user.path)/explain", as: admin).status == .forbidden)
            let revoke = try await env.call(.delete, "/v1/admin/entitlements/\(user.path)/grants/\(UUID().uuidString.lowercased())", as: admin)
            #expect(revoke.status == .forbidden, "\(revoke.text)")
            #expect(try await env.count("SELECT count(*) FROM grants WHERE user_id = '\(user.id)'") == 1)

            // An older event arriving late gives nothing back; a newer promotion does.
            try await Self.announce(
                UserRolesChanged(userID: admin.id, roles: [.user, .admin], added: [.admin], removed: []), about: admin.id, occurredAt: Date() - 3600, in: env)
            #expect(try await Self.grant(env, to: user, as: admin).status == .forbidden)
            try await Self.announce(UserRolesChanged(userID: admin.id, roles: [.user, .admin], added: [.admin], removed: []), about: admin.id, in: env)
            #expect(try await Self.grant(env, to: user, as: admin).status == .created)

            // Disabled: refused as auth refuses it.
            try await Self.announce(UserStatusChanged(userID: admin.id, disabled: true), about: admin.id, in: env)
            let disabled = try await Self.grant(env, to: user, as: admin)
            #expect(disabled.status == .forbidden && disabled.code == "account_disabled", "\(disabled.text)")

            // Another admin, whose standing no event has named, is taken at its token's word.
            let otherID = UUID()
            let other = Env.User(id: otherID, email: "other-admin@example.com", token: try await env.issuer.token(userID: otherID, roles: [.user, .admin]))
            #expect(try await Self.grant(env, to: user, as: other).status == .created)
        }
    }

    @Test func aGrantForADeletedAccountIsRefused() async throws {
        try await Env.run { env in
            let user = try await env.user()
            try await env.publish(UserDeleted(userID: user.id), userID: user.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(user.id)'") == 0 }
            let reply = try await Self.grant(env, to: user, as: env.admin)
            #expect(reply.status == .notFound && reply.code == "user_not_found", "\(reply.text)")
            #expect(try await env.count("SELECT count(*) FROM grants WHERE user_id = '\(user.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(user.id)'") == 0, "no customer made again")
            // Nor is it explained or its grants revoked: no such user, not the admin's own 401.
            let explained = try await env.call(.get, "/v1/admin/entitlements/\(user.path)/explain", as: env.admin)
            #expect(explained.status == .notFound && explained.code == "user_not_found", "\(explained.text)")
            let revoked = try await env.call(.delete, "/v1/admin/entitlements/\(user.path)/grants/\(UUID().uuidString.lowercased())", as: env.admin)
            #expect(revoked.status == .notFound && revoked.code == "user_not_found", "\(revoked.text)")
        }
    }

    /// An id that names no account (a typo) is no user: no grant, and no rows made for nobody.
    @Test func aGrantForAnIdNoAccountHasIsRefused() async throws {
        try await Env.run { env in
            let nobody = Env.User(id: UUID(), email: "nobody@example.com", token: "")
            let reply = try await Self.grant(env, to: nobody, as: env.admin)
            #expect(reply.status == .notFound && reply.code == "user_not_found", "\(reply.text)")
            let explained = try await env.call(.get, "/v1/admin/entitlements/\(nobody.path)/explain", as: env.admin)
            #expect(explained.status == .notFound && explained.code == "user_not_found", "\(explained.text)")
            let revoked = try await env.call(.delete, "/v1/admin/entitlements/\(nobody.path)/grants/\(UUID().uuidString.lowercased())", as: env.admin)
            #expect(revoked.status == .notFound && revoked.code == "user_not_found", "\(revoked.text)")
            #expect(try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(nobody.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM grants WHERE user_id = '\(nobody.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM entitlement_versions WHERE user_id = '\(nobody.id)'") == 0)
            // Still nobody after it.
            #expect(try await Self.grant(env, to: nobody, as: env.admin).code == "user_not_found")
        }
    }
}
