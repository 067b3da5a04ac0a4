/// Every event type this release knows, each with the newest version of its shape. A consumer takes
/// a type missing here for one from a newer release, and says so (`events_ignored_total`); the
/// contract tests hold this list, the payloads in the code and the JSON Schemas in `schemas/` (one
/// `<type>.v<version>.json` each, docs/EVENTS.md) to each other.
public enum EventCatalog {
    public static let payloads: [any EventPayload.Type] = [
        UserRegistered.self, UserSignedIn.self, UserEmailVerified.self, UserRolesChanged.self, UserDeleted.self, UserPasswordChanged.self,
        UserStatusChanged.self, SessionsEnded.self,
        ProfileUpdated.self, FollowCreated.self, FollowRequested.self, FollowRemoved.self, BlockCreated.self, BlockRemoved.self,
        NotificationCreated.self,
        InvitationAccepted.self, ClientInvited.self, ClientRemoved.self, ClientUnlinked.self,
        EntitlementChanged.self, EntitlementCatalogChanged.self,
        WorkoutAssigned.self, WorkoutLogged.self, WorkoutCommented.self,
    ]

    /// Type → the newest version this release writes and reads.
    public static let versions: [String: Int] = Dictionary(uniqueKeysWithValues: payloads.map { ($0.eventType, $0.version) })
}
