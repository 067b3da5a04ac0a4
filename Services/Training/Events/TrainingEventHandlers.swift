import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Events from auth and invitations: which roster entries are whose, who coaches whom (in the order
/// invitations gave the events), and nothing left of a deleted account.
struct TrainingEventHandlers {
    let training: Training

    var handlers: EventHandlers {
        var handlers = EventHandlers()
        let training = self.training
        // A late event about a deleted account makes nothing again; one handled while the account's
        // deletion runs waits for it (`holdLiveAccount`).
        @Sendable func deleted(_ user: UUID, _ context: EventContext) async throws -> Bool {
            try await !context.connection.holdLiveAccount(user, logger: context.logger)
        }
        handlers.on(ClientInvited.self) { event, context in
            guard try await !deleted(event.coachID, context) else { return }
            try await training.roster.advance(event.rosterEntryID, coach: event.coachID, client: nil, to: .pending, on: context.connection, logger: context.logger)
        }
        // The client's account takes over what the coach planned for the roster entry.
        handlers.on(InvitationAccepted.self) { event, context in
            let clientGone = try await deleted(event.clientID, context)
            guard try await !deleted(event.coachID, context) else { return }
            guard !clientGone else {
                if let entry = event.rosterEntryID { try await Self.endForDeletedClient(entry: entry, coach: event.coachID, training: training, context: context) }
                return
            }
            let acceptance = try await training.coaching.link(
                coach: event.coachID, client: event.clientID, order: EventOrder(context.envelope, among: "invitations"), on: context.connection, logger: context.logger)
            guard let entry = event.rosterEntryID else { return }
            try await training.roster.advance(entry, coach: event.coachID, client: event.clientID, to: .accepted, on: context.connection, logger: context.logger)
            try await context.connection.checkedRun(
                """
                UPDATE sessions SET client_id = \(event.clientID), updated_at = now()
                WHERE roster_entry_id = \(entry) AND coach_id = \(event.coachID) AND client_id IS NULL
                """, logger: context.logger)
            // A late acceptance: the unlink that followed it was heard first (one that named its entry
            // ended it then; one written before events named the entry found no accepted entry to
            // end), or a later acceptance of the pair was, before which invitations ended this entry.
            // The entry ends here, as it would have.
            guard acceptance == .latest else {
                try await Self.end(entry, coach: event.coachID, training: training, context: context)
                return
            }
            // The pair's latest acceptance: invitations keeps one accepted entry per client, so an
            // earlier one of the pair still accepted here has ended there. Its unlink may be yet to
            // come, or have come first and, naming no entry, left the later link's entries alone.
            for earlier in try await training.roster.accepted(coach: event.coachID, client: event.clientID, on: context.connection, logger: context.logger)
            where earlier != entry {
                try await Self.end(earlier, coach: event.coachID, training: training, context: context)
            }
        }
        // The sessions not started are cancelled; what the client performed stays theirs, and their
        // former coach no longer reads it.
        handlers.on(ClientUnlinked.self) { event, context in
            let clientGone = try await deleted(event.clientID, context)
            guard try await !deleted(event.coachID, context) else { return }
            guard !clientGone else {
                if let entry = event.rosterEntryID { try await Self.endForDeletedClient(entry: entry, coach: event.coachID, training: training, context: context) }
                return
            }
            let unlinked = try await training.coaching.unlink(
                coach: event.coachID, client: event.clientID, order: EventOrder(context.envelope, among: "invitations"), on: context.connection, logger: context.logger)
            let entries: [UUID]
            if let entry = event.rosterEntryID {
                entries = [entry]
            } else if unlinked {
                entries = try await training.roster.accepted(coach: event.coachID, client: event.clientID, on: context.connection, logger: context.logger)
            } else {
                // A late unlink that names no entry: the pair's accepted entry is the later
                // acceptance's, which it did not end.
                entries = []
            }
            for entry in entries {
                // The client is the acceptance's to record: an account whose maker was dropped since
                // (`UserPasswordChanged`) is not named again by the unlink that follows it.
                try await Self.end(entry, coach: event.coachID, training: training, context: context)
            }
        }
        // A removed entry that never had an account takes its sessions with it.
        handlers.on(ClientRemoved.self) { event, context in
            guard try await !deleted(event.coachID, context) else { return }
            try await training.roster.advance(event.rosterEntryID, coach: event.coachID, client: nil, to: .removed, on: context.connection, logger: context.logger)
            try await context.connection.checkedRun(
                "DELETE FROM sessions WHERE roster_entry_id = \(event.rosterEntryID) AND coach_id = \(event.coachID) AND client_id IS NULL", logger: context.logger)
            try await Self.cancelNotStarted(entry: event.rosterEntryID, coach: event.coachID, on: context.connection, logger: context.logger)
        }
        // The address's owner proved it for the first time (disowning, or a reset of an account
        // nobody had proven): what the account's maker made goes, and its links end at this event.
        handlers.on(UserPasswordChanged.self) { event, context in
            guard event.makerDropped else { return }
            try await context.connection.holdAccountForDeletion(event.userID, logger: context.logger)
            guard try await !context.connection.isDeletedAccount(event.userID, logger: context.logger) else { return }
            try await training.coaching.endAll(
                of: event.userID, order: EventOrder(context.envelope, among: "invitations"), on: context.connection, logger: context.logger)
            try await Self.purge(event.userID, accountDeleted: false, on: context.connection, logger: context.logger)
            try await context.connection.forgetKeptAnswers(of: event.userID, madeBefore: context.envelope.occurredAt, logger: context.logger)
        }
        handlers.on(UserDeleted.self) { event, context in
            try await context.connection.holdAccountForDeletion(event.userID, logger: context.logger)
            try await Self.purge(event.userID, accountDeleted: true, on: context.connection, logger: context.logger)
            try await training.coaching.forget(event.userID, on: context.connection, logger: context.logger)
            try await context.connection.recordDeletedAccount(event.userID, logger: context.logger)
        }
        return handlers
    }

    /// The link of an accepted entry ended: the entry is left (its client stays recorded) and its
    /// sessions not started are cancelled.
    static func end(_ entry: UUID, coach: UUID, training: Training, context: EventContext) async throws {
        try await training.roster.advance(entry, coach: coach, client: nil, to: .left, on: context.connection, logger: context.logger)
        try await cancelNotStarted(entry: entry, coach: coach, on: context.connection, logger: context.logger)
    }

    /// An entry whose client's account was deleted before its acceptance or unlink was heard here
    /// (the deletion's purge found no entry naming them): it is left, and what was planned for it and
    /// never given to an account goes, as nobody will do it. Nothing written names the account.
    static func endForDeletedClient(entry: UUID, coach: UUID, training: Training, context: EventContext) async throws {
        try await training.roster.advance(entry, coach: coach, client: nil, to: .left, on: context.connection, logger: context.logger)
        try await context.connection.checkedRun(
            "DELETE FROM sessions WHERE roster_entry_id = \(entry) AND coach_id = \(coach) AND client_id IS NULL", logger: context.logger)
    }

    /// Sessions of the entry not started are cancelled, past days' and skipped ones too: the plan
    /// ends with the link. A workout performed before then may still be logged (an app that was
    /// offline sends it later; `cancelled_at`), and is the client's alone: the former coach neither
    /// reads it nor hears of it.
    static func cancelNotStarted(entry: UUID, coach: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            UPDATE sessions s SET status = 'cancelled', cancelled_at = now(), version = s.version + 1, updated_at = now()
            WHERE s.roster_entry_id = \(entry) AND s.coach_id = \(coach) AND s.status IN ('scheduled', 'skipped')
            """, logger: logger)
    }

    /// As a client: their sessions, logs, comments and settings go. As a coach: their exercises and
    /// workouts go, the sessions nobody performed go (or are cancelled, for a client who has them),
    /// and the sessions clients performed stay theirs without the coach's id or comments.
    /// `accountDeleted`: the account's tombstone turns away every later event about it, so its
    /// roster entries go; an account whose maker was dropped lives on, and its entries stay as
    /// removed, so that an acceptance sent before the drop and heard after it finds its entry
    /// ended rather than making it again (accepted, for the account's new owner to coach).
    static func purge(_ user: UUID, accountDeleted: Bool, on connection: PostgresConnection, logger: Logger) async throws {
        // The account's roster entries first: an assignment holds its entry until it commits, and
        // the statements below then find the sessions it wrote; one that starts after finds its
        // entry gone or left.
        try await connection.checkedRun("SELECT 1 FROM roster_entries WHERE client_id = \(user) OR coach_id = \(user) FOR UPDATE", logger: logger)
        // As a client.
        try await connection.checkedRun("DELETE FROM sessions WHERE client_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM user_settings WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun(
            "UPDATE roster_entries SET client_id = NULL, stage = greatest(stage, 2), updated_at = now() WHERE client_id = \(user)", logger: logger)
        // As a coach.
        try await connection.checkedRun("DELETE FROM sessions WHERE coach_id = \(user) AND client_id IS NULL", logger: logger)
        // What was not performed is cancelled: a skipped session too, which would otherwise stay
        // open to a log with no coach behind it.
        try await connection.checkedRun(
            "UPDATE sessions SET status = 'cancelled', cancelled_at = now(), version = version + 1, updated_at = now() WHERE coach_id = \(user) AND status IN ('scheduled', 'skipped')",
            logger: logger)
        try await connection.checkedRun("DELETE FROM session_comments WHERE author_id = \(user)", logger: logger)
        try await connection.checkedRun(
            "UPDATE sessions SET coach_id = NULL, roster_entry_id = NULL, updated_at = now() WHERE coach_id = \(user)", logger: logger)
        if accountDeleted {
            try await connection.checkedRun("DELETE FROM roster_entries WHERE coach_id = \(user)", logger: logger)
        } else {
            try await connection.checkedRun(
                "UPDATE roster_entries SET stage = \(RosterStore.Stage.removed.rawValue), updated_at = now() WHERE coach_id = \(user)", logger: logger)
        }
        try await connection.checkedRun("DELETE FROM workouts WHERE coach_id = \(user)", logger: logger)
        // An exercise another coach's workout uses (which their own routes do not allow) stays rather
        // than stop the purge.
        try await connection.checkedRun(
            "DELETE FROM exercises e WHERE e.coach_id = \(user) AND NOT EXISTS (SELECT 1 FROM workout_exercises w WHERE w.exercise_id = e.id)", logger: logger)
    }
}
