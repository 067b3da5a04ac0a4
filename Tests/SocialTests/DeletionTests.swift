import Foundation
import HTTPTypes
import Models
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
@testable import Social
import Testing
import TestSupport

@Suite struct DeletionTests {
    /// An account taken over by its address's owner (`user.password_changed`, `disowned`) keeps a
    /// blank profile: nothing the person who signed it up made stays, and counts elsewhere are right.
    @Test func aDisownedAccountKeepsABlankProfile() async throws {
        try await SocialTestEnvironment.run { env in
            let squatter = try await env.user("Totally The Owner")
            let friend = try await env.user()
            #expect(try await env.call(.patch, "/v1/profiles/me", as: squatter, json: ["username": "owner\(Int.random(in: 1000...9999))", "bio": "mine now"]).status == .ok)
            #expect(try await env.call(.put, "/v1/profiles/me/avatar", as: squatter, raw: .init(bytes: ProfileTests.png)).status == .ok)
            _ = try await env.follow(friend, as: squatter)
            _ = try await env.follow(squatter, as: friend)
            try await env.publish(UserPasswordChanged(userID: squatter.id, method: .disowned), userID: squatter.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM follows WHERE follower_id = '\(squatter.id)' OR followee_id = '\(squatter.id)'") == 0 }
            let profile = try await env.call(.get, "/v1/profiles/me", as: squatter)
            #expect(profile.status == .ok)
            #expect(profile.json["username"] is NSNull && profile.json["display_name"] is NSNull && profile.json["avatar_url"] is NSNull)
            #expect(profile.json["bio"] == nil || profile.json["bio"] is NSNull)
            #expect(profile.json["followers_count"] as? Int == 0 && profile.json["following_count"] as? Int == 0)
            #expect(try await env.profile(friend, as: friend).json["followers_count"] as? Int == 0)
            // Any other password change leaves the profile alone.
            try await env.publish(UserPasswordChanged(userID: friend.id, method: .change), userID: friend.id)
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(friend.id)'") == 1)
        }
    }

    /// A first request made while the account's deletion runs (its `user.registered` not yet here)
    /// waits for it, then finds the tombstone and makes no profile, which would outlive the account.
    @Test func aProfileMadeBesideTheDeletionWaitsAndIsNotMade() async throws {
        try await SocialTestEnvironment.run { env in
            let late = try await env.user(registered: false)
            let reply = try await env.whileDeleting(late.id) { try await env.call(.get, "/v1/profiles/me", as: late) }
            #expect(reply.status == .unauthorized && reply.code == "account_deleted", "\(reply.text)")
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(late.id)'") == 0)
        }
    }

    /// A warning names its moderator: one given while the moderator's deletion runs waits for it,
    /// then finds the tombstone and is not given.
    @Test func aWarningBesideItsModeratorsDeletionIsNotGiven() async throws {
        try await SocialTestEnvironment.run { env in
            let moderator = try await env.user(roles: [.user, .moderator])
            let user = try await env.user()
            let reply = try await env.whileDeleting(moderator.id) {
                try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: moderator, json: ["reason": "Spam"])
            }
            #expect(reply.status == .unauthorized && reply.code == "account_deleted", "\(reply.text)")
            #expect(try await env.count("SELECT count(*) FROM warnings") == 0)
        }
    }

    @Test func userDeletedLeavesNoRowMentioningTheUserAndFixesOthersCounts() async throws {
        try await SocialTestEnvironment.run { env in
            let leaving = try await env.user("Leaving")
            let friend = try await env.user()
            let fan = try await env.user()
            let idol = try await env.user()
            let privateOne = try await env.user()
            let moderator = try await env.user(roles: [.user, .moderator])
            _ = try await env.call(.patch, "/v1/profiles/me", as: privateOne, json: ["is_private": true])
            _ = try await env.call(.put, "/v1/profiles/me/avatar", as: leaving, raw: .init(bytes: ProfileTests.png))
            _ = try await env.follow(friend, as: leaving)
            _ = try await env.follow(leaving, as: friend)
            _ = try await env.follow(leaving, as: fan)
            _ = try await env.follow(idol, as: leaving)
            _ = try await env.follow(privateOne, as: leaving)
            _ = try await env.call(.post, "/v1/profiles/\(fan.path)/mute", as: leaving)
            _ = try await env.call(.post, "/v1/profiles/\(leaving.path)/mute", as: idol)
            _ = try await env.call(.post, "/v1/profiles/\(leaving.path)/block", as: privateOne)
            _ = try await env.follow(privateOne, as: friend)
            _ = try await env.call(.post, "/v1/follow-requests/\(friend.path)/approve", as: privateOne)
            let locked = try await env.user()
            _ = try await env.call(.patch, "/v1/profiles/me", as: locked, json: ["is_private": true])
            #expect(try await env.follow(locked, as: leaving).json["state"] as? String == "requested")
            _ = try await env.call(.post, "/v1/moderation/users/\(leaving.path)/warnings", as: moderator, json: ["reason": "x"])
            let leavingMod = try await env.user(roles: [.user, .moderator])
            _ = try await env.call(.post, "/v1/moderation/users/\(fan.path)/warnings", as: leavingMod, json: ["reason": "y"])
            #expect(try await env.profile(friend, as: fan).json["followers_count"] as? Int == 1)

            try await env.publish(UserDeleted(userID: leaving.id), userID: leaving.id)
            try await env.publish(UserDeleted(userID: leavingMod.id), userID: leavingMod.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM profiles WHERE user_id IN ('\(leaving.id)', '\(leavingMod.id)')") == 0 }

            // No table of the schema has a row with either id in any column.
            for gone in [leaving.id, leavingMod.id] {
                #expect(
                    try await env.count(
                        """
                        SELECT count(*) FROM (
                            SELECT row_to_json(t)::text AS r FROM profiles t UNION ALL SELECT row_to_json(t)::text FROM follows t
                            UNION ALL SELECT row_to_json(t)::text FROM follow_requests t UNION ALL SELECT row_to_json(t)::text FROM blocks t
                            UNION ALL SELECT row_to_json(t)::text FROM mutes t UNION ALL SELECT row_to_json(t)::text FROM notifications t
                            UNION ALL SELECT row_to_json(t)::text FROM warnings t UNION ALL SELECT row_to_json(t)::text FROM deleted_accounts t
                            UNION ALL SELECT json_build_object('id', user_id)::text FROM avatars t
                        ) all_rows WHERE r ILIKE '%\(gone.uuidString)%'
                        """) == 0)
            }
            #expect(try await env.count("SELECT count(*) FROM avatars") == 0)
            #expect(try await env.count("SELECT count(*) FROM warnings WHERE moderator_id IS NULL") == 1)
            for (user, followers, following) in [(friend, 0, 1), (fan, 0, 0), (idol, 0, 0), (privateOne, 1, 0), (locked, 0, 0)] {
                let json = try await env.call(.get, "/v1/profiles/me", as: user).json
                #expect(json["followers_count"] as? Int == followers && json["following_count"] as? Int == following)
            }
            // The deleted account's token, still unexpired, does not bring the profile back.
            let reply = try await env.call(.get, "/v1/profiles/me", as: leaving)
            #expect(reply.status == .unauthorized && reply.code == "account_deleted")
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(leaving.id)'") == 0)
            // Nor does a late event.
            try await env.publish(UserRolesChanged(userID: leaving.id, roles: [.creator], added: [.creator], removed: []), userID: leaving.id)
            try await Task.sleep(for: .milliseconds(800))
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(leaving.id)'") == 0)
        }
    }
}

@Suite struct SocialContractTests {
    @Test func everyDocumentedOperationIsServed() async throws {
        let operations = try OpenAPIDocument.operations(of: "Social")
        #expect(operations.count >= 30)
        try await SocialTestEnvironment.run { env in
            for (method, template) in operations where template.hasPrefix("/v1") {
                let path = template.replacingOccurrences(of: "{id}", with: UUID().uuidString).replacingOccurrences(of: "{username}", with: "someone")
                    .replacingOccurrences(of: "{step}", with: "avatar")
                let reply = try await env.call(HTTPRequest.Method(rawValue: method.uppercased())!, path, as: nil)
                #expect(reply.status == .unauthorized, "\(method) \(template): \(reply.status)")
            }
        }
    }
}
