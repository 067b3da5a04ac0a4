/// What a user may do. auth owns the roles and puts them in the access token.
public enum Role: String, Codable, Sendable, CaseIterable, Hashable {
    /// Everyone.
    case user
    /// Verified badge.
    case creator
    case moderator
    case admin
    /// May add clients and send invitations; excludes `client`.
    case coach
    /// Linked to a coach by an accepted invitation; excludes `coach`.
    case client

    /// Roles that one account may not hold together.
    public static let exclusivePairs: [(Role, Role)] = [(.coach, .client)]
}
