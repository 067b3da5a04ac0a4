import Foundation
import ServiceKit

/// What reaches a client's event stream, in one table: the envelope types services publish live
/// (`EventOutbox.write(live:)`) and the SSE event name each goes out as. A type not here is not sent.
enum LiveEventNames {
    static let byType: [String: String] = [
        NotificationCreated.eventType: "notification",
        UserRolesChanged.eventType: "roles_changed",
        EntitlementChanged.eventType: "entitlement_changed",
        InvitationAccepted.eventType: "client_accepted",
        UserEmailVerified.eventType: "email_verified",
        WorkoutAssigned.eventType: "workout_assigned",
        WorkoutLogged.eventType: "workout_logged",
        WorkoutCommented.eventType: "workout_comment",
    ]

    /// Sent to a client whose missed events are gone (or whose `Last-Event-ID` is not an id): it
    /// reloads what it shows, then reads on.
    static let reset = "reset"

    /// The last message of a stream whose place the account's newer streams took
    /// (`SSE_MAX_PER_USER`): the client does not reconnect until the app is next in use.
    static let replaced = "replaced"

    /// Types that end streams rather than reach them.
    static let ending = [SessionsEnded.eventType, UserDeleted.eventType]
}

/// Which of a user's streams a live entry ends: those of the sessions that ended, or all of them
/// when the account is gone.
struct LiveEnding: Sendable {
    var sessionIDs: Set<UUID>
    /// Every stream of the user, whatever its session.
    var everyStream: Bool
    /// Streams opened with a token that names no session (never issued by auth today).
    var sessionless: Bool

    /// The ending an envelope announces for `user`, or nil when it announces none, or one about
    /// another user (by the envelope or by its payload): wherever it is read (a user's channel or
    /// live stream, the event stream), an ending counts only for the user it is about.
    init?(type: String, envelope: String, of user: UUID) {
        guard LiveEventNames.ending.contains(type), let decoded = try? EventEnvelope(json: envelope), decoded.userID == user else { return nil }
        switch type {
        case UserDeleted.eventType:
            guard let deleted = try? decoded.decode(UserDeleted.self), deleted.userID == user else { return nil }
            self.init(sessionIDs: [], everyStream: true, sessionless: true)
        case SessionsEnded.eventType:
            guard let ended = try? decoded.decode(SessionsEnded.self), ended.userID == user else { return nil }
            self.init(sessionIDs: Set(ended.sessionIDs), everyStream: false, sessionless: ended.all)
        default:
            return nil
        }
    }

    init(sessionIDs: Set<UUID>, everyStream: Bool, sessionless: Bool) {
        self.sessionIDs = sessionIDs
        self.everyStream = everyStream
        self.sessionless = sessionless
    }

    /// What this and `other` end together: a user's endings add up, as an ended session never
    /// starts again.
    func merging(_ other: LiveEnding) -> LiveEnding {
        LiveEnding(
            sessionIDs: sessionIDs.union(other.sessionIDs), everyStream: everyStream || other.everyStream, sessionless: sessionless || other.sessionless)
    }

    /// Matched by session id, never by time: a user who signed out everywhere and then in again has
    /// a new session, which an old `all` must not end.
    func ends(session: UUID?) -> Bool {
        if everyStream { return true }
        guard let session else { return sessionless }
        return sessionIDs.contains(session)
    }
}
