import Foundation
import HTTPTypes
@testable import Entitlements
import Models
import NIOCore
import Testing
import TestSupport

/// Shared spaces through HTTP: the permission matrix, members by id and by address, what the
/// owner's `collaboration` gates, ownership transfers (also at once), leaving, auth's events, and
/// the rules of bodies and ids.
@Suite struct SpaceTests {
    static let actions = ["view", "comment", "edit", "delete", "invite"]

    /// A space of `owner`'s; its id.
    static func space(_ env: EntitlementsTestEnvironment, of owner: any BearerHolder, name: String = "Reading group") async throws -> String {
        let reply = try await env.call(.post, "/v1/spaces", as: owner, json: ["name": name])
        #expect(reply.status == .created, "\(reply.text)")
        return try #require(reply.json["id"] as? String)
    }

    /// Invites a member by user id (the owner holds `team`), who accepts.
    static func add(
        _ env: EntitlementsTestEnvironment, _ member: EntitlementsTestEnvironment.User, as permission: String, to space: String, by owner: any BearerHolder
    ) async throws {
        let reply = try await env.call(.post, "/v1/spaces/\(space)/members", as: owner, json: ["user_id": member.path, "permission": permission])
        #expect(reply.status == .created, "\(reply.text)")
        let accepted = try await env.call(.post, "/v1/spaces/\(space)/invitation/accept", as: member)
        #expect(accepted.status == .ok && accepted.json["permission"] as? String == permission, "\(accepted.text)")
    }

    /// The response of the permissions endpoint: nil when allowed, else the problem's code.
    static func check(_ env: EntitlementsTestEnvironment, _ action: String, in space: String, as user: any BearerHolder) async throws -> String? {
        let reply = try await env.call(.get, "/v1/spaces/\(space)/permissions?action=\(action)", as: user)
        if reply.status == .ok {
            #expect(reply.json["allowed"] as? Bool == true, "\(reply.text)")
            return nil
        }
        #expect(reply.status == .forbidden, "\(action): \(reply.text)")
        return reply.code ?? "status \(reply.status.code)"
    }

    /// The matrix itself, without HTTP: every role and action, with collaboration and without.
    @Test func theMatrixAsAPureFunction() {
        let expected: [SpacePermission: [SpaceDecision]] = [
            .owner: [.allowed, .allowed, .allowed, .allowed, .allowed],
            .editor: [.allowed, .allowed, .allowed, .ownerOnly, .ownerOnly],
            .commenter: [.allowed, .allowed, .permissionDenied, .ownerOnly, .ownerOnly],
            .viewer: [.allowed, .permissionDenied, .permissionDenied, .ownerOnly, .ownerOnly],
        ]
        let lapsed: [SpacePermission: [SpaceDecision]] = [
            .owner: [.allowed, .allowed, .allowed, .allowed, .requiresUpgrade],
            .editor: [.allowed, .requiresUpgrade, .requiresUpgrade, .ownerOnly, .ownerOnly],
            .commenter: [.allowed, .requiresUpgrade, .permissionDenied, .ownerOnly, .ownerOnly],
            .viewer: [.allowed, .permissionDenied, .permissionDenied, .ownerOnly, .ownerOnly],
        ]
        for permission in SpacePermission.allCases {
            for (index, action) in SpaceAction.allCases.enumerated() {
                #expect(SpaceAccess.decide(permission, action, ownerHasCollaboration: true) == expected[permission]![index], "\(permission) \(action)")
                #expect(SpaceAccess.decide(permission, action, ownerHasCollaboration: false) == lapsed[permission]![index], "\(permission) \(action) lapsed")
            }
        }
    }

    /// owner/editor/commenter/viewer × view/comment/edit/delete/invite against
    /// `GET /v1/spaces/{id}/permissions`, the owner on `team`.
    @Test func thePermissionMatrix() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let editor = try await env.user()
            let commenter = try await env.user()
            let viewer = try await env.user()
            try await env.grant(owner, tier: "team")
            let id = try await Self.space(env, of: owner)
            try await Self.add(env, editor, as: "editor", to: id, by: owner)
            try await Self.add(env, commenter, as: "commenter", to: id, by: owner)
            try await Self.add(env, viewer, as: "viewer", to: id, by: owner)

            // view, comment, edit, delete, invite: nil is allowed.
            let table: [(String, any BearerHolder, [String?])] = [
                ("owner", owner, [nil, nil, nil, nil, nil]),
                ("editor", editor, [nil, nil, nil, "owner_only", "owner_only"]),
                ("commenter", commenter, [nil, nil, "permission_denied", "owner_only", "owner_only"]),
                ("viewer", viewer, [nil, "permission_denied", "permission_denied", "owner_only", "owner_only"]),
            ]
            for (role, user, answers) in table {
                for (action, answer) in zip(Self.actions, answers) {
                    let got = try await Self.check(env, action, in: id, as: user)
                    #expect(got == answer, "\(role) \(action): \(got ?? "allowed")")
                }
            }
            let denied = try await env.call(.get, "/v1/spaces/\(id)/permissions?action=edit", as: viewer)
            #expect(denied.json["detail"] as? String == "You don't have permission for this action.")
            let ownerOnly = try await env.call(.get, "/v1/spaces/\(id)/permissions?action=delete", as: editor)
            #expect(ownerOnly.json["detail"] as? String == "Only the owner can perform this action.")

            // Each sees the space with their own permission.
            for (role, user, _) in table {
                let space = try await env.call(.get, "/v1/spaces/\(id)", as: user)
                #expect(space.status == .ok && space.json["permission"] as? String == role, "\(space.text)")
                #expect(space.json["owner_id"] as? String == owner.path)
                let list = try await env.call(.get, "/v1/spaces", as: user)
                #expect(list.ids == [id] && list.items.first?["permission"] as? String == role, "\(list.text)")
            }

            // The routes answer as the matrix says.
            #expect(try await env.call(.patch, "/v1/spaces/\(id)", as: commenter, json: ["name": "Mine now"]).code == "permission_denied")
            #expect(try await env.call(.delete, "/v1/spaces/\(id)", as: editor).code == "owner_only")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/members", as: editor, json: ["email": "x@example.com", "permission": "viewer"]).code == "owner_only")
            let renamed = try await env.call(.patch, "/v1/spaces/\(id)", as: editor, json: ["name": "  Journal club  "])
            #expect(renamed.status == .ok && renamed.json["name"] as? String == "Journal club" && renamed.json["permission"] as? String == "editor")
            #expect(try await env.call(.get, "/v1/spaces/\(id)/members", as: viewer).items.count == 4)
            #expect(try await env.call(.delete, "/v1/spaces/\(id)", as: owner).status == .noContent)
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: owner).code == "space_not_found")
            #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(id)'") == 0)
        }
    }

    /// Someone who is not a member gets `404 space_not_found` on every route, as for an id that does
    /// not exist or is not a UUID; without a token every route is 401.
    @Test func nonMembersSeeNoSpace() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let outsider = try await env.user()
            try await env.grant(owner, tier: "team")
            let id = try await Self.space(env, of: owner)
            for space in [id, UUID().uuidString.lowercased(), "not-a-uuid"] {
                let routes: [(HTTPRequest.Method, String, Any?)] = [
                    (.get, "/v1/spaces/\(space)", nil),
                    (.patch, "/v1/spaces/\(space)", ["name": "Taken"]),
                    (.delete, "/v1/spaces/\(space)", nil),
                    (.get, "/v1/spaces/\(space)/permissions?action=view", nil),
                    (.get, "/v1/spaces/\(space)/members", nil),
                    (.post, "/v1/spaces/\(space)/members", ["user_id": outsider.path, "permission": "viewer"]),
                    (.patch, "/v1/spaces/\(space)/members/\(owner.path)", ["permission": "viewer"]),
                    (.delete, "/v1/spaces/\(space)/members/\(owner.path)", nil),
                    (.delete, "/v1/spaces/\(space)/members/\(outsider.path)", nil),
                    (.post, "/v1/spaces/\(space)/transfer", ["user_id": outsider.path]),
                    (.post, "/v1/spaces/\(space)/transfer/accept", nil),
                ]
                for (method, path, body) in routes {
                    let reply = try await env.call(method, path, as: outsider, json: body)
                    #expect(reply.status == .notFound && reply.code == "space_not_found", "\(method) \(path): \(reply.text)")
                    #expect(reply.headers[.contentType] == "application/problem+json")
                    #expect(try await env.call(method, path, json: body).status == .unauthorized, "\(method) \(path)")
                }
            }
            #expect(try await env.call(.get, "/v1/spaces", as: outsider).items.isEmpty)
            #expect(try await env.call(.get, "/v1/spaces").status == .unauthorized)
            #expect(try await env.call(.post, "/v1/spaces", json: ["name": "X"]).status == .unauthorized)
            // Nothing changed.
            let space = try await env.call(.get, "/v1/spaces/\(id)", as: owner)
            #expect(space.json["name"] as? String == "Reading group")
            #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(id)'") == 1)
        }
    }

    /// By user id, or by address: either is a pending membership until its account accepts (or
    /// declines; the owner may withdraw it), an address's once an account has proven it. Nobody is
    /// in a space without saying yes. Duplicates are 409, oneself 400.
    @Test func membersByIdAndByEmail() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let friend = try await env.user()
            let colleague = try await env.user()
            try await env.grant(owner, tier: "team")
            let id = try await Self.space(env, of: owner)
            let members = "/v1/spaces/\(id)/members"

            let byID = try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "permission": "editor"])
            #expect(byID.status == .created && byID.json["status"] as? String == "pending" && byID.json["user_id"] as? String == friend.path, "\(byID.text)")
            #expect(byID.json["permission"] as? String == "editor" && byID.json["invited_at"] is String && byID.json["joined_at"] is NSNull)
            // Not in the space until the friend says yes; the invitation is theirs to see.
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: friend).status == .notFound)
            #expect(try await env.call(.get, "/v1/spaces", as: friend).ids.isEmpty)
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "permission": "viewer"]).code == "already_member")
            let offered = try await env.call(.get, "/v1/spaces/invitations", as: friend)
            #expect(offered.items.count == 1 && offered.items.first?["space_id"] as? String == id && offered.items.first?["permission"] as? String == "editor")
            let listedPending = try await env.call(.get, members, as: owner)
            #expect(listedPending.items.contains { $0["user_id"] as? String == friend.path && $0["status"] as? String == "pending" }, "\(listedPending.text)")
            // Withdrawn by the owner, declined by the friend, then accepted.
            #expect(try await env.call(.delete, "\(members)/\(friend.path)", as: owner).status == .noContent)
            #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: friend).code == "space_not_found")
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "permission": "viewer"]).status == .created)
            #expect(try await env.call(.delete, "/v1/spaces/\(id)/invitation", as: friend).status == .noContent)
            #expect(try await env.call(.get, "/v1/spaces/invitations", as: friend).items.isEmpty)
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "permission": "editor"]).status == .created)
            let joined = try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: friend)
            #expect(joined.status == .ok && joined.json["permission"] as? String == "editor", "\(joined.text)")
            #expect(try await env.count("SELECT count(*) FROM space_account_invitations WHERE space_id = '\(id)'") == 0)
            let byEmail = try await env.call(.post, members, as: owner, json: ["email": "  \(colleague.email.uppercased()) ", "permission": "commenter"])
            #expect(byEmail.status == .created && byEmail.json["user_id"] is NSNull && byEmail.json["status"] as? String == "pending", "\(byEmail.text)")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: colleague).json["permission"] as? String == "commenter")

            // Already members, by either way; oneself; ownership is not given this way.
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "permission": "viewer"]).code == "already_member")
            // A member's address is pending like any other: the response tells nothing of who is a member.
            #expect(try await env.call(.post, members, as: owner, json: ["email": friend.email, "permission": "viewer"]).json["status"] as? String == "pending")
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": owner.path, "permission": "viewer"]).status == .badRequest)
            #expect(try await env.call(.post, members, as: owner, json: ["email": owner.email, "permission": "viewer"]).status == .badRequest)
            let asOwner = try await env.call(.post, members, as: owner, json: ["user_id": UUID().uuidString, "permission": "owner"])
            #expect(asOwner.code == "validation_failed" && asOwner.fieldErrors == ["permission"], "\(asOwner.text)")
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": friend.path, "email": friend.email, "permission": "viewer"]).code == "validation_failed")
            #expect(try await env.call(.post, members, as: owner, json: ["permission": "viewer"]).code == "validation_failed")
            #expect(try await env.call(.post, members, as: owner, json: ["email": "not an address", "permission": "viewer"]).fieldErrors == ["email"])
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": "nope", "permission": "viewer"]).status == .badRequest)
            #expect(try await env.call(.post, members, as: owner, json: ["user_id": UUID().uuidString, "permission": "viewer"]).status == .notFound)

            // An address without an account: pending, listed as such, once.
            let address = "\(TestEnvironment.uniqueName("later"))@example.com"
            let pending = try await env.call(.post, members, as: owner, json: ["email": address.uppercased(), "permission": "viewer"])
            #expect(pending.status == .created && pending.json["status"] as? String == "pending" && pending.json["email"] as? String == address, "\(pending.text)")
            #expect(pending.json["user_id"] is NSNull && pending.json["invited_at"] is String)
            #expect(try await env.call(.post, members, as: owner, json: ["email": address, "permission": "editor"]).code == "already_member")
            let listed = try await env.call(.get, members, as: friend)
            #expect(listed.status == .ok && listed.items.count == 5, "\(listed.text)")
            #expect(listed.items.first?["user_id"] as? String == owner.path && listed.items.first?["permission"] as? String == "owner")
            #expect(listed.items.contains { $0["email"] as? String == address && $0["status"] as? String == "pending" })

            // Someone registers the address without proving it: it is not found by address, and the
            // invitation waits.
            let squatter = try await env.user(email: "\(TestEnvironment.uniqueName("squat"))@example.com", verified: false)
            let squatted = try await env.call(.post, members, as: owner, json: ["email": squatter.email, "permission": "editor"])
            #expect(squatted.status == .created && squatted.json["status"] as? String == "pending", "\(squatted.text)")
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: squatter).status == .notFound)

            // The address registers and is proven: the invitation is offered to the account, which
            // joins when it says yes, with the invitation's permission.
            let later = try await env.user(email: address)
            try await waitUntil(.seconds(15)) { try await env.call(.get, "/v1/spaces/invitations", as: later).items.count == 1 }
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: later).code == "space_not_found")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: later).json["permission"] as? String == "viewer")
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE space_id = '\(id)' AND email_normalized = '\(address)'") == 0)
            let after = try await env.call(.get, members, as: later)
            #expect(after.items.filter { $0["status"] as? String == "active" }.count == 4, "\(after.text)")
            #expect(try await env.call(.get, "/v1/spaces", as: later).ids == [id])
        }
    }

    /// An account invited both by id and by address: the list shows what accepting gives (the
    /// account's invitation), before the address is proven and after; accepting answers both, so
    /// nothing of the account stays pending (withdrawing it would have removed the member).
    @Test func anAccountInvitedBothWaysIsOfferedOnceAndNeverBothMemberAndPending() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            try await env.grant(owner, tier: "team")
            let first = try await Self.space(env, of: owner, name: "First")
            let second = try await Self.space(env, of: owner, name: "Second")
            let proven = try await env.user()
            #expect(try await env.call(.post, "/v1/spaces/\(first)/members", as: owner, json: ["user_id": proven.path, "permission": "viewer"]).status == .created)
            #expect(try await env.call(.post, "/v1/spaces/\(first)/members", as: owner, json: ["email": proven.email, "permission": "editor"]).status == .created)
            let offered = try await env.call(.get, "/v1/spaces/invitations", as: proven)
            #expect(offered.items.count == 1 && offered.items.first?["permission"] as? String == "viewer", "\(offered.text)")
            #expect(try await env.call(.post, "/v1/spaces/\(first)/invitation/accept", as: proven).json["permission"] as? String == "viewer")
            #expect(try await env.call(.get, "/v1/spaces/invitations", as: proven).items.isEmpty)

            let unproven = try await env.user(verified: false)
            #expect(try await env.call(.post, "/v1/spaces/\(second)/members", as: owner, json: ["user_id": unproven.path, "permission": "viewer"]).status == .created)
            #expect(try await env.call(.post, "/v1/spaces/\(second)/members", as: owner, json: ["email": unproven.email, "permission": "commenter"]).status == .created)
            #expect(try await env.call(.get, "/v1/spaces/invitations", as: unproven).items.count == 1, "the account's, not yet the address's")
            // The address proven: its invitation is offered too, still pending (nobody is put in a
            // space without saying yes), listed once with what the account's offers.
            try await env.publish(UserEmailVerified(userID: unproven.id, email: unproven.email), userID: unproven.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(unproven.id)' AND email_verified") == 1 }
            #expect(try await env.call(.get, "/v1/spaces/\(second)", as: unproven).code == "space_not_found")
            let pending = try await env.call(.get, "/v1/spaces/\(second)/members", as: owner)
            #expect(!pending.items.contains { $0["user_id"] as? String == unproven.path && $0["status"] as? String == "active" }, "\(pending.text)")
            let both = try await env.call(.get, "/v1/spaces/invitations", as: unproven)
            #expect(both.items.count == 1 && both.items.first?["permission"] as? String == "viewer", "\(both.text)")
            #expect(try await env.call(.post, "/v1/spaces/\(second)/invitation/accept", as: unproven).json["permission"] as? String == "viewer")
            let listed = try await env.call(.get, "/v1/spaces/\(second)/members", as: owner)
            #expect(listed.items.filter { $0["user_id"] as? String == unproven.path }.map { $0["status"] as? String } == ["active"], "\(listed.text)")
            #expect(try await env.call(.get, "/v1/spaces/invitations", as: unproven).items.isEmpty)
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE space_id = '\(second)'") == 0, "both answered")
        }
    }

    /// Adding members needs the owner's collaboration: a free owner gets `requires_upgrade` naming
    /// the feature and the tier, but has every other permission on their own space.
    @Test func aFreeOwnerCannotShare() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let friend = try await env.user()
            let id = try await Self.space(env, of: owner)
            for body in [["user_id": friend.path, "permission": "viewer"], ["email": "\(TestEnvironment.uniqueName("nobody"))@example.com", "permission": "editor"]] {
                let reply = try await env.call(.post, "/v1/spaces/\(id)/members", as: owner, json: body)
                #expect(reply.status == .forbidden && reply.code == "requires_upgrade", "\(reply.text)")
                #expect(reply.json["feature"] as? String == "collaboration" && reply.json["required_tier"] as? String == "team", "\(reply.text)")
                #expect(reply.json["detail"] as? String == "Collaboration requires Team. Upgrade to unlock.")
            }
            #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(id)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE space_id = '\(id)'") == 0)
            // view, comment, edit, delete, invite for a free owner.
            let expected: [String?] = [nil, nil, nil, nil, "requires_upgrade"]
            for (action, answer) in zip(Self.actions, expected) {
                #expect(try await Self.check(env, action, in: id, as: owner) == answer, "\(action)")
            }
            #expect(try await env.call(.patch, "/v1/spaces/\(id)", as: owner, json: ["name": "Solo"]).status == .ok)

            try await env.grant(owner, tier: "team")
            try await Self.add(env, friend, as: "viewer", to: id, by: owner)
        }
    }

    /// When the owner's collaboration lapses the members keep `view`; their `comment` and `edit`, and
    /// the owner's `invite`, answer `requires_upgrade` until it returns. The owner keeps the rest.
    @Test func lapsedCollaborationLeavesViewOnly() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let editor = try await env.user()
            let commenter = try await env.user()
            let viewer = try await env.user()
            let extra = try await env.user()
            try await env.grant(owner, tier: "team")
            let id = try await Self.space(env, of: owner)
            try await Self.add(env, editor, as: "editor", to: id, by: owner)
            try await Self.add(env, commenter, as: "commenter", to: id, by: owner)
            try await Self.add(env, viewer, as: "viewer", to: id, by: owner)
            try await env.revokeGrants(owner)

            let table: [(String, any BearerHolder, [String?])] = [
                ("owner", owner, [nil, nil, nil, nil, "requires_upgrade"]),
                ("editor", editor, [nil, "requires_upgrade", "requires_upgrade", "owner_only", "owner_only"]),
                ("commenter", commenter, [nil, "requires_upgrade", "permission_denied", "owner_only", "owner_only"]),
                ("viewer", viewer, [nil, "permission_denied", "permission_denied", "owner_only", "owner_only"]),
            ]
            for (role, user, answers) in table {
                for (action, answer) in zip(Self.actions, answers) {
                    let got = try await Self.check(env, action, in: id, as: user)
                    #expect(got == answer, "\(role) \(action): \(got ?? "allowed")")
                }
                #expect(try await env.call(.get, "/v1/spaces/\(id)", as: user).status == .ok, "\(role)")
                #expect(try await env.call(.get, "/v1/spaces/\(id)/members", as: user).status == .ok, "\(role)")
            }
            let upgrade = try await env.call(.get, "/v1/spaces/\(id)/permissions?action=edit", as: editor)
            #expect(upgrade.json["feature"] as? String == "collaboration" && upgrade.json["required_tier"] as? String == "team", "\(upgrade.text)")

            // The routes that edit refuse the same way; the owner still renames, and may stop sharing.
            let rename = try await env.call(.patch, "/v1/spaces/\(id)", as: editor, json: ["name": "Edited"])
            #expect(rename.status == .forbidden && rename.code == "requires_upgrade", "\(rename.text)")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/members", as: owner, json: ["user_id": extra.path, "permission": "viewer"]).code == "requires_upgrade")
            #expect(try await env.call(.patch, "/v1/spaces/\(id)/members/\(viewer.path)", as: owner, json: ["permission": "editor"]).code == "requires_upgrade")
            #expect(try await env.call(.patch, "/v1/spaces/\(id)", as: owner, json: ["name": "Still mine"]).status == .ok)
            #expect(try await env.call(.delete, "/v1/spaces/\(id)/members/\(commenter.path)", as: owner).status == .noContent)

            // Back on team, the editor edits again.
            try await env.grant(owner, tier: "team")
            #expect(try await Self.check(env, "edit", in: id, as: editor) == nil)
            #expect(try await env.call(.patch, "/v1/spaces/\(id)", as: editor, json: ["name": "Edited"]).status == .ok)
        }
    }

    /// Ownership moves in two steps; offers and acceptances at once leave exactly one owner.
    @Test func concurrentTransfersLeaveOneOwner() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let b = try await env.user()
            let c = try await env.user()
            try await env.grant(owner, tier: "team")
            let id = try await Self.space(env, of: owner)
            try await Self.add(env, b, as: "editor", to: id, by: owner)
            try await Self.add(env, c, as: "viewer", to: id, by: owner)
            let owners = "SELECT count(*) FROM space_members WHERE space_id = '\(id)' AND permission = 'owner'"

            // Without an offer, and by someone who is not the owner.
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer/accept", as: b).code == "no_pending_transfer")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer", as: b, json: ["user_id": c.path]).code == "owner_only")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": UUID().uuidString]).code == "member_not_found")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": owner.path]).status == .badRequest)

            // A new offer replaces the old one.
            let first = try await env.call(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": b.path])
            #expect(first.status == .ok && first.json["pending_owner_id"] as? String == b.path, "\(first.text)")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": c.path]).json["pending_owner_id"] as? String == c.path)
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer/accept", as: b).code == "no_pending_transfer")

            // Two offers at once, then both accept at once: one wins.
            async let offerB = env.concurrentCall(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": b.path])
            async let offerC = env.concurrentCall(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": c.path])
            let offers = try await [offerB, offerC]
            #expect(offers == [.ok, .ok])
            async let acceptB = env.concurrentCall(.post, "/v1/spaces/\(id)/transfer/accept", as: b)
            async let acceptC = env.concurrentCall(.post, "/v1/spaces/\(id)/transfer/accept", as: c)
            let accepted = try await [acceptB, acceptC]
            #expect(accepted.filter { $0 == .ok }.count == 1 && accepted.filter { $0 == .conflict }.count == 1, "\(accepted)")
            #expect(try await env.count(owners) == 1)
            let winner: any BearerHolder = accepted[0] == .ok ? b : c
            let winnerPath = accepted[0] == .ok ? b.path : c.path
            let seen = try await env.call(.get, "/v1/spaces/\(id)", as: winner)
            #expect(seen.json["permission"] as? String == "owner" && seen.json["owner_id"] as? String == winnerPath && seen.json["pending_owner_id"] is NSNull)
            // The old owner is an editor now, and cannot transfer any more.
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: owner).json["permission"] as? String == "editor")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": b.path]).code == "owner_only")

            // One offer accepted twice at once, round the three of them: one acceptance, one owner.
            let people: [(any BearerHolder, String)] = [(owner, owner.path), (b, b.path), (c, c.path)]
            var current = try #require(people.firstIndex { $0.1 == winnerPath })
            for _ in 0..<4 {
                let next = (current + 1) % people.count
                let offered = try await env.call(.post, "/v1/spaces/\(id)/transfer", as: people[current].0, json: ["user_id": people[next].1])
                #expect(offered.status == .ok, "\(offered.text)")
                async let one = env.concurrentCall(.post, "/v1/spaces/\(id)/transfer/accept", as: people[next].0)
                async let two = env.concurrentCall(.post, "/v1/spaces/\(id)/transfer/accept", as: people[next].0)
                let both = try await [one, two]
                #expect(both.sorted { $0.code < $1.code } == [.ok, .conflict], "\(both)")
                #expect(try await env.count(owners) == 1)
                let listed = try await env.call(.get, "/v1/spaces/\(id)/members", as: people[current].0)
                #expect(listed.items.first?["user_id"] as? String == people[next].1 && listed.items.first?["permission"] as? String == "owner")
                #expect(listed.items.contains { $0["user_id"] as? String == people[current].1 && $0["permission"] as? String == "editor" })
                current = next
            }
            #expect(try await env.count(owners) == 1)
            #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(id)'") == 3)
        }
    }

    /// Members may leave; the owner cannot (transfer first). Only the owner removes or changes others.
    @Test func leavingAndRemoving() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let editor = try await env.user()
            let commenter = try await env.user()
            let viewer = try await env.user()
            try await env.grant(owner, tier: "team")
            let id = try await Self.space(env, of: owner)
            try await Self.add(env, editor, as: "editor", to: id, by: owner)
            try await Self.add(env, commenter, as: "commenter", to: id, by: owner)
            try await Self.add(env, viewer, as: "viewer", to: id, by: owner)
            let members = "/v1/spaces/\(id)/members"

            let stays = try await env.call(.delete, "\(members)/\(owner.path)", as: owner)
            #expect(stays.status == .conflict && stays.code == "owner_cannot_leave", "\(stays.text)")
            #expect(try await env.call(.delete, "\(members)/\(commenter.path)", as: editor).code == "owner_only")
            #expect(try await env.call(.delete, "\(members)/\(owner.path)", as: editor).code == "owner_only")
            #expect(try await env.call(.patch, "\(members)/\(viewer.path)", as: editor, json: ["permission": "editor"]).code == "owner_only")

            // The viewer leaves, and no longer sees the space.
            #expect(try await env.call(.delete, "\(members)/\(viewer.path)", as: viewer).status == .noContent)
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: viewer).code == "space_not_found")
            #expect(try await env.call(.get, "/v1/spaces", as: viewer).items.isEmpty)

            // The owner changes and removes members.
            let changed = try await env.call(.patch, "\(members)/\(commenter.path)", as: owner, json: ["permission": "viewer"])
            #expect(changed.status == .ok && changed.json["permission"] as? String == "viewer", "\(changed.text)")
            #expect(try await env.call(.patch, "\(members)/\(owner.path)", as: owner, json: ["permission": "editor"]).status == .conflict)
            #expect(try await env.call(.patch, "\(members)/\(commenter.path)", as: owner, json: ["permission": "owner"]).code == "validation_failed")
            #expect(try await env.call(.patch, "\(members)/\(viewer.path)", as: owner, json: ["permission": "editor"]).code == "member_not_found")
            #expect(try await env.call(.patch, "\(members)/not-a-uuid", as: owner, json: ["permission": "editor"]).status == .notFound)
            #expect(try await env.call(.delete, "\(members)/\(commenter.path)", as: owner).status == .noContent)
            #expect(try await env.call(.delete, "\(members)/\(commenter.path)", as: owner).code == "member_not_found")
            #expect(try await env.call(.delete, "\(members)/not-a-uuid", as: owner).status == .notFound)

            // An offer to a member who leaves lapses.
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": editor.path]).status == .ok)
            #expect(try await env.call(.delete, "\(members)/\(editor.path)", as: editor).status == .noContent)
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: owner).json["pending_owner_id"] is NSNull)
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer/accept", as: editor).code == "space_not_found")
            #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(id)'") == 1)
        }
    }

    /// `user.deleted`: an owned space passes to the earliest editor (else the earliest member), a
    /// space with no one else is deleted; the memberships and the offers to them go.
    @Test func aDeletedOwnersSpacesPassOn() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let earlyViewer = try await env.user()
            let firstEditor = try await env.user()
            let secondEditor = try await env.user()
            let other = try await env.user()
            try await env.grant(owner, tier: "team")
            try await env.grant(other, tier: "team")

            let shared = try await Self.space(env, of: owner, name: "Shared")
            try await Self.add(env, earlyViewer, as: "viewer", to: shared, by: owner)
            try await Self.add(env, firstEditor, as: "editor", to: shared, by: owner)
            try await Self.add(env, secondEditor, as: "editor", to: shared, by: owner)
            let viewersOnly = try await Self.space(env, of: owner, name: "Viewers only")
            try await Self.add(env, secondEditor, as: "commenter", to: viewersOnly, by: owner)
            try await Self.add(env, earlyViewer, as: "viewer", to: viewersOnly, by: owner)
            let lonely = try await Self.space(env, of: owner, name: "Lonely")
            let theirs = try await Self.space(env, of: other, name: "Theirs")
            try await Self.add(env, owner, as: "editor", to: theirs, by: other)
            #expect(try await env.call(.post, "/v1/spaces/\(theirs)/transfer", as: other, json: ["user_id": owner.path]).status == .ok)
            // An invitation the owner sent to an address with no account yet.
            let invited = try await env.call(
                .post, "/v1/spaces/\(shared)/members", as: owner, json: ["email": "\(TestEnvironment.uniqueName("invitee"))@example.com", "permission": "viewer"])
            #expect(invited.status == .created, "\(invited.text)")
            // Invitations by id still pending: one the owner sent, one to the owner.
            #expect(try await env.call(.post, "/v1/spaces/\(shared)/members", as: owner, json: ["user_id": other.path, "permission": "viewer"]).status == .created)
            let another = try await Self.space(env, of: other, name: "Another")
            #expect(try await env.call(.post, "/v1/spaces/\(another)/members", as: other, json: ["user_id": owner.path, "permission": "viewer"]).status == .created)

            try await env.publish(UserDeleted(userID: owner.id), userID: owner.id)
            try await waitUntil(.seconds(15)) {
                let memberships = try await env.count("SELECT count(*) FROM space_members WHERE user_id = '\(owner.id)'")
                let lonelySpaces = try await env.count("SELECT count(*) FROM spaces WHERE id = '\(lonely)'")
                return memberships == 0 && lonelySpaces == 0
            }
            let passed = try await env.call(.get, "/v1/spaces/\(shared)", as: firstEditor)
            #expect(passed.json["permission"] as? String == "owner" && passed.json["owner_id"] as? String == firstEditor.path, "\(passed.text)")
            #expect(try await env.call(.get, "/v1/spaces/\(shared)", as: secondEditor).json["permission"] as? String == "editor")
            #expect(try await env.call(.get, "/v1/spaces/\(shared)", as: earlyViewer).json["permission"] as? String == "viewer")
            // No editor: the earliest member (the commenter joined before the viewer).
            #expect(try await env.call(.get, "/v1/spaces/\(viewersOnly)", as: secondEditor).json["permission"] as? String == "owner")
            #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(lonely)'") == 0)
            let kept = try await env.call(.get, "/v1/spaces/\(theirs)", as: other)
            #expect(kept.json["permission"] as? String == "owner" && kept.json["pending_owner_id"] is NSNull, "\(kept.text)")
            #expect(try await env.call(.get, "/v1/spaces/\(theirs)/members", as: other).items.count == 1)
            for space in [shared, viewersOnly, theirs] {
                #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(space)' AND permission = 'owner'") == 1)
            }
            // No row names the deleted account: its invitations went too.
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE invited_by = '\(owner.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM space_account_invitations WHERE invited_by = '\(owner.id)' OR user_id = '\(owner.id)'") == 0)
            #expect(try await env.call(.get, "/v1/spaces/invitations", as: other).items.isEmpty)
        }
    }

    /// A member invited, an ownership offered or taken, while that account's deletion runs: each waits
    /// for it, then finds the tombstone and makes nothing that names the account.
    @Test func spaceWritesBesideADeletionWait() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            try await env.grant(owner, tier: "team")
            let space = try await Self.space(env, of: owner)

            let joining = try await env.user()
            let added = try await env.whileDeleting(joining.id) {
                try await env.call(.post, "/v1/spaces/\(space)/members", as: owner, json: ["user_id": joining.path, "permission": "editor"])
            }
            #expect(added.status == .notFound && added.code == "user_not_found", "\(added.text)")

            let offered = try await env.user()
            try await Self.add(env, offered, as: "editor", to: space, by: owner)
            let offer = try await env.whileDeleting(offered.id) {
                try await env.call(.post, "/v1/spaces/\(space)/transfer", as: owner, json: ["user_id": offered.path])
            }
            #expect(offer.status == .notFound && offer.code == "member_not_found", "\(offer.text)")

            let taking = try await env.user()
            try await Self.add(env, taking, as: "editor", to: space, by: owner)
            #expect(try await env.call(.post, "/v1/spaces/\(space)/transfer", as: owner, json: ["user_id": taking.path]).status == .ok)
            let taken = try await env.whileDeleting(taking.id) { try await env.call(.post, "/v1/spaces/\(space)/transfer/accept", as: taking) }
            #expect(taken.status == .unauthorized && taken.code == "account_deleted", "\(taken.text)")

            #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(space)' AND permission = 'owner' AND user_id = '\(owner.id)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM space_members WHERE user_id = '\(joining.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM space_account_invitations WHERE user_id = '\(joining.id)'") == 0)
        }
    }

    /// Two owners' deletions at once: the first passes its space to a member whose own deletion is
    /// running; that deletion waits for the pass, finds the space it now owns, and passes it on.
    @Test func aSpacePassedToAnAccountBeingDeletedPassesOn() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let heir = try await env.user()
            let next = try await env.user()
            try await env.grant(owner, tier: "team")
            let space = try await Self.space(env, of: owner)
            try await Self.add(env, heir, as: "editor", to: space, by: owner)
            try await Self.add(env, next, as: "viewer", to: space, by: owner)
            // The owner's deletion, in flight: the space passed to the heir, not yet committed.
            try await env.inOpenTransaction([
                "DELETE FROM space_members WHERE space_id = '\(space)' AND user_id = '\(owner.id)'",
                "UPDATE space_members SET permission = 'owner' WHERE space_id = '\(space)' AND user_id = '\(heir.id)'",
            ]) {
                try await env.publish(UserDeleted(userID: heir.id), userID: heir.id)
                try await env.awaitLockWait()
            }
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM space_members WHERE user_id = '\(heir.id)'") == 0 }
            let passed = try await env.call(.get, "/v1/spaces/\(space)", as: next)
            #expect(passed.json["permission"] as? String == "owner", "\(passed.text)")
        }
    }

    /// Bodies: malformed JSON, unknown fields, the name's rule; lists page; ids that are not UUIDs.
    @Test func bodiesIdsAndPages() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let owner = try await env.user()
            let json: HTTPFields = [.contentType: "application/json"]
            #expect(try await env.call(.post, "/v1/spaces", as: owner, raw: ByteBuffer(string: "{\"name\":"), headers: json).code == "malformed_json")
            let unknown = try await env.call(.post, "/v1/spaces", as: owner, json: ["name": "A", "color": "red"])
            #expect(unknown.code == "validation_failed" && unknown.fieldErrors == ["color"], "\(unknown.text)")
            let bads: [Any] = ["", "   ", String(repeating: "n", count: 101), "Evil\u{202E}name", 7]
            for bad in bads {
                let reply = try await env.call(.post, "/v1/spaces", as: owner, json: ["name": bad])
                #expect(reply.code == "validation_failed" && reply.fieldErrors == ["name"], "\(bad): \(reply.text)")
            }
            #expect(try await env.call(.post, "/v1/spaces", as: owner, json: [String: String]()).fieldErrors == ["name"])
            let longest = try await env.call(.post, "/v1/spaces", as: owner, json: ["name": String(repeating: "é", count: 100)])
            #expect(longest.status == .created, "\(longest.text)")
            let trimmed = try await env.call(.post, "/v1/spaces", as: owner, json: ["name": "  Lab notes \n"])
            #expect(trimmed.status == .created && trimmed.json["name"] as? String == "Lab notes" && trimmed.json["permission"] as? String == "owner")
            let id = try #require(trimmed.json["id"] as? String)
            #expect(try await env.call(.patch, "/v1/spaces/\(id)", as: owner, json: ["name": "B", "owner": "me"]).fieldErrors == ["owner"])
            #expect(try await env.call(.patch, "/v1/spaces/\(id)", as: owner, json: ["name": " "]).fieldErrors == ["name"])
            #expect(try await env.call(.patch, "/v1/spaces/\(id)", as: owner, raw: ByteBuffer(string: "[1"), headers: json).code == "malformed_json")
            #expect(try await env.call(.post, "/v1/spaces/\(id)/transfer", as: owner, json: ["user_id": "x"]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/spaces/\(id)/members", as: owner, json: ["user_id": owner.path, "permission": "viewer", "note": "hi"]).fieldErrors == ["note"])

            // The permissions endpoint needs a known action.
            #expect(try await env.call(.get, "/v1/spaces/\(id)/permissions", as: owner).code == "validation_failed")
            #expect(try await env.call(.get, "/v1/spaces/\(id)/permissions?action=fly", as: owner).fieldErrors == ["action"])
            #expect(try await env.call(.get, "/v1/spaces/\(id.uppercased())/permissions?action=view", as: owner).status == .ok)
            #expect(try await env.call(.get, "/v1/spaces/\(id)x", as: owner).code == "space_not_found")

            // Pages, newest first.
            _ = try await Self.space(env, of: owner, name: "Third")
            let first = try await env.call(.get, "/v1/spaces?limit=2", as: owner)
            #expect(first.items.count == 2 && first.items.first?["name"] as? String == "Third", "\(first.text)")
            let cursor = try #require(first.json["next_cursor"] as? String)
            let second = try await env.call(.get, "/v1/spaces?limit=2&cursor=\(cursor)", as: owner)
            #expect(second.items.count == 1 && second.json["next_cursor"] is NSNull, "\(second.text)")
            #expect(Set(first.ids + second.ids).count == 3)
            #expect(try await env.call(.get, "/v1/spaces?cursor=garbage", as: owner).code == "invalid_cursor")
            #expect(try await env.call(.get, "/v1/spaces?limit=0", as: owner).code == "validation_failed")
        }
    }
}
