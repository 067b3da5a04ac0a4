import Foundation
import HTTPTypes
import Models
import NIOCore
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
@testable import Social
import Testing
import TestSupport

/// Every read of someone else's profile, for every kind of viewer.
@Suite struct PrivacyTests {
    enum Seen: Equatable {
        /// 404.
        case nothing
        /// Public fields only (no bio, lists, dietary data).
        case publicOnly
        /// Bio and lists, no dietary data.
        case details
        /// Everything.
        case everything
    }

    struct Viewers {
        let owner, follower, requester, stranger, blocked, moderator, admin: SocialTestEnvironment.User
    }

    /// An owner with the given settings and one viewer of each kind.
    static func setUp(_ env: SocialTestEnvironment, isPrivate: Bool, visibility: String) async throws -> Viewers {
        let owner = try await env.user("Owner")
        _ = try await env.call(
            .patch, "/v1/profiles/me", as: owner,
            json: [
                "username": "owner_\(UUID().uuidString.prefix(8))", "bio": "Secret bio", "dietary_preferences": ["keto"],
                "allergies": [["name": "shellfish", "severity": "severe"]], "favorite_cuisines": ["Greek"], "dietary_visibility": visibility,
            ])
        let follower = try await env.user()
        #expect(try await env.follow(owner, as: follower).json["state"] as? String == "following")
        _ = try await env.call(.patch, "/v1/profiles/me", as: owner, json: ["is_private": isPrivate])
        let requester = try await env.user()
        #expect(try await env.follow(owner, as: requester).json["state"] as? String == (isPrivate ? "requested" : "following"))
        let stranger = try await env.user()
        let blocked = try await env.user()
        _ = try await env.call(.post, "/v1/profiles/\(blocked.path)/block", as: owner)
        #expect(try await env.call(.put, "/v1/profiles/me/avatar", as: owner, raw: .init(bytes: ProfileTests.png)).status == .ok)
        return Viewers(
            owner: owner, follower: follower, requester: requester, stranger: stranger, blocked: blocked,
            moderator: try await env.user(roles: [.user, .moderator]), admin: try await env.user(roles: [.user, .admin]))
    }

    static func seen(_ reply: SocialTestEnvironment.Reply) -> Seen {
        if reply.status == .notFound { return .nothing }
        let json = reply.json
        #expect(json["username"] != nil && json["followers_count"] != nil && json["is_verified"] != nil)
        #expect((json["bio"] != nil) == (json["favorite_cuisines"] != nil) && (json["bio"] != nil) == (json["cooking_preferences"] != nil))
        switch (json["bio"] != nil, json["dietary_preferences"] != nil, json["allergies"] != nil) {
        case (false, false, false): return .publicOnly
        case (true, false, false): return .details
        case (true, true, true): return .everything
        default:
            Issue.record("inconsistent fields: \(json)")
            return .nothing
        }
    }

    /// Followers list: 200 (and then it lists the accepted follower), 403 (private) or 404.
    static func lists(_ env: SocialTestEnvironment, _ v: Viewers, as viewer: SocialTestEnvironment.User) async throws -> HTTPResponse.Status {
        let followers = try await env.call(.get, "/v1/profiles/\(v.owner.path)/followers", as: viewer)
        let following = try await env.call(.get, "/v1/profiles/\(v.owner.path)/following", as: viewer)
        #expect(followers.status == following.status)
        if followers.status == .ok {
            #expect(followers.ids.contains(v.follower.path) && !followers.ids.contains(v.blocked.path))
        } else {
            #expect(followers.json["items"] == nil)
        }
        return followers.status
    }

    @Test(arguments: [
        // (private, dietary visibility, follower, requester, stranger)
        (false, "public", Seen.everything, Seen.everything, Seen.everything),
        (false, "followers_only", Seen.everything, Seen.everything, Seen.details),
        (false, "private", Seen.details, Seen.details, Seen.details),
        (true, "public", Seen.everything, Seen.publicOnly, Seen.publicOnly),
        (true, "followers_only", Seen.everything, Seen.publicOnly, Seen.publicOnly),
        (true, "private", Seen.details, Seen.publicOnly, Seen.publicOnly),
    ])
    func theMatrix(isPrivate: Bool, visibility: String, follower: Seen, requester: Seen, stranger: Seen) async throws {
        try await SocialTestEnvironment.run { env in
            let v = try await Self.setUp(env, isPrivate: isPrivate, visibility: visibility)
            let expected: [(SocialTestEnvironment.User, Seen, String)] = [
                (v.owner, .everything, "owner"), (v.follower, follower, "follower"), (v.requester, requester, "requester"),
                (v.stranger, stranger, "stranger"), (v.blocked, .nothing, "blocked"), (v.moderator, .everything, "moderator"), (v.admin, .everything, "admin"),
            ]
            let username = try #require(try await env.call(.get, "/v1/profiles/me", as: v.owner).json["username"] as? String)
            for (viewer, seen, name) in expected {
                let byID = try await env.profile(v.owner, as: viewer)
                #expect(Self.seen(byID) == seen, "\(name) by id (private \(isPrivate), \(visibility)): \(byID.text)")
                let byName = try await env.call(.get, "/v1/profiles/by-username/\(username)", as: viewer)
                #expect(Self.seen(byName) == seen, "\(name) by username")
                // The same view, relationship and all.
                #expect(byName.status == byID.status && (byID.status != .ok || byName.text == byID.text), "\(name) by username: \(byName.text)")
                let lists = try await Self.lists(env, v, as: viewer)
                let expectedLists: HTTPResponse.Status = seen == .nothing ? .notFound : (seen == .publicOnly ? .forbidden : .ok)
                #expect(lists == expectedLists, "\(name) lists")
                // The avatar is a public field: everyone but the blocked viewer gets it.
                let avatar = try await env.call(.get, "/v1/profiles/\(v.owner.path)/avatar", as: viewer)
                #expect(avatar.status == (seen == .nothing ? .notFound : .ok), "\(name) avatar")
                let search = try await env.call(.get, "/v1/profiles/search?q=\(username)", as: viewer)
                #expect(search.ids.contains(v.owner.path) == (seen != .nothing), "\(name) search")
            }
            // The relationship is told from the viewer's side.
            let followerView = try await env.profile(v.owner, as: v.follower).json
            #expect(followerView[path: "relationship.following"] as? Bool == true)
            #expect(try await env.profile(v.follower, as: v.owner).json[path: "relationship.followed_by"] as? Bool == true)
            #expect(try await env.profile(v.owner, as: v.requester).json[path: "relationship.requested"] as? Bool == isPrivate)
            #expect(try await env.profile(v.blocked, as: v.owner).json[path: "relationship.blocking"] as? Bool == true)
            #expect(try await env.profile(v.owner, as: v.moderator).json[path: "relationship.blocked_by"] as? Bool == false)
        }
    }

    @Test func hiddenProfilesAre404ToAllButTheOwnerAndStaff() async throws {
        try await SocialTestEnvironment.run { env in
            let owner = try await env.user()
            let viewer = try await env.user()
            let moderator = try await env.user(roles: [.user, .moderator])
            #expect(try await env.call(.put, "/v1/profiles/me/avatar", as: owner, raw: .init(bytes: ProfileTests.png)).status == .ok)
            let username = "hidden_\(UUID().uuidString.prefix(8).lowercased())"
            #expect(try await env.call(.patch, "/v1/profiles/me", as: owner, json: ["username": username]).status == .ok)
            _ = try await env.follow(owner, as: viewer)
            _ = try await env.follow(viewer, as: owner)
            #expect(try await env.call(.get, "/v1/notifications", as: viewer).items.count == 1)
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(owner.path)/hide", as: viewer).status == .forbidden)
            let hidden = try await env.call(.post, "/v1/moderation/profiles/\(owner.path)/hide", as: moderator)
            #expect(hidden.status == .ok && hidden.json["hidden"] as? Bool == true)
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(owner.path)/hide", as: moderator).json["hidden"] as? Bool == true)
            #expect(try await env.profile(owner, as: viewer).status == .notFound)
            #expect(try await env.call(.get, "/v1/profiles/\(owner.path)/followers", as: viewer).status == .notFound)
            #expect(try await env.call(.get, "/v1/profiles/\(viewer.path)/following", as: viewer).ids.isEmpty)
            #expect(try await env.follow(owner, as: try await env.user()).status == .notFound)
            #expect(try await env.call(.get, "/v1/profiles/me", as: owner).json["is_hidden"] as? Bool == true)
            // Every other way in: by username, the avatar, search.
            #expect(try await env.call(.get, "/v1/profiles/by-username/\(username)", as: viewer).status == .notFound)
            #expect(try await env.call(.get, "/v1/profiles/\(owner.path)/avatar", as: viewer).status == .notFound)
            #expect(try await env.call(.get, "/v1/profiles/search?q=\(username)", as: viewer).ids.isEmpty)
            #expect(try await env.call(.get, "/v1/profiles/by-username/\(username)", as: moderator).status == .ok)
            #expect(try await env.call(.get, "/v1/profiles/search?q=\(username)", as: moderator).ids == [owner.path])
            // Nothing else names the hidden profile either: not the notification of its follow, not
            // an action's answer. Staff still find it in lists.
            #expect(try await env.call(.get, "/v1/notifications", as: viewer).items.isEmpty == true)
            #expect(try await env.call(.delete, "/v1/profiles/\(owner.path)/mute", as: viewer).status == .notFound)
            #expect(try await env.call(.get, "/v1/profiles/\(viewer.path)/following", as: moderator).ids == [owner.path])
            #expect(try await env.profile(owner, as: moderator).status == .ok)
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(UUID().uuidString)/hide", as: moderator).status == .notFound)
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(owner.path)/unhide", as: viewer).status == .forbidden)
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(owner.path)/unhide", as: owner).status == .forbidden)
            #expect(try await env.profile(owner, as: viewer).status == .notFound)
            _ = try await env.call(.post, "/v1/moderation/profiles/\(owner.path)/unhide", as: moderator)
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(owner.path)/unhide", as: moderator).json["hidden"] as? Bool == false)
            #expect(try await env.call(.post, "/v1/moderation/profiles/not-an-id/unhide", as: moderator).status == .notFound)
            #expect(try await env.profile(owner, as: viewer).status == .ok)
            #expect(try await env.call(.get, "/v1/profiles/by-username/\(username)", as: viewer).status == .ok)
            #expect(try await env.call(.get, "/v1/profiles/\(owner.path)/avatar", as: viewer).status == .ok)
        }
    }

    /// A profile moderators hid may still follow someone, or have asked to, from before: its target
    /// can block it (which ends the follow), and going public does not approve its request, which
    /// the target never saw among their requests. It follows nobody new.
    @Test func aHiddenProfileCanBeBlockedAndItsRequestIsNotApproved() async throws {
        try await SocialTestEnvironment.run { env in
            let hidden = try await env.user()
            let followed = try await env.user()
            let asked = try await env.user()
            let moderator = try await env.user(roles: [.user, .moderator])
            #expect(try await env.call(.patch, "/v1/profiles/me", as: asked, json: ["is_private": true]).status == .ok)
            #expect(try await env.follow(followed, as: hidden).status == .ok)
            #expect(try await env.follow(asked, as: hidden).status == .ok)
            #expect(try await env.call(.post, "/v1/moderation/profiles/\(hidden.path)/hide", as: moderator).status == .ok)
            #expect(try await env.profile(hidden, as: followed).status == .notFound)
            // It follows nobody from now on, and notifies nobody (a notification is pushed live only
            // once stored): nothing names it to them.
            let another = try await env.user()
            let notified = try await env.count("SELECT count(*) FROM notifications")
            #expect(try await env.follow(another, as: hidden).code == "profile_hidden")
            #expect(try await env.count("SELECT count(*) FROM notifications") == notified)
            #expect(try await env.count("SELECT count(*) FROM notifications WHERE actor_id = '\(hidden.id)' AND user_id = '\(another.id)'") == 0)
            #expect(try await env.call(.get, "/v1/notifications", as: another).items.isEmpty)
            #expect(try await env.call(.delete, "/v1/profiles/\(another.path)/follow", as: hidden).status == .ok)
            #expect(try await env.call(.post, "/v1/profiles/\(hidden.path)/block", as: followed).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM follows WHERE follower_id = '\(hidden.id)'") == 0)
            #expect(try await env.profile(followed, as: followed).json["followers_count"] as? Int == 0)
            #expect(try await env.call(.patch, "/v1/profiles/me", as: asked, json: ["is_private": false]).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM follows WHERE follower_id = '\(hidden.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM follow_requests WHERE requester_id = '\(hidden.id)'") == 0)
            // A profile that does not exist is still not found, and so is a hidden one that neither
            // follows the caller nor asked to.
            #expect(try await env.call(.post, "/v1/profiles/\(UUID().uuidString.lowercased())/block", as: followed).status == .notFound)
            #expect(try await env.call(.post, "/v1/profiles/\(hidden.path)/block", as: try await env.user()).status == .notFound)
        }
    }

    @Test func warningsAreForStaffToGiveAndTheUserToRead() async throws {
        try await SocialTestEnvironment.run { env in
            let user = try await env.user()
            let other = try await env.user()
            let admin = try await env.user(roles: [.user, .admin])
            #expect(try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: other, json: ["reason": "x"]).status == .forbidden)
            #expect(try await env.call(.get, "/v1/moderation/users/\(user.path)/warnings", as: other).status == .forbidden)
            #expect(try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: admin, json: ["reason": "   "]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: admin, json: ["reason": 5]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: admin, json: ["reason": "r" + ProfileTests.marks(1000)]).fieldErrors == ["reason"])
            #expect(try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: admin, json: [String: Any]()).status == .badRequest)
            #expect(try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: admin, json: ["reason": String(repeating: "x", count: 1001)]).status == .badRequest)
            #expect(
                try await env.call(
                    .post, "/v1/moderation/users/\(user.path)/warnings", as: admin, raw: ByteBuffer(string: "{\"reason\":"),
                    headers: [.contentType: "application/json"]
                ).code == "malformed_json")
            #expect(try await env.call(.post, "/v1/moderation/users/not-an-id/warnings", as: admin, json: ["reason": "spam"]).status == .notFound)
            #expect(try await env.call(.post, "/v1/moderation/users/\(UUID().uuidString)/warnings", as: admin, json: ["reason": "spam"]).status == .notFound)
            let warned = try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: admin, json: ["reason": "Spam in comments"])
            #expect(warned.status == .created)
            let staffView = try await env.call(.get, "/v1/moderation/users/\(user.path)/warnings", as: admin)
            #expect(staffView.items.first?["moderator_id"] != nil)
            let own = try await env.call(.get, "/v1/profiles/me/warnings", as: user)
            #expect(own.items.count == 1 && own.items.first?["reason"] as? String == "Spam in comments" && own.items.first?["moderator_id"] == nil)
            // The refused ones left nothing.
            #expect(try await env.count("SELECT count(*) FROM warnings WHERE user_id = '\(user.id)'") == 1)
            // The same warning again is a retry: 200 with the first. Four copies sent at once give one warning.
            let retried = try await env.call(.post, "/v1/moderation/users/\(user.path)/warnings", as: admin, json: ["reason": "Spam in comments"])
            #expect(retried.status == .ok && retried.json["id"] as? String == warned.json["id"] as? String)
            let port = try #require(env.client.port)
            let copies = try await withThrowingTaskGroup(of: ConcurrentClient.Reply.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        try await ConcurrentClient.send(
                            port: port, "POST", "/v1/moderation/users/\(user.path)/warnings",
                            headers: [("Authorization", "Bearer \(admin.token)")], json: ["reason": "Abuse"])
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(copies.map(\.status).sorted() == [200, 200, 200, 201])
            #expect(Set(copies.compactMap { $0.json["id"] as? String }).count == 1)
            #expect(try await env.count("SELECT count(*) FROM warnings WHERE user_id = '\(user.id)'") == 2)
            #expect(try await env.call(.get, "/v1/profiles/me/warnings", as: other).items.isEmpty)
        }
    }
}
