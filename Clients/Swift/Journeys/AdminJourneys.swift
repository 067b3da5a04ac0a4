import FoodBackendAPI
import FoodBackendClient
import Foundation

/// An admin made by the operator (`auth create-admin`) signs in to the app.
func signedInAdmin() async throws -> AppUser {
    let email = uniqueEmail("admin")
    let password = "swift journey admin password"
    _ = try await fixture("admin", ["email": email, "password": password])
    let app = newApp()
    let signIn = try await app.signIn(email: email, password: password)
    try await expect(await app.currentSession?.roles.contains("admin") == true, "the admin role in the token")
    return AppUser(app: app, email: email, password: password, id: signIn.user.id)
}

/// A shared space: collaboration needs Team, so inviting is `requires_upgrade` until an admin grants
/// it; then a member joins, is given another permission, receives the space, and it is deleted.
func aSpaceNeedsTeamUntilAnAdminGrantsIt() async throws {
    let admin = try await signedInAdmin()
    let owner = try await signUp("space-owner", verified: true)
    let member = try await signUp("space-member", verified: true)
    let space = try await owner.app.send { try await $0.postV1Spaces(body: .json(.init(name: "Journey kitchen"))).created.body.json }
    do {
        _ = try await owner.app.send {
            try await $0.postV1SpacesIdMembers(path: .init(id: space.id), body: .json(.init(email: member.email, permission: .editor))).created.body.json
        }
        throw JourneyFailure(description: "a free owner invited a member")
    } catch let error as FoodBackendError {
        guard case .requiresUpgrade(let tier) = error.code, tier == "team" else { throw JourneyFailure(description: "expected requires_upgrade to team: \(error)") }
    }

    let grant = try await admin.app.send {
        try await $0.postV1AdminEntitlementsUserIdGrants(
            path: .init(userId: owner.id), body: .json(.init(reason: "journey", tier: "team", until: Date().addingTimeInterval(86_400)))
        ).created.body.json
    }
    let explanation = try await admin.app.send { try await $0.getV1AdminEntitlementsUserIdExplain(path: .init(userId: owner.id)).ok.body.json }
    _ = explanation
    _ = try await eventually("the owner's Team tier") {
        let me = try await owner.app.send { try await $0.getV1EntitlementsMe().ok.body.json }
        return me.tier == "team" ? me : nil
    }
    _ = try await owner.app.send {
        try await $0.postV1SpacesIdMembers(path: .init(id: space.id), body: .json(.init(email: member.email, permission: .editor))).created.body.json
    }
    // The invitations are listed to an address entitlements knows is proven, which it learns from
    // auth's user.email_verified a moment after the member confirmed it: the app's list fills then.
    _ = try await eventually("the member's invitation") {
        let invitations = try await member.app.send { try await $0.getV1SpacesInvitations().ok.body.json }
        return invitations.items.contains { $0.spaceId == space.id } ? invitations : nil
    }
    _ = try await member.app.send { try await $0.postV1SpacesIdInvitationAccept(path: .init(id: space.id)).ok.body.json }
    let spaces = try await member.app.send { try await $0.getV1Spaces().ok.body.json }
    try expect(spaces.items.contains { $0.id == space.id }, "the member's spaces")
    _ = try await member.app.send { try await $0.getV1SpacesId(path: .init(id: space.id)).ok.body.json }
    _ = try await owner.app.send { try await $0.patchV1SpacesId(path: .init(id: space.id), body: .json(.init(name: "Journey kitchen 2"))).ok.body.json }
    let members = try await owner.app.send { try await $0.getV1SpacesIdMembers(path: .init(id: space.id)).ok.body.json }
    try expect(members.items.count >= 2, "owner and member: \(members)")
    _ = try await owner.app.send {
        try await $0.patchV1SpacesIdMembersUserId(path: .init(id: space.id, userId: member.id), body: .json(.init(permission: .commenter))).ok.body.json
    }
    let may = try await member.app.send { try await $0.getV1SpacesIdPermissions(path: .init(id: space.id), query: .init(action: .comment)).ok.body.json }
    _ = may

    // A third person is invited and declines; the space is given to the member, who removes the old owner.
    let guest = try await signUp("space-guest", verified: true)
    _ = try await owner.app.send {
        try await $0.postV1SpacesIdMembers(path: .init(id: space.id), body: .json(.init(email: guest.email, permission: .viewer))).created.body.json
    }
    _ = try await eventually("the guest's invitation") {
        let invitations = try await guest.app.send { try await $0.getV1SpacesInvitations().ok.body.json }
        return invitations.items.contains { $0.spaceId == space.id } ? invitations : nil
    }
    _ = try await guest.app.send { try await $0.deleteV1SpacesIdInvitation(path: .init(id: space.id)).noContent }
    _ = try await owner.app.send { try await $0.postV1SpacesIdTransfer(path: .init(id: space.id), body: .json(.init(userId: member.id))).ok.body.json }
    _ = try await member.app.send { try await $0.postV1SpacesIdTransferAccept(path: .init(id: space.id)).ok.body.json }
    _ = try await member.app.send { try await $0.deleteV1SpacesIdMembersUserId(path: .init(id: space.id, userId: owner.id)).noContent }
    _ = try await member.app.send { try await $0.deleteV1SpacesId(path: .init(id: space.id)).noContent }
    _ = try await admin.app.send { try await $0.deleteV1AdminEntitlementsUserIdGrantsGrantId(path: .init(userId: owner.id, grantId: grant.id)).noContent }
}

/// An admin's and a moderator's tools: the user list, roles, disabling, hiding a profile, warnings.
func anAdminModeratesAUser() async throws {
    let admin = try await signedInAdmin()
    let user = try await signUp("moderated", displayName: "Moderated Cook")
    let users = try await admin.app.send { try await $0.getV1AdminUsers(query: .init(query: user.email, limit: 5)).ok.body.json }
    try expect((users.items ?? []).map(\.id) == [user.id], "the search by address finds the one user")
    _ = try await admin.app.send { try await $0.postV1AdminUsersIdRolesRole(path: .init(id: user.id, role: .moderator)).ok.body.json }
    _ = try await admin.app.send { try await $0.deleteV1AdminUsersIdRolesRole(path: .init(id: user.id, role: .moderator)).ok.body.json }
    _ = try await eventually("the user's profile, seen by the admin") {
        try? await admin.app.send { try await $0.getV1ProfilesId(path: .init(id: user.id)).ok.body.json }
    }
    _ = try await admin.app.send { try await $0.postV1ModerationProfilesIdHide(path: .init(id: user.id)).ok.body.json }
    _ = try await admin.app.send { try await $0.postV1ModerationProfilesIdUnhide(path: .init(id: user.id)).ok.body.json }
    _ = try await admin.app.send {
        try await $0.postV1ModerationUsersIdWarnings(path: .init(id: user.id), body: .json(.init(reason: "Please keep it civil."))).created.body.json
    }
    let warnings = try await admin.app.send { try await $0.getV1ModerationUsersIdWarnings(path: .init(id: user.id)).ok.body.json }
    try expect(!warnings.items.isEmpty, "the warning listed")
    let mine = try await user.app.send { try await $0.getV1ProfilesMeWarnings().ok.body.json }
    try expect(!mine.items.isEmpty, "the user sees the warning")
    _ = try await admin.app.send { try await $0.postV1AdminUsersIdDisable(path: .init(id: user.id)).ok.body.json }
    try await expectProblem("account_disabled", "a disabled account's sign-in") { try await newApp().signIn(email: user.email, password: user.password) }
    _ = try await admin.app.send { try await $0.postV1AdminUsersIdEnable(path: .init(id: user.id)).ok.body.json }
    _ = try await newApp().signIn(email: user.email, password: user.password)
}
