/// A member's permission in a shared space. Every space has exactly one `owner`.
enum SpacePermission: String, Sendable, Codable, CaseIterable {
    case owner, editor, commenter, viewer

    /// The permissions the owner can give someone (ownership moves only by transfer).
    static let grantable: [SpacePermission] = [.editor, .commenter, .viewer]
}

/// What a member may ask to do in a space.
enum SpaceAction: String, Sendable, CaseIterable {
    /// Read the space and its members.
    case view
    case comment
    /// Rename the space.
    case edit
    /// Delete the space.
    case delete
    /// Add members, change their permission, remove them.
    case invite

    /// Actions only the owner may take: refused to others as `owner_only`, not `permission_denied`.
    var isOwnerOnly: Bool { self == .delete || self == .invite }
}

/// The response to "may this member do this?".
enum SpaceDecision: Equatable, Sendable {
    case allowed
    /// `403 permission_denied`: the member's permission does not include the action.
    case permissionDenied
    /// `403 owner_only`: an owner-only action (delete, invite) asked by someone else.
    case ownerOnly
    /// `403 requires_upgrade`: the permission includes the action, but the space's owner has no
    /// `collaboration` (any more).
    case requiresUpgrade
}

/// The permission matrix, as pure functions.
///
/// | action  | owner | editor | commenter | viewer |
/// |---------|-------|--------|-----------|--------|
/// | view    | yes   | yes    | yes       | yes    |
/// | comment | yes   | yes    | yes       | no     |
/// | edit    | yes   | yes    | no        | no     |
/// | delete  | yes   | owner only | owner only | owner only |
/// | invite  | yes   | owner only | owner only | owner only |
///
/// Sharing is what the owner's `collaboration` feature pays for. When it lapses (or was never
/// there) the members keep `view`, and what they do together — `comment` and `edit` by anyone but
/// the owner — answers `requires_upgrade` until it returns, as does the owner's `invite`. The owner
/// has every other permission on their own space whatever their tier: `view`, `comment`, `edit`
/// (rename) and `delete`. Removing a member, leaving and transferring ownership need no
/// collaboration (they undo sharing, and a lapsed owner must be able to stop sharing); adding
/// members and changing a member's permission do, as `invite`.
///
/// The role is checked first: an action the permission does not include is `permission_denied` or
/// `owner_only` whatever the owner's tier, so a viewer never learns about the owner's plan.
enum SpaceAccess {
    /// Whether the permission includes the action, the owner's tier aside.
    static func permits(_ permission: SpacePermission, _ action: SpaceAction) -> Bool {
        switch action {
        case .view: true
        case .comment: permission != .viewer
        case .edit: permission == .owner || permission == .editor
        case .delete, .invite: permission == .owner
        }
    }

    /// Whether the action, for this permission, needs the owner's `collaboration` feature: only
    /// adding members, and the members' own actions.
    static func needsCollaboration(_ permission: SpacePermission, _ action: SpaceAction) -> Bool {
        switch action {
        case .view, .delete: false
        case .invite: true
        case .comment, .edit: permission != .owner
        }
    }

    /// The whole decision; `ownerHasCollaboration` is read only where `needsCollaboration` says so.
    static func decide(_ permission: SpacePermission, _ action: SpaceAction, ownerHasCollaboration: Bool) -> SpaceDecision {
        guard permits(permission, action) else { return action.isOwnerOnly ? .ownerOnly : .permissionDenied }
        if needsCollaboration(permission, action), !ownerHasCollaboration { return .requiresUpgrade }
        return .allowed
    }
}
