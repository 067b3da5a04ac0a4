import Foundation
import HTTPTypes
import Models
import Testing
import TestSupport

/// A member added by address is an invitation whether an account has the address or not: the owner
/// learns nothing of who has an account, and the account's holder accepts (or declines) it.
@Suite struct SpaceInvitationTests {
    typealias Env = EntitlementsTestEnvironment

    static func space(_ env: Env, of owner: Env.User) async throws -> String {
        let reply = try await env.call(.post, "/v1/spaces", as: owner, json: ["name": "Book club"])
        #expect(reply.status == .created, "\(reply.text)")
        return try #require(reply.json["id"] as? String)
    }

    @Test func anAddressAnswersAlikeWithAndWithoutAnAccountUntilAccepted() async throws {
        try await Env.run { env in
            let owner = try await env.user()
            let holder = try await env.user()
            try await env.grant(owner, tier: "team")
            let id = try await Self.space(env, of: owner)
            let members = "/v1/spaces/\(id)/members"
            let nobody = "\(TestEnvironment.uniqueName("nobody"))@example.com"

            let known = try await env.call(.post, members, as: owner, json: ["email": holder.email, "permission": "commenter"])
            let unknown = try await env.call(.post, members, as: owner, json: ["email": nobody, "permission": "commenter"])
            #expect(known.status == unknown.status && known.status == .created, "\(known.text) \(unknown.text)")
            #expect(Set(known.json.keys) == Set(unknown.json.keys))
            for (reply, address) in [(known, holder.email.lowercased()), (unknown, nobody)] {
                #expect(reply.json["status"] as? String == "pending" && reply.json["email"] as? String == address, "\(reply.text)")
                #expect(reply.json["user_id"] is NSNull && reply.json["joined_at"] is NSNull && reply.json["invited_at"] is String, "\(reply.text)")
                #expect(reply.headers[.contentType] == known.headers[.contentType])
            }
            #expect(!known.text.contains(holder.path), "no user id leaked")
            // The holder is no member until they accept; the owner's list says pending for both.
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: holder).code == "space_not_found")
            let listed = try await env.call(.get, members, as: owner)
            #expect(listed.items.filter { $0["status"] as? String == "pending" }.count == 2, "\(listed.text)")
            #expect(!listed.text.contains(holder.path))

            // The holder sees the invitation and accepts it.
            let mine = try await env.call(.get, "/v1/spaces/invitations", as: holder)
            #expect(mine.status == .ok && mine.items.count == 1, "\(mine.text)")
            #expect(mine.items.first?["space_id"] as? String == id && mine.items.first?["permission"] as? String == "commenter")
            #expect(mine.items.first?["name"] as? String == "Book club")
            let accepted = try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: holder)
            #expect(accepted.status == .ok && accepted.json["permission"] as? String == "commenter", "\(accepted.text)")
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: holder).status == .ok)
            #expect(try await env.call(.get, "/v1/spaces/invitations", as: holder).items.isEmpty)
            #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: holder).code == "space_not_found")
            let after = try await env.call(.get, members, as: owner)
            #expect(after.items.contains { $0["user_id"] as? String == holder.path && $0["status"] as? String == "active" }, "\(after.text)")

            // An address that is already a member's is pending all the same; accepting keeps the membership.
            let again = try await env.call(.post, members, as: owner, json: ["email": holder.email, "permission": "viewer"])
            #expect(again.status == .created && again.json["status"] as? String == "pending" && again.json["user_id"] is NSNull, "\(again.text)")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: holder).json["permission"] as? String == "commenter")

            // Nobody else accepts it, and a declined one is gone.
            let stranger = try await env.user()
            let other = try await env.user()
            #expect(try await env.call(.post, members, as: owner, json: ["email": other.email, "permission": "editor"]).status == .created)
            #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: stranger).code == "space_not_found")
            #expect(try await env.call(.delete, "/v1/spaces/\(id)/invitation", as: stranger).code == "space_not_found")
            #expect(try await env.call(.delete, "/v1/spaces/\(id)/invitation", as: other).status == .noContent)
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE space_id = '\(id)' AND email_normalized = '\(other.email.lowercased())'") == 0)
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: other).code == "space_not_found")

            // An address not proven yet sees no invitations, even to its address.
            let squatter = try await env.user(email: "\(TestEnvironment.uniqueName("squat"))@example.com", verified: false)
            #expect(try await env.call(.post, members, as: owner, json: ["email": squatter.email, "permission": "editor"]).status == .created)
            #expect(try await env.call(.get, "/v1/spaces/invitations", as: squatter).items.isEmpty)
            #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: squatter).code == "space_not_found")
        }
    }

    /// Social's blocks reach the spaces, either way: an account blocked by the owner, or blocking
    /// them, is not invited by id (as if no account had it), and neither sees nor takes an invitation
    /// from the other, by id or at its address; a block ends those already pending, and an address
    /// proven later joins no space of the other. Lifted, or dropped with a takeover, the owner may
    /// invite again.
    @Test func aBlockEitherWayStopsInvitations() async throws {
        try await Env.run { env in
            let owner = try await env.user()
            let friend = try await env.user()
            let other = try await env.user()
            let late = try await env.user(verified: false)
            try await env.grant(owner, tier: "team")
            let id = try await Self.space(env, of: owner)
            let members = "/v1/spaces/\(id)/members"
            func block(_ blocker: Env.User, _ blocked: Env.User, _ blocking: Bool) async throws {
                if blocking {
                    try await env.publish(BlockCreated(blockerID: blocker.id, blockedID: blocked.id), userID: blocker.id, producer: "social")
                } else {
                    try await env.publish(BlockRemoved(blockerID: blocker.id, blockedID: blocked.id), userID: blocker.id, producer: "social")
                }
                try await waitUntil(.seconds(15)) {
                    try await env.count(
                        "SELECT count(*) FROM blocks WHERE blocker_id = '\(blocker.id)' AND blocked_id = '\(blocked.id)' AND blocking = \(blocking)") == 1
                }
            }
            func offered(to person: Env.User) async throws -> Int { try await env.call(.get, "/v1/spaces/invitations", as: person).items.count }

            // Pending before the blocks: one by id, one at an address.
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "permission": "viewer"]).status == .created)
            #expect(try await env.call(.post, members, as: owner, json: ["email": other.email, "permission": "viewer"]).status == .created)
            #expect(try await offered(to: friend) == 1)
            #expect(try await offered(to: other) == 1)
            try await block(friend, owner, true)
            try await block(owner, other, true)
            try await block(late, owner, true)
            #expect(try await env.count("SELECT count(*) FROM space_account_invitations WHERE space_id = '\(id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE space_id = '\(id)'") == 0)

            // New ones: by id, as for no account; at an address, made alike (the owner learns
            // nothing of who has an account) but never offered, taken or joined.
            let byID = try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "permission": "viewer"])
            #expect(byID.status == .notFound && byID.code == "user_not_found", "\(byID.text)")
            let blockedByOwner = try await env.call(.post, members, as: owner, json: ["user_id": other.path, "permission": "viewer"])
            #expect(blockedByOwner.code == "user_not_found", "\(blockedByOwner.text)")
            for person in [friend, other, late] {
                #expect(try await env.call(.post, members, as: owner, json: ["email": person.email, "permission": "viewer"]).status == .created)
            }
            for person in [friend, other] {
                #expect(try await offered(to: person) == 0)
                #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: person).code == "space_not_found")
            }
            try await env.publish(UserEmailVerified(userID: late.id, email: late.email), userID: late.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(late.id)' AND email_verified") == 1 }
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: late).code == "space_not_found")
            // Still pending, as to an address without an account: the owner learns nothing.
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE space_id = '\(id)' AND email_normalized = lower('\(late.email)')") == 1)

            // A takeover drops the blocks the account's maker made, as social drops them.
            try await env.publish(UserPasswordChanged(userID: late.id, method: .disowned), userID: late.id)
            try await waitUntil(.seconds(15)) {
                try await env.count("SELECT count(*) FROM blocks WHERE blocker_id = '\(late.id)' AND blocked_id = '\(owner.id)' AND NOT blocking") == 1
            }
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": late.path, "permission": "viewer"]).status == .created)

            // Lifted: the owner's invitations are heard again.
            try await block(friend, owner, false)
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "permission": "viewer"]).status == .created)
            #expect(try await offered(to: friend) == 1)
            #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: friend).status == .ok)

            // A deleted account's blocks go, either way.
            try await env.publish(UserDeleted(userID: other.id), userID: other.id)
            try await waitUntil(.seconds(15)) {
                try await env.count("SELECT count(*) FROM blocks WHERE blocker_id = '\(other.id)' OR blocked_id = '\(other.id)'") == 0
            }
        }
    }
}
