import Foundation
import Logging
import PostgresNIO
import ServiceKit

extension Training {
    var sessions: SessionStore { SessionStore() }
    var roster: RosterStore { RosterStore() }
    var coaching: CoachLinkStore { CoachLinkStore() }

    /// Waits briefly for a roster entry whose event may still be on its way from invitations (right
    /// after the coach added the client), holding no connection between looks: a coach posting
    /// for made-up ids must not tie up the pool. Returns at once when the entry is here. Only the
    /// coach's own entry ends the wait: another coach's id costs the same wait as a made-up one, so
    /// the answer's timing does not tell that it exists.
    func awaitRosterEntry(_ id: UUID, coach: UUID, logger: Logger) async throws {
        _ = try await lookUntilFound { try await roster.find(id, lock: false, on: $0, logger: logger)?.coachID == coach }
    }

    /// Whether a client's first sessions arrived while this waited. The client's token carries the
    /// `client` role once invitations has the acceptance, and auth has granted it; the acceptance's
    /// event (`invitation.accepted`), which gives the sessions the coach planned to the client's
    /// account, reaches training on its own way, usually first, at most a moment later. A client
    /// no accepted roster entry names yet (a first coach, or a new one after leaving the last)
    /// waits for it, up to `settings.rosterWait`, so that the first list after signing in shows the
    /// plan. One whose entry is here already (the list was simply empty) costs one index lookup, and
    /// no wait.
    func awaitFirstAcceptance(of client: UUID, logger: Logger) async throws -> Bool {
        try await lookUntilFound { try await roster.isCoached(client, on: $0, logger: logger) }
    }

    /// Waits, up to `settings.rosterWait`, until the named roster entry (or `coach`'s) is `client`'s
    /// accepted one and no other is: the client named the invitation they have just accepted, and the
    /// former entry's unlink, which may reach training after the acceptance, is heard too. Returns as
    /// soon as both hold; an entry or coach that never was theirs costs the whole wait, and then the
    /// list is read as it is.
    func awaitAcceptance(of client: UUID, named link: AcceptedLink, logger: Logger) async throws {
        let roster = self.roster
        _ = try await lookUntilFound(
            { try await roster.isCoached(client, onlyThrough: link, on: $0, logger: logger) },
            // Any signed-in account may name any id: only an entry still waiting for its client, or
            // one this client accepted (or a coach with such an entry), is waited for.
            worthWaiting: { try await roster.mayCoach(client, through: link, on: $0, logger: logger) })
    }

    /// The longest pause between two looks of `lookUntilFound`.
    static let longestPauseBetweenLooks = Duration.milliseconds(250)

    /// Looks until `found` holds, for up to `settings.rosterWait`, holding no connection in between:
    /// first after a short pause, since an event is usually just behind, then after one twice as long
    /// each time, up to a quarter of a second, so that an event held up (a busy consumer) is answered
    /// within that of its arrival rather than at the end of a long pause, and what never comes costs
    /// some fifteen looks in the default 3 s. True when it was found after waiting; false when it was
    /// there at once, or never came.
    /// `worthWaiting`, asked once after the first look, can end the wait before it begins.
    private func lookUntilFound(
        _ found: (PostgresConnection) async throws -> Bool, worthWaiting: ((PostgresConnection) async throws -> Bool)? = nil
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + settings.rosterWait
        var pause = Duration.milliseconds(25)
        var waited = false
        while try await postgres.withConnectionOnItsLoop({ try await found($0) }) == false {
            if !waited, let worthWaiting, try await postgres.withConnectionOnItsLoop({ try await worthWaiting($0) }) == false { return false }
            let now = ContinuousClock.now
            guard now < deadline else { return false }
            try await Task.sleep(for: min(pause, deadline - now))
            pause = min(pause * 2, Self.longestPauseBetweenLooks)
            waited = true
        }
        return waited
    }

    /// The coach's roster entry, locked against the events that would move it (an acceptance giving
    /// its sessions to the client, an unlink cancelling them) until the caller's transaction ends.
    /// Another coach's entry, or none, is `404`, as if it did not exist.
    func rosterEntry(_ id: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> RosterStore.Entry {
        guard let entry = try await roster.find(id, lock: true, on: connection, logger: logger), entry.coachID == coach else {
            throw SessionErrors.clientNotFound
        }
        return entry
    }
}

/// Problems the session routes raise.
enum SessionErrors {
    static let clientNotFound = APIError.notFound("No such client.", code: "client_not_found")
    static let clientNotLinked = APIError.conflict("This client is no longer linked to you.", code: "client_not_linked")
    static let sessionNotFound = APIError.notFound("No such session.", code: "session_not_found")
    static let workoutNotFound = APIError.notFound("No such workout.", code: "workout_not_found")
    static let started = APIError.conflict("The client has already logged or skipped this session.", code: "session_started")
    static let cancelled = APIError.conflict("This session was cancelled.", code: "session_cancelled")
    static let pushedNeedsIfMatch = APIError(
        .preconditionRequired, code: "precondition_required",
        detail: "The coach changed this session since it was assigned: read it again and log it with If-Match set to its ETag (not *).")
    static let logged = APIError.conflict("This session was logged; log it again to change it.", code: "session_logged")
    static func dayFull(_ days: [String]) -> APIError {
        let named = days.prefix(5).joined(separator: ", ") + (days.count > 5 ? " and \(days.count - 5) more" : "")
        return APIError.conflict(
            "A client's day holds at most \(SessionStore.maxSessionsPerDay) of your sessions (cancelled ones aside), and these are full: \(named).", code: "day_full")
    }
    static let commentLimit = APIError.conflict("This session holds as many comments as it can (\(SessionStore.maxComments)).", code: "comment_limit")
    static let coachesOnly = APIError.forbidden("Only coaches plan and follow sessions.")
    static let clientsOnly = APIError.forbidden("A coach's account has no sessions of its own.")
}

extension AuthenticatedContext {
    /// The UUID in the `:id` path segment; anything else is 404 like an unknown id.
    func sessionID() throws -> UUID {
        guard let id = parameters.get("id").flatMap(UUID.init(parsing:)) else { throw SessionErrors.sessionNotFound }
        return id
    }

    func requireCoach() throws {
        guard caller.has(.coach) else { throw SessionErrors.coachesOnly }
    }

    /// The client's side is everyone's but a coach's: someone who has not accepted an invitation yet
    /// (or whose token predates the `client` role) simply has no sessions.
    func requireNotCoach() throws {
        guard !caller.has(.coach) else { throw SessionErrors.clientsOnly }
    }
}
