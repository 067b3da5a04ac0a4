import Foundation
import HTTPTypes
import Models
import ServiceKitCore
@testable import Social
import Testing
import TestSupport

/// `user.password_changed` as auth wrote it before `maker_dropped` existed: a consumer reads the
/// rule from `disowned` alone.
struct LegacyPasswordChanged: EventPayload {
    static let eventType = "user.password_changed"
    var userID: UUID
    var method: String
    enum CodingKeys: String, CodingKey { case userID = "user_id", method }
}

/// When the mailbox's owner first proves the address (`maker_dropped`), the profile and graph the
/// account's maker set up go, whether the proof was a reset or a disowning verification.
@Suite struct TakeoverCleanupTests {
    /// The maker names the profile, follows, is followed, blocks and mutes; the victim resets: a
    /// blank profile, no follows, none of the maker's blocks or mutes, and the others' counts are
    /// right. What others decided about the account stays: their blocks and mutes of it, and the
    /// moderators' hiding and warnings (a spammer who never proved its own address would otherwise
    /// shed them with a reset).
    /// The takeover handled before the account's registration (the registration's handler failed
    /// once and waits for its retry, or the other process holds it): the maker's name does not come
    /// back with the registration.
    @Test func aRegistrationHandledAfterTheTakeoverBringsBackNoName() async throws {
        try await SocialTestEnvironment.run { env in
            let id = UUID()
            let registeredAt = Date().addingTimeInterval(-60)
            try await env.publish(UserPasswordChanged(userID: id, method: .disowned, makerDropped: true), userID: id, sequence: 2)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(id)'") == 1 }
            let registered = UserRegistered(userID: id, email: "\(id)@example.com", displayName: "Totally The Owner", provider: "email")
            try await env.publish(registered, userID: id, occurredAt: registeredAt, sequence: 1)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'user.registered'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(id)' AND display_name IS NULL") == 1)
            // In order, the registration's name is kept.
            let other = UUID()
            try await env.publish(UserRegistered(userID: other, email: "\(other)@example.com", displayName: "Sam", provider: "email"), userID: other, sequence: 3)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(other)' AND display_name = 'Sam'") == 1 }
        }
    }

    @Test func aFirstProofByResetDropsTheMakersProfileAndGraph() async throws {
        try await SocialTestEnvironment.run { env in
            let maker = try await env.user("Totally The Owner")
            let friend = try await env.user()
            let rival = try await env.user()
            #expect(try await env.call(.patch, "/v1/profiles/me", as: maker, json: ["username": "owner\(Int.random(in: 1000...9999))", "bio": "mine now"]).status == .ok)
            _ = try await env.follow(friend, as: maker)
            _ = try await env.follow(maker, as: friend)
            #expect(try await env.call(.post, "/v1/profiles/\(rival.path)/block", as: maker, headers: [HTTPField.Name("Idempotency-Key")!: "maker-1"]).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(maker.id)'") == 1)
            #expect(try await env.profile(friend, as: friend).json["followers_count"] as? Int == 1)
            let victim = try await env.user()
            #expect(try await env.call(.post, "/v1/profiles/\(maker.path)/block", as: victim).status == .ok)
            #expect(try await env.call(.post, "/v1/profiles/\(maker.path)/mute", as: friend).status == .ok)
            let moderator = try await env.user(roles: [.user, .moderator])
            #expect(try await env.call(.post, "/v1/moderation/users/\(maker.path)/warnings", as: moderator, json: ["reason": "spam"]).status == .created)
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(maker.path)/hide", as: moderator).status == .ok)

            try await env.publish(UserPasswordChanged(userID: maker.id, method: .reset, makerDropped: true), userID: maker.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM follows WHERE follower_id = '\(maker.id)' OR followee_id = '\(maker.id)'") == 0 }
            let profile = try await env.call(.get, "/v1/profiles/me", as: maker)
            #expect(profile.status == .ok)
            #expect(profile.json["username"] is NSNull && profile.json["display_name"] is NSNull, "\(profile.text)")
            #expect(profile.json["bio"] == nil || profile.json["bio"] is NSNull)
            #expect(profile.json["followers_count"] as? Int == 0 && profile.json["following_count"] as? Int == 0)
            #expect(try await env.count("SELECT count(*) FROM blocks WHERE blocker_id = '\(maker.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(maker.id)'") == 0)
            #expect(try await env.profile(friend, as: friend).json["followers_count"] as? Int == 0)
            #expect(try await env.count("SELECT count(*) FROM blocks WHERE blocker_id = '\(victim.id)' AND blocked_id = '\(maker.id)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM mutes WHERE muter_id = '\(friend.id)' AND muted_id = '\(maker.id)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM warnings WHERE user_id = '\(maker.id)'") == 1)
            #expect(try await env.profile(maker, as: rival).status == .notFound, "still hidden")
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(maker.path)/unhide", as: moderator).status == .ok)
            #expect(try await env.profile(maker, as: rival).status == .ok, "the maker's block went")
            // Every column but the id, the times and the hiding is a new profile's.
            let fresh = UUID()
            try await env.execute("INSERT INTO profiles (user_id) VALUES ('\(fresh)')")
            let row = "to_jsonb(p) - 'user_id' - 'created_at' - 'updated_at' - 'hidden_at'"
            #expect(
                try await env.count(
                    "SELECT count(*) FROM profiles p, profiles q WHERE p.user_id = '\(maker.id)' AND q.user_id = '\(fresh)' AND \(row) = (to_jsonb(q) - 'user_id' - 'created_at' - 'updated_at' - 'hidden_at')"
                ) == 1)
        }
    }

    /// The account is deleted before its takeover's `user.password_changed` is handled (a retry,
    /// another replica): the late event leaves no blank profile behind for the deleted account.
    @Test func aTakeoverHandledAfterTheDeletionBringsNothingBack() async throws {
        try await SocialTestEnvironment.run { env in
            let maker = try await env.user("Gone Soon")
            try await env.publish(UserDeleted(userID: maker.id), userID: maker.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(maker.id)'") == 0 }
            try await env.publish(UserPasswordChanged(userID: maker.id, method: .reset, makerDropped: true), userID: maker.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'user.password_changed'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(maker.id)'") == 0)
        }
    }

    /// A reset of a proven account (`maker_dropped: false`), a change, and an old `reset` without the
    /// field leave everything; an old `disowned` without it still drops.
    @Test func onlyTheFirstProofDrops() async throws {
        try await SocialTestEnvironment.run { env in
            let owner = try await env.user("Pat Owner")
            let friend = try await env.user()
            let legacy = try await env.user("Old Squatter")
            _ = try await env.follow(friend, as: owner)
            _ = try await env.follow(friend, as: legacy)

            try await env.publish(UserPasswordChanged(userID: owner.id, method: .reset, makerDropped: false), userID: owner.id)
            try await env.publish(UserPasswordChanged(userID: owner.id, method: .change), userID: owner.id)
            try await env.publish(LegacyPasswordChanged(userID: owner.id, method: "reset"), userID: owner.id)
            try await env.publish(LegacyPasswordChanged(userID: legacy.id, method: "disowned"), userID: legacy.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM follows WHERE follower_id = '\(legacy.id)'") == 0 }
            // All four handled: their inbox rows.
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'user.password_changed'") == 4 }
            #expect(try await env.count("SELECT count(*) FROM follows WHERE follower_id = '\(owner.id)'") == 1)
            #expect(try await env.call(.get, "/v1/profiles/me", as: owner).json["display_name"] as? String == "Pat Owner")
            #expect(try await env.call(.get, "/v1/profiles/me", as: legacy).json["display_name"] is NSNull)
        }
    }
}
