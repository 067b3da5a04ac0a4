import Foundation

// The event payloads known so far. Each is defined once here and never copied into a service.

/// A new account exists, made by email sign-up or by Apple or Google.
public struct UserRegistered: EventPayload, Equatable {
    public static let eventType = "user.registered"
    public var userID: UUID
    public var email: String
    public var displayName: String?
    /// `email`, `apple` or `google`.
    public var provider: String

    public init(userID: UUID, email: String, displayName: String?, provider: String) {
        self.userID = userID
        self.email = email
        self.displayName = displayName
        self.provider = provider
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", email, displayName = "display_name", provider
    }
}

/// A user signed in and got a new session.
public struct UserSignedIn: EventPayload, Equatable {
    public static let eventType = "user.signed_in"
    public var userID: UUID
    public var sessionID: UUID
    public var provider: String

    public init(userID: UUID, sessionID: UUID, provider: String) {
        self.userID = userID
        self.sessionID = sessionID
        self.provider = provider
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", sessionID = "session_id", provider
    }
}

/// A user proved they own their email address.
public struct UserEmailVerified: EventPayload, Equatable {
    public static let eventType = "user.email_verified"
    public var userID: UUID
    public var email: String
    /// The sign-in provider (`apple`, `google`) that vouched for the address; nil when a mailed link
    /// proved it (and in events from before the field).
    public var vouchedBy: String?

    public init(userID: UUID, email: String, vouchedBy: String? = nil) {
        self.userID = userID
        self.email = email
        self.vouchedBy = vouchedBy
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", email, vouchedBy = "vouched_by"
    }
}

/// A user's roles changed; the new set is complete, not a difference.
public struct UserRolesChanged: EventPayload, Equatable {
    public static let eventType = "user.roles_changed"
    public var userID: UUID
    public var roles: [Role]
    package var added: [Role]
    public var removed: [Role]

    public init(userID: UUID, roles: [Role], added: [Role], removed: [Role]) {
        self.userID = userID
        self.roles = roles
        self.added = added
        self.removed = removed
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", roles, added, removed
    }
}

/// An account is gone; every service purges what it holds about the user.
public struct UserDeleted: EventPayload, Equatable {
    public static let eventType = "user.deleted"
    public var userID: UUID

    public init(userID: UUID) {
        self.userID = userID
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id"
    }
}

/// A coach's invitation was accepted; auth grants the `client` role on it.
public struct InvitationAccepted: EventPayload, Equatable {
    public static let eventType = "invitation.accepted"
    public var invitationID: UUID
    public var coachID: UUID
    public var clientID: UUID
    /// The coach's roster entry the invitation belonged to (the `id` of `GET /v1/clients`), so that
    /// what a coach planned for the entry before the acceptance follows the client's account. Nil in
    /// events written before the field existed.
    public var rosterEntryID: UUID?

    public init(invitationID: UUID, coachID: UUID, clientID: UUID, rosterEntryID: UUID? = nil) {
        self.invitationID = invitationID
        self.coachID = coachID
        self.clientID = clientID
        self.rosterEntryID = rosterEntryID
    }

    enum CodingKeys: String, CodingKey {
        case invitationID = "invitation_id", coachID = "coach_id", clientID = "client_id", rosterEntryID = "roster_entry_id"
    }
}

/// A coach added someone to their roster (`POST /v1/clients`): services that let a coach prepare
/// things for a client who has not accepted yet learn which roster entries are whose.
public struct ClientInvited: EventPayload, Equatable {
    public static let eventType = "client.invited"
    public var rosterEntryID: UUID
    public var coachID: UUID

    public init(rosterEntryID: UUID, coachID: UUID) {
        self.rosterEntryID = rosterEntryID
        self.coachID = coachID
    }

    enum CodingKeys: String, CodingKey {
        case rosterEntryID = "roster_entry_id", coachID = "coach_id"
    }
}

/// A coach deleted a roster entry (`DELETE /v1/clients/{id}`); a linked client is also unlinked
/// (`client.unlinked`, written before this).
public struct ClientRemoved: EventPayload, Equatable {
    public static let eventType = "client.removed"
    public var rosterEntryID: UUID
    public var coachID: UUID

    public init(rosterEntryID: UUID, coachID: UUID) {
        self.rosterEntryID = rosterEntryID
        self.coachID = coachID
    }

    enum CodingKeys: String, CodingKey {
        case rosterEntryID = "roster_entry_id", coachID = "coach_id"
    }
}

/// A coach and a client are no longer linked: the client left (`left`), the coach removed the
/// client (`removed`), the client switched to another coach (`switched`), either account was
/// deleted (`coach_deleted`, `client_deleted`), the coach no longer holds `coach`
/// (`coach_role_removed`), or the client took it (`became_coach`). auth takes `client` away unless
/// `hasOtherCoach`.
public struct ClientUnlinked: EventPayload, Equatable {
    public static let eventType = "client.unlinked"
    public var coachID: UUID
    public var clientID: UUID
    public var reason: Reason
    public var hasOtherCoach: Bool
    /// The coach's roster entry of the link; nil in events written before the field existed.
    public var rosterEntryID: UUID?

    public enum Reason: EventVocabulary {
        case left, removed, switched, coachDeleted, clientDeleted, coachRoleRemoved, becameCoach
        /// A reason added after this release.
        case unknown(String)

        public init(rawValue: String) {
            switch rawValue {
            case "left": self = .left
            case "removed": self = .removed
            case "switched": self = .switched
            case "coach_deleted": self = .coachDeleted
            case "client_deleted": self = .clientDeleted
            case "coach_role_removed": self = .coachRoleRemoved
            case "became_coach": self = .becameCoach
            default: self = .unknown(rawValue)
            }
        }

        public var rawValue: String {
            switch self {
            case .left: "left"
            case .removed: "removed"
            case .switched: "switched"
            case .coachDeleted: "coach_deleted"
            case .clientDeleted: "client_deleted"
            case .coachRoleRemoved: "coach_role_removed"
            case .becameCoach: "became_coach"
            case .unknown(let text): text
            }
        }
    }

    public init(coachID: UUID, clientID: UUID, reason: Reason, hasOtherCoach: Bool, rosterEntryID: UUID? = nil) {
        self.coachID = coachID
        self.clientID = clientID
        self.reason = reason
        self.hasOtherCoach = hasOtherCoach
        self.rosterEntryID = rosterEntryID
    }

    enum CodingKeys: String, CodingKey {
        case coachID = "coach_id", clientID = "client_id", reason, hasOtherCoach = "has_other_coach", rosterEntryID = "roster_entry_id"
    }
}

/// A user's password was set: by a reset link (`reset`, every session revoked) or by the signed-in
/// user (`change`); or removed (`disowned`: the address's owner, who had not signed up, took the
/// account over from whoever did; every session revoked).
public struct UserPasswordChanged: EventPayload, Equatable {
    public static let eventType = "user.password_changed"
    public var userID: UUID
    public var method: Method
    /// The address's owner has just proven it for the first time (a disowning verification, a
    /// provider that answers for the address, or a reset of an account never proven): whoever set the
    /// account up may be someone else, so every service drops what the account made until now. An
    /// event written before this field existed says so by `disowned` alone.
    public var makerDropped: Bool

    public enum Method: EventVocabulary {
        case reset, change, disowned
        /// A method added after this release.
        case unknown(String)

        public init(rawValue: String) {
            switch rawValue {
            case "reset": self = .reset
            case "change": self = .change
            case "disowned": self = .disowned
            default: self = .unknown(rawValue)
            }
        }

        public var rawValue: String {
            switch self {
            case .reset: "reset"
            case .change: "change"
            case .disowned: "disowned"
            case .unknown(let text): text
            }
        }
    }

    public init(userID: UUID, method: Method, makerDropped: Bool? = nil) {
        self.userID = userID
        self.method = method
        self.makerDropped = makerDropped ?? (method == .disowned)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        userID = try container.decode(UUID.self, forKey: .userID)
        method = try container.decode(Method.self, forKey: .method)
        makerDropped = try container.decodeIfPresent(Bool.self, forKey: .makerDropped) ?? (method == .disowned)
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", method, makerDropped = "maker_dropped"
    }
}

/// An admin disabled (`disabled: true`) or re-enabled an account. A disabled account cannot sign in
/// and has no sessions.
public struct UserStatusChanged: EventPayload, Equatable {
    public static let eventType = "user.status_changed"
    public var userID: UUID
    public var disabled: Bool

    public init(userID: UUID, disabled: Bool) {
        self.userID = userID
        self.disabled = disabled
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", disabled
    }
}

/// One allergy as a profile states it; nutrition checks meals against these.
public struct Allergy: Codable, Sendable, Equatable, Hashable {
    public enum Severity: String, Codable, Sendable, CaseIterable {
        case mild, moderate, severe
        case lifeThreatening = "life_threatening"
    }

    public var name: String
    public var severity: Severity

    public init(name: String, severity: Severity) {
        self.name = name
        self.severity = severity
    }
}

/// A profile's dietary data or its public card (display name, avatar) changed: the new values,
/// complete. Consumers compare with what they hold and use what they need (nutrition the dietary
/// data, invitations the card a coach's clients see).
public struct ProfileUpdated: EventPayload, Equatable {
    public static let eventType = "profile.updated"
    public var userID: UUID
    public var dietaryPreferences: [String]
    public var allergies: [Allergy]
    public var displayName: String?
    /// The avatar's path on the API (`/v1/profiles/{id}/avatar?v=…`), nil without one.
    public var avatarURL: String?

    public init(userID: UUID, dietaryPreferences: [String], allergies: [Allergy], displayName: String?, avatarURL: String?) {
        self.userID = userID
        self.dietaryPreferences = dietaryPreferences
        self.allergies = allergies
        self.displayName = displayName
        self.avatarURL = avatarURL
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", dietaryPreferences = "dietary_preferences", allergies, displayName = "display_name", avatarURL = "avatar_url"
    }
}

/// `followerID` now follows `followeeID` (directly, or by an approved request).
public struct FollowCreated: EventPayload, Equatable {
    public static let eventType = "follow.created"
    package var followerID: UUID
    package var followeeID: UUID

    public init(followerID: UUID, followeeID: UUID) {
        self.followerID = followerID
        self.followeeID = followeeID
    }

    enum CodingKeys: String, CodingKey {
        case followerID = "follower_id", followeeID = "followee_id"
    }
}

/// `requesterID` asked to follow the private profile `targetID`.
public struct FollowRequested: EventPayload, Equatable {
    public static let eventType = "follow.requested"
    package var requesterID: UUID
    package var targetID: UUID

    public init(requesterID: UUID, targetID: UUID) {
        self.requesterID = requesterID
        self.targetID = targetID
    }

    enum CodingKeys: String, CodingKey {
        case requesterID = "requester_id", targetID = "target_id"
    }
}

/// A follow ended: unfollowed, removed by the one followed, or by a block. (An account deletion removes follows too; other
/// services learn of it from `user.deleted` itself.)
public struct FollowRemoved: EventPayload, Equatable {
    public static let eventType = "follow.removed"
    package var followerID: UUID
    package var followeeID: UUID
    public var reason: Reason

    public enum Reason: EventVocabulary {
        /// By the follower.
        case unfollow
        /// By the one followed.
        case removed
        /// By a block, either way.
        case block
        /// A reason added after this release.
        case unknown(String)

        public init(rawValue: String) {
            switch rawValue {
            case "unfollow": self = .unfollow
            case "removed": self = .removed
            case "block": self = .block
            default: self = .unknown(rawValue)
            }
        }

        public var rawValue: String {
            switch self {
            case .unfollow: "unfollow"
            case .removed: "removed"
            case .block: "block"
            case .unknown(let text): text
            }
        }
    }

    public init(followerID: UUID, followeeID: UUID, reason: Reason) {
        self.followerID = followerID
        self.followeeID = followeeID
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case followerID = "follower_id", followeeID = "followee_id", reason
    }
}

/// `blockerID` blocked `blockedID`: services hide each one's content from the other.
public struct BlockCreated: EventPayload, Equatable {
    public static let eventType = "block.created"
    package var blockerID: UUID
    package var blockedID: UUID

    public init(blockerID: UUID, blockedID: UUID) {
        self.blockerID = blockerID
        self.blockedID = blockedID
    }

    enum CodingKeys: String, CodingKey {
        case blockerID = "blocker_id", blockedID = "blocked_id"
    }
}

/// A block was lifted.
public struct BlockRemoved: EventPayload, Equatable {
    public static let eventType = "block.removed"
    package var blockerID: UUID
    package var blockedID: UUID

    public init(blockerID: UUID, blockedID: UUID) {
        self.blockerID = blockerID
        self.blockedID = blockedID
    }

    enum CodingKeys: String, CodingKey {
        case blockerID = "blocker_id", blockedID = "blocked_id"
    }
}

/// A notification was stored for `userID`; published live on `user:<user_id>`.
public struct NotificationCreated: EventPayload, Equatable {
    public static let eventType = "notification.created"
    package var notificationID: UUID
    public var userID: UUID
    public var kind: Kind
    package var actorID: UUID?

    public enum Kind: EventVocabulary {
        case follow, followRequest, followAccepted
        /// A kind added after this release.
        case unknown(String)

        public init(rawValue: String) {
            switch rawValue {
            case "follow": self = .follow
            case "follow_request": self = .followRequest
            case "follow_accepted": self = .followAccepted
            default: self = .unknown(rawValue)
            }
        }

        public var rawValue: String {
            switch self {
            case .follow: "follow"
            case .followRequest: "follow_request"
            case .followAccepted: "follow_accepted"
            case .unknown(let text): text
            }
        }
    }

    public init(notificationID: UUID, userID: UUID, kind: Kind, actorID: UUID?) {
        self.notificationID = notificationID
        self.userID = userID
        self.kind = kind
        self.actorID = actorID
    }

    enum CodingKeys: String, CodingKey {
        case notificationID = "notification_id", userID = "user_id", kind, actorID = "actor_id"
    }
}

/// A user's entitlement changed (a purchase, a renewal, an expiry seen, a grant, a change of the
/// catalogue that touched their tier): other services that cache "may this user do this?" drop what
/// they hold for the user, and those that count something keep the user's caps.
public struct EntitlementChanged: EventPayload, Equatable {
    public static let eventType = "entitlement.changed"
    public var userID: UUID
    public var tier: String
    public var state: String
    public var features: [String: Bool]
    /// Limit name → the user's cap; `null` is unlimited. Absent from events written before it was added.
    public var limits: [String: Int?]?
    /// Limit name → the cheapest tier that would raise the user's cap; a limit no tier raises is absent.
    public var limitUpgrades: [String: LimitUpgrade]?

    public init(
        userID: UUID, tier: String, state: String, features: [String: Bool], limits: [String: Int?]? = nil, limitUpgrades: [String: LimitUpgrade]? = nil
    ) {
        self.userID = userID
        self.tier = tier
        self.state = state
        self.features = features
        self.limits = limits
        self.limitUpgrades = limitUpgrades
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", tier, state, features, limits, limitUpgrades = "limit_upgrades"
    }
}

/// The tier that would raise a cap, with its name for a message ("Upgrade to Pro for more").
public struct LimitUpgrade: Codable, Sendable, Equatable {
    public var tier: String
    public var name: String

    public init(tier: String, name: String) {
        self.tier = tier
        self.name = name
    }
}

/// The entitlements catalogue changed (or was announced for the first time): what a user whom no
/// purchase or grant names has, for services that keep caps of users no `entitlement.changed` has
/// named yet. Sent when entitlements starts with a catalogue other than the one it last announced,
/// in the same transaction as the `entitlement.changed` of every user the change touched.
public struct EntitlementCatalogChanged: EventPayload, Equatable {
    public static let eventType = "entitlement.catalog_changed"
    /// The tier of a user nothing names.
    public var defaultTier: String
    public var features: [String: Bool]
    /// Limit name → its cap for such a user; `null` is unlimited.
    public var limits: [String: Int?]
    public var limitUpgrades: [String: LimitUpgrade]

    public init(defaultTier: String, features: [String: Bool], limits: [String: Int?], limitUpgrades: [String: LimitUpgrade]) {
        self.defaultTier = defaultTier
        self.features = features
        self.limits = limits
        self.limitUpgrades = limitUpgrades
    }

    enum CodingKeys: String, CodingKey {
        case defaultTier = "default_tier", features, limits, limitUpgrades = "limit_upgrades"
    }
}

/// Sessions of `userID` ended: a sign-out, one ended from the session list, all of them (`all`:
/// sign-out everywhere, a password reset, a disabled account, a takeover), or those a password change
/// leaves behind. Their access tokens still verify until they expire; the gateway marks requests
/// bearing them for the services to refuse (`X-Session-Ended`), closes the live event streams
/// opened with them, and refuses new ones (docs/ARCHITECTURE.md, live events).
public struct SessionsEnded: EventPayload, Equatable {
    public static let eventType = "user.sessions_ended"
    public var userID: UUID
    public var sessionIDs: [UUID]
    /// Every session the user had ended; `sessionIDs` still lists them.
    public var all: Bool

    public init(userID: UUID, sessionIDs: [UUID], all: Bool) {
        self.userID = userID
        self.sessionIDs = sessionIDs
        self.all = all
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", sessionIDs = "session_ids", all
    }
}

/// A coach scheduled sessions for a client who has an account: the client's live news.
public struct WorkoutAssigned: EventPayload, Equatable {
    public static let eventType = "workout.assigned"
    public var coachID: UUID
    public var clientID: UUID
    public var workoutID: UUID
    public var sessionIDs: [UUID]
    /// The days the sessions are on, `YYYY-MM-DD`, in the order of `sessionIDs`.
    public var dates: [String]

    public init(coachID: UUID, clientID: UUID, workoutID: UUID, sessionIDs: [UUID], dates: [String]) {
        self.coachID = coachID
        self.clientID = clientID
        self.workoutID = workoutID
        self.sessionIDs = sessionIDs
        self.dates = dates
    }

    enum CodingKeys: String, CodingKey {
        case coachID = "coach_id", clientID = "client_id", workoutID = "workout_id", sessionIDs = "session_ids", dates
    }
}

/// A client logged a session (`completed` or `partial`): the coach's live news.
public struct WorkoutLogged: EventPayload, Equatable {
    public static let eventType = "workout.logged"
    public var sessionID: UUID
    public var coachID: UUID
    public var clientID: UUID
    public var status: String

    public init(sessionID: UUID, coachID: UUID, clientID: UUID, status: String) {
        self.sessionID = sessionID
        self.coachID = coachID
        self.clientID = clientID
        self.status = status
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id", coachID = "coach_id", clientID = "client_id", status
    }
}

/// A coach or a client commented on a session: the other one's live news.
public struct WorkoutCommented: EventPayload, Equatable {
    public static let eventType = "workout.commented"
    public var sessionID: UUID
    public var commentID: UUID
    public var authorID: UUID
    /// `coach` or `client`.
    public var authorRole: String
    public var text: String

    public init(sessionID: UUID, commentID: UUID, authorID: UUID, authorRole: String, text: String) {
        self.sessionID = sessionID
        self.commentID = commentID
        self.authorID = authorID
        self.authorRole = authorRole
        self.text = text
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id", commentID = "comment_id", authorID = "author_id", authorRole = "author_role", text
    }
}
