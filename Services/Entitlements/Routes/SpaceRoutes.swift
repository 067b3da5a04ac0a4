import Foundation
import Hummingbird
import Logging
import PostgresNIO
import ServiceKit

/// Shared spaces: a space, its members and their permissions (`SpaceAccess` has the matrix and
/// what the owner's `collaboration` feature gates), invitations by address, and ownership moved in
/// two steps. Someone who is not a member gets `404 space_not_found` on every route, never 403:
/// whether a space exists is not revealed. Every change locks the space's row first.
struct SpaceRoutes {
    let entitlements: Entitlements
    let spaces = SpaceStore()
    let blocks = BlockStore()

    static let collaboration = "collaboration"

    func add(to router: Router<ServiceRequestContext>) {
        let group = router.group("v1/spaces", context: AuthenticatedContext.self)
        group.post(use: create)
        group.get(use: list)
        group.get(":id", use: space)
        group.patch(":id", use: rename)
        group.delete(":id", use: delete)
        group.get(":id/permissions", use: permission)
        group.get(":id/members", use: members)
        group.post(":id/members", use: addMember)
        group.patch(":id/members/:member", use: changeMember)
        group.delete(":id/members/:member", use: removeMember)
        group.post(":id/transfer", use: transfer)
        group.post(":id/transfer/accept", use: acceptTransfer)
        group.get("invitations", use: invitations)
        group.post(":id/invitation/accept", use: acceptInvitation)
        group.delete(":id/invitation", use: declineInvitation)
    }

    // MARK: bodies

    struct NameRequest: StrictJSONBody {
        var name: String
        enum CodingKeys: String, CodingKey, CaseIterable { case name }
    }

    struct AddMemberRequest: StrictJSONBody {
        var userID: UUID?
        var email: String?
        var permission: String
        enum CodingKeys: String, CodingKey, CaseIterable { case userID = "user_id", email, permission }
    }

    struct PermissionRequest: StrictJSONBody {
        var permission: String
        enum CodingKeys: String, CodingKey, CaseIterable { case permission }
    }

    struct TransferRequest: StrictJSONBody {
        var userID: UUID
        enum CodingKeys: String, CodingKey, CaseIterable { case userID = "user_id" }
    }

    // MARK: spaces

    @Sendable func create(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<SpaceView> {
        let body = try await request.decode(as: NameRequest.self, context: context)
        let name = try SpaceFields.name(body.name)
        let spaces = self.spaces
        let me = context.caller.userID
        let store = entitlements.store
        let view = try await entitlements.postgres.transaction(logger: context.logger) { connection -> SpaceView in
            // A deleted account's token outlives it: a space made now would outlive it too. The
            // owner's customer row too, made here, holding the account first: deciding a member's
            // action reads the owner's entitlement with the space locked, and must not make the row
            // (and hold the account) then.
            try await store.ensureLiveCustomer(me, on: connection, logger: context.logger)
            let id = try await spaces.create(name: name, owner: me, on: connection, logger: context.logger)
            return SpaceView(try await spaces.find(id, member: me, on: connection, logger: context.logger)!)
        }
        return EditedResponse(status: .created, response: view)
    }

    /// The spaces the caller owns or was given, newest first, each with the caller's permission.
    @Sendable func list(_ request: Request, context: AuthenticatedContext) async throws -> Page<SpaceView> {
        let page = try PageRequest(query: request)
        let after = try page.position(SpaceCursor.self)
        let spaces = self.spaces
        let rows = try await entitlements.postgres.withConnectionOnItsLoop { connection in
            try await spaces.list(member: context.caller.userID, limit: page.limit, after: after, on: connection, logger: context.logger)
        }
        let (items, next) = Cursor.page(rows, limit: page.limit) { SpaceCursor(createdAt: $0.createdAt, id: $0.id) }
        return Page(items: items.map(SpaceView.init), nextCursor: next)
    }

    @Sendable func space(_ request: Request, context: AuthenticatedContext) async throws -> SpaceView {
        let id = try context.spaceID()
        let spaces = self.spaces
        let found = try await entitlements.postgres.withConnectionOnItsLoop { connection in
            try await spaces.find(id, member: context.caller.userID, on: connection, logger: context.logger)
        }
        guard let found else { throw SpaceFields.notFound }
        return SpaceView(found)
    }

    /// Renames the space (`edit`: the owner, or an editor while the owner has collaboration).
    @Sendable func rename(_ request: Request, context: AuthenticatedContext) async throws -> SpaceView {
        let id = try context.spaceID()
        let body = try await request.decode(as: NameRequest.self, context: context)
        let name = try SpaceFields.name(body.name)
        let me = context.caller.userID
        return try await changing(id, context: context) { (space, connection) -> SpaceView in
            try await authorize(space, .edit, on: connection, logger: context.logger)
            try await spaces.rename(id, to: name, on: connection, logger: context.logger)
            return SpaceView(try await spaces.find(id, member: me, on: connection, logger: context.logger)!)
        }
    }

    /// Deletes the space with its members and invitations (the owner only).
    @Sendable func delete(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let id = try context.spaceID()
        try await changing(id, context: context) { (space, connection) -> Void in
            try await authorize(space, .delete, on: connection, logger: context.logger)
            try await spaces.delete(id, on: connection, logger: context.logger)
        }
        return .noContent
    }

    /// `?action=`: `200 {allowed: true}`, or the 403 the action itself would answer.
    @Sendable func permission(_ request: Request, context: AuthenticatedContext) async throws -> PermissionResponse {
        let id = try context.spaceID()
        guard let text = request.uri.queryParameters["action"].map(String.init), let action = SpaceAction(rawValue: text) else {
            throw APIError.validation([
                .init(field: "action", message: "must be one of \(SpaceAction.allCases.map(\.rawValue).joined(separator: ", "))")
            ])
        }
        let spaces = self.spaces
        try await entitlements.postgres.withConnectionOnItsLoop { connection -> Void in
            guard let space = try await spaces.find(id, member: context.caller.userID, on: connection, logger: context.logger) else {
                throw SpaceFields.notFound
            }
            try await authorize(space, action, on: connection, logger: context.logger)
        }
        return PermissionResponse(allowed: true)
    }

    // MARK: members

    /// The members (the owner first) and the invitations by address waiting for an account; to any member.
    @Sendable func members(_ request: Request, context: AuthenticatedContext) async throws -> MemberList {
        let id = try context.spaceID()
        let spaces = self.spaces
        // One snapshot: an invitee who accepts during the read is a member or invited, never neither.
        let rows = try await entitlements.postgres.snapshot(logger: context.logger) { connection -> [SpaceMemberRecord] in
            guard try await spaces.find(id, member: context.caller.userID, on: connection, logger: context.logger) != nil else {
                throw SpaceFields.notFound
            }
            return try await spaces.members(of: id, on: connection, logger: context.logger)
        }
        return MemberList(items: rows.map(MemberView.init))
    }

    /// Invites a member by `user_id` or by `email` (the owner, with collaboration): nobody is put in
    /// a space without saying yes. Either becomes an invitation (`pending`) that the account's holder
    /// accepts (`POST /v1/spaces/{id}/invitation/accept`) or declines. An address is invited whether
    /// an account has it or not, so the response does not tell the owner who has an account; an
    /// address that registers later is attached once proven.
    @Sendable func addMember(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<MemberView> {
        let id = try context.spaceID()
        let body = try await request.decode(as: AddMemberRequest.self, context: context)
        let permission = try SpaceFields.grantable(body.permission)
        let address: String?
        switch (body.userID, body.email) {
        case (.some, nil): address = nil
        case (nil, .some(let email)): address = try SpaceFields.email(email)
        default: throw APIError.validation([.init(field: "user_id", message: "give either user_id or email, not both")])
        }
        let me = context.caller.userID
        let named = body.userID.map { (account: $0, deleted: APIError.notFound("No account has that id.", code: "user_not_found")) }
        let view = try await changing(id, context: context, naming: named, lockingAddress: address) { (space, connection) -> MemberView in
            try await authorize(space, .invite, on: connection, logger: context.logger)
            if let user = body.userID {
                guard user != me else { throw SpaceFields.cannotAddSelf }
                // An account that blocks the owner, or that the owner blocks, answers as no account, as
                // social's profiles do.
                try await blocks.lockPair(user, me, on: connection, logger: context.logger)
                guard try await spaces.accountExists(user, on: connection, logger: context.logger),
                    try await !blocks.eitherBlocks(user, me, on: connection, logger: context.logger)
                else {
                    throw APIError.notFound("No account has that id.", code: "user_not_found")
                }
                guard try await spaces.member(user, of: id, on: connection, logger: context.logger) == nil else { throw SpaceFields.alreadyMember }
                guard try await spaces.invite(account: user, to: id, permission: permission, by: me, on: connection, logger: context.logger) else {
                    throw APIError.conflict("That person is already invited to this space.", code: "already_member")
                }
                return MemberView(try await spaces.invitation(account: user, to: id, on: connection, logger: context.logger)!)
            }
            guard let address else { throw SpaceFields.notFound }
            if try await spaces.email(of: me, on: connection, logger: context.logger) == address { throw SpaceFields.cannotAddSelf }
            guard try await spaces.invite(address, to: id, permission: permission, by: me, on: connection, logger: context.logger) else {
                throw APIError.conflict("That address is already invited to this space.", code: "already_member")
            }
            return MemberView(try await spaces.invitation(address, to: id, on: connection, logger: context.logger)!)
        }
        return EditedResponse(status: .created, response: view)
    }

    /// Changes a member's permission (the owner, with collaboration); the owner's own changes only by transfer.
    @Sendable func changeMember(_ request: Request, context: AuthenticatedContext) async throws -> MemberView {
        let id = try context.spaceID()
        let body = try await request.decode(as: PermissionRequest.self, context: context)
        let permission = try SpaceFields.grantable(body.permission)
        return try await changing(id, context: context) { (space, connection) -> MemberView in
            try await authorize(space, .invite, on: connection, logger: context.logger)
            let user = try context.memberID()
            guard user != space.ownerID else { throw SpaceFields.ownerFixed }
            guard try await spaces.member(user, of: id, on: connection, logger: context.logger) != nil else { throw SpaceFields.memberNotFound }
            try await spaces.setPermission(user, of: id, to: permission, on: connection, logger: context.logger)
            return MemberView(try await spaces.member(user, of: id, on: connection, logger: context.logger)!)
        }
    }

    /// The owner removes a member or withdraws an invitation to an account, or a member leaves (their
    /// own `user_id`). The owner cannot leave: they transfer ownership first. Removing needs no
    /// collaboration, so a lapsed owner can stop sharing.
    @Sendable func removeMember(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let id = try context.spaceID()
        let me = context.caller.userID
        try await changing(id, context: context) { (space, connection) -> Void in
            let user = try context.memberID()
            if user == me {
                guard space.permission != .owner else {
                    throw APIError.conflict("The owner cannot leave the space; transfer ownership first.", code: "owner_cannot_leave")
                }
            } else {
                guard space.permission == .owner else { throw SpaceFields.ownerOnly }
            }
            guard try await spaces.removeMember(user, from: id, on: connection, logger: context.logger) else { throw SpaceFields.memberNotFound }
        }
        return .noContent
    }

    // MARK: invitations by address, to their account

    /// The invitations to the caller's account and to its proven address, newest first: each space's
    /// id and name, the permission offered, and when. An address not proven yet has none (it may be
    /// someone else's). A space that invited both ways is listed once, with what the account's
    /// invitation offers, as accepting gives.
    @Sendable func invitations(_ request: Request, context: AuthenticatedContext) async throws -> SpaceInvitationList {
        let spaces = self.spaces
        let me = context.caller.userID
        let items = try await entitlements.postgres.withConnectionOnItsLoop { connection -> [SpaceInvitationRecord] in
            var items = try await spaces.invitations(of: me, on: connection, logger: context.logger)
            if let address = try await spaces.provenEmail(of: me, on: connection, logger: context.logger) {
                items += try await spaces.invitations(to: address, heldBy: me, on: connection, logger: context.logger)
            }
            return items
        }
        // The account's invitations come first in `items`, and so are the ones kept.
        var seen = Set<UUID>()
        let offered = items.filter { seen.insert($0.spaceID).inserted }.sorted { ($0.invitedAt, $0.spaceID.uuidString) > ($1.invitedAt, $1.spaceID.uuidString) }
        return SpaceInvitationList(items: offered.map(SpaceInvitationView.init))
    }

    /// The caller accepts an invitation to their account or to their proven address: they become a
    /// member with the permission offered (by the account's invitation when both came; one already a
    /// member keeps theirs), and the invitations are gone. Without one, `404 space_not_found`, as for
    /// any space the caller is not in.
    @Sendable func acceptInvitation(_ request: Request, context: AuthenticatedContext) async throws -> SpaceView {
        let id = try context.spaceID()
        let me = context.caller.userID
        return try await answeringInvitation(id, context: context) { (permission, connection) -> SpaceView in
            _ = try await spaces.addMember(me, to: id, permission: permission, on: connection, logger: context.logger)
            return SpaceView(try await spaces.find(id, member: me, on: connection, logger: context.logger)!)
        }
    }

    /// The caller declines an invitation to their account or proven address; the owner sees it no more.
    @Sendable func declineInvitation(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let id = try context.spaceID()
        try await answeringInvitation(id, context: context) { (_, _) -> Void in }
        return .noContent
    }

    /// A transaction that takes the caller's proven address's lock and the space's, in the order
    /// `changing` takes them, then takes the invitations to the caller's account and address and runs
    /// `body` with the permission offered; `404 space_not_found` without one.
    func answeringInvitation<Result: Sendable>(
        _ id: UUID, context: AuthenticatedContext, _ body: (SpacePermission, PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let spaces = self.spaces
        let me = context.caller.userID
        return try await entitlements.postgres.transaction(logger: context.logger) { connection -> Result in
            try await connection.requireLiveAccount(me, logger: context.logger)
            let address = try await spaces.provenEmail(of: me, on: connection, logger: context.logger)
            if let address { try await spaces.lockAddress(address, on: connection, logger: context.logger) }
            guard try await spaces.lock(id, on: connection, logger: context.logger) else { throw SpaceFields.notFound }
            let toAccount = try await spaces.takeInvitation(account: me, to: id, on: connection, logger: context.logger)
            var toAddress: SpacePermission?
            if let address { toAddress = try await spaces.takeInvitation(address, heldBy: me, to: id, on: connection, logger: context.logger) }
            guard let permission = toAccount ?? toAddress else { throw SpaceFields.notFound }
            return try await body(permission, connection)
        }
    }

    // MARK: ownership

    /// The owner offers ownership to a member; a new offer replaces the old one.
    @Sendable func transfer(_ request: Request, context: AuthenticatedContext) async throws -> SpaceView {
        let id = try context.spaceID()
        let body = try await request.decode(as: TransferRequest.self, context: context)
        let me = context.caller.userID
        return try await changing(id, context: context, naming: (body.userID, SpaceFields.memberNotFound)) { (space, connection) -> SpaceView in
            guard space.permission == .owner else { throw SpaceFields.ownerOnly }
            guard body.userID != me else {
                throw APIError.validation([.init(field: "user_id", message: "is you; name another member of the space")])
            }
            guard try await spaces.member(body.userID, of: id, on: connection, logger: context.logger) != nil else { throw SpaceFields.memberNotFound }
            try await spaces.offerOwnership(of: id, to: body.userID, on: connection, logger: context.logger)
            return SpaceView(try await spaces.find(id, member: me, on: connection, logger: context.logger)!)
        }
    }

    /// The member offered ownership takes it; the old owner becomes an editor.
    @Sendable func acceptTransfer(_ request: Request, context: AuthenticatedContext) async throws -> SpaceView {
        let id = try context.spaceID()
        let me = context.caller.userID
        return try await changing(id, context: context) { (space, connection) -> SpaceView in
            guard space.pendingOwnerID == me, space.permission != .owner else {
                throw APIError.conflict("There is no transfer of this space waiting for you.", code: "no_pending_transfer")
            }
            try await spaces.acceptOwnership(of: id, by: me, on: connection, logger: context.logger)
            return SpaceView(try await spaces.find(id, member: me, on: connection, logger: context.logger)!)
        }
    }

    // MARK: helpers

    /// A transaction that locks the space's row and reads it as the caller sees it (404 for a
    /// non-member), then runs `body`. The caller's account is held first, and the account `naming`
    /// gives (a member added by id, an owner offered the space), whose deletion meanwhile is that
    /// answer (`holdLiveAccount`): a membership or an offer made while a deletion runs is found by
    /// it. `lockingAddress` then takes the address's lock (see `SpaceStore.lockAddress`), before the
    /// row's, as accepting an invitation does.
    func changing<Result: Sendable>(
        _ id: UUID, context: AuthenticatedContext, naming other: (account: UUID, deleted: APIError)? = nil, lockingAddress address: String? = nil,
        _ body: (SpaceRecord, PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let spaces = self.spaces
        let store = entitlements.store
        let me = context.caller.userID
        return try await entitlements.postgres.transaction(logger: context.logger) { connection -> Result in
            try await connection.requireLiveAccount(me, logger: context.logger)
            if let other, other.account != me, try await !connection.holdLiveAccount(other.account, logger: context.logger) { throw other.deleted }
            if let address { try await spaces.lockAddress(address, on: connection, logger: context.logger) }
            guard try await spaces.lock(id, on: connection, logger: context.logger),
                let space = try await spaces.find(id, member: me, on: connection, logger: context.logger)
            else { throw SpaceFields.notFound }
            return try await body(space, connection)
        }
    }

    /// Throws the problem that refuses `action` to the member, if any: `permission_denied`,
    /// `owner_only`, or `requires_upgrade` when the owner's `collaboration` is needed and missing.
    /// The owner's entitlement is read only when the decision depends on it.
    func authorize(_ space: SpaceRecord, _ action: SpaceAction, on connection: PostgresConnection, logger: Logger) async throws {
        var collaboration = true
        if SpaceAccess.permits(space.permission, action), SpaceAccess.needsCollaboration(space.permission, action) {
            collaboration = try await entitlements.current(space.ownerID, on: connection, logger: logger).has(Self.collaboration)
        }
        switch SpaceAccess.decide(space.permission, action, ownerHasCollaboration: collaboration) {
        case .allowed: return
        case .permissionDenied: throw SpaceFields.permissionDenied
        case .ownerOnly: throw SpaceFields.ownerOnly
        case .requiresUpgrade: throw entitlements.upgradeProblem(feature: Self.collaboration)
        }
    }
}

// MARK: views

/// A space as the caller sees it, with the caller's permission: every field present,
/// `pending_owner_id` null when no transfer waits.
struct SpaceView: Codable, Sendable {
    var id: UUID
    var name: String
    var permission: String
    var ownerID: UUID
    @Nullable var pendingOwnerID: UUID?
    var createdAt: Date
    var updatedAt: Date

    init(_ space: SpaceRecord) {
        id = space.id
        name = space.name
        permission = space.permission.rawValue
        ownerID = space.ownerID
        pendingOwnerID = space.pendingOwnerID
        createdAt = space.createdAt
        updatedAt = space.updatedAt
    }

    enum CodingKeys: String, CodingKey {
        case createdAt = "created_at", id, name, ownerID = "owner_id", pendingOwnerID = "pending_owner_id", permission, updatedAt = "updated_at"
    }
}

extension SpaceView: ResponseEncodable {}

/// A member (`status: active`, `user_id` and `joined_at`), an invitation by address (`status:
/// pending`, `email` and `invited_at`) or one to an account (`status: pending`, `user_id` and
/// `invited_at`); the other fields null.
struct MemberView: Codable, Sendable {
    @Nullable var email: String?
    @Nullable var invitedAt: Date?
    @Nullable var joinedAt: Date?
    var permission: String
    var status: String
    @Nullable var userID: UUID?

    init(_ member: SpaceMemberRecord) {
        email = member.email
        invitedAt = member.isPending ? member.since : nil
        joinedAt = member.isPending ? nil : member.since
        permission = member.permission.rawValue
        status = member.isPending ? "pending" : "active"
        userID = member.userID
    }

    enum CodingKeys: String, CodingKey {
        case email, invitedAt = "invited_at", joinedAt = "joined_at", permission, status, userID = "user_id"
    }
}

extension MemberView: ResponseEncodable {}

struct MemberList: Codable, Sendable, ResponseEncodable {
    var items: [MemberView]
}

/// An invitation to the caller's account or address: the space, the permission offered, and when.
struct SpaceInvitationView: Codable, Sendable {
    var invitedAt: Date
    var name: String
    var permission: String
    var spaceID: UUID

    init(_ invitation: SpaceInvitationRecord) {
        invitedAt = invitation.invitedAt
        name = invitation.name
        permission = invitation.permission.rawValue
        spaceID = invitation.spaceID
    }

    enum CodingKeys: String, CodingKey {
        case invitedAt = "invited_at", name, permission, spaceID = "space_id"
    }
}

struct SpaceInvitationList: Codable, Sendable, ResponseEncodable {
    var items: [SpaceInvitationView]
}

struct PermissionResponse: Codable, Sendable, ResponseEncodable {
    var allowed: Bool
}

// MARK: rules and problems

/// The rules of a space's fields, and the problems the space routes share.
enum SpaceFields {
    static let notFound = APIError.notFound("No such space.", code: "space_not_found")
    static let memberNotFound = APIError.notFound("That user is not a member of this space.", code: "member_not_found")
    static let permissionDenied = APIError(.forbidden, code: "permission_denied", detail: "You don't have permission for this action.")
    static let ownerOnly = APIError(.forbidden, code: "owner_only", detail: "Only the owner can perform this action.")
    static let alreadyMember = APIError.conflict("That person is already a member of this space.", code: "already_member")
    static let cannotAddSelf = APIError(.badRequest, code: "cannot_add_self", detail: "You are already in this space; add someone else.")
    static let ownerFixed = APIError.conflict(
        "The owner's permission changes only by a transfer of ownership.", code: "owner_cannot_change")

    /// 1 to 100 characters after trimming, without control or invisible formatting characters.
    static func name(_ text: String) throws -> String {
        let name = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !name.isEmpty, text.unicodeScalars.count <= 100, !name.hasInvisibleCharacters() else {
            throw APIError.validation([.init(field: "name", message: "must be 1 to 100 characters without control or invisible formatting characters")])
        }
        return name
    }

    /// A permission the owner can give: editor, commenter or viewer (ownership moves by transfer).
    static func grantable(_ text: String) throws -> SpacePermission {
        guard let permission = SpacePermission(rawValue: text), SpacePermission.grantable.contains(permission) else {
            throw APIError.validation([
                .init(field: "permission", message: "must be one of \(SpacePermission.grantable.map(\.rawValue).joined(separator: ", "))")
            ])
        }
        return permission
    }

    /// The address in its canonical form; a look-alike spelling of another address is refused like
    /// any invalid one (`400 invalid_email`), so it cannot be invited in that address's place.
    static func email(_ text: String) throws -> String {
        guard let email = EmailAddress(text)?.canonical else {
            throw APIError(
                .badRequest, code: "invalid_email",
                detail:
                    "\"\(text.prefix(100))\" is not a valid email address: type it in plain characters (no fullwidth letters, ligatures or look-alike signs such as the Kelvin sign for K).",
                errors: [.init(field: "email", message: "is not a valid email address")])
        }
        return email
    }
}

extension AuthenticatedContext {
    /// The UUID in the `:id` path segment; anything else is 404 like an unknown space.
    func spaceID() throws -> UUID {
        guard let id = parameters.get("id").flatMap(UUID.init(parsing:)) else { throw SpaceFields.notFound }
        return id
    }

    /// The UUID in the `:member` path segment; anything else is 404 like a user who is not a member.
    func memberID() throws -> UUID {
        guard let id = parameters.get("member").flatMap(UUID.init(parsing:)) else { throw SpaceFields.memberNotFound }
        return id
    }
}
