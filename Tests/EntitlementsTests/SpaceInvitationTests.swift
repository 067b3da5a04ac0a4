import Foundation
import HTTPTypes
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
}
