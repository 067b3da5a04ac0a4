import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Events from auth and social: the accounts directory, and nothing left of a deleted account.
struct InvitationsEventHandlers {
    let invitations: Invitations

    var handlers: EventHandlers {
        var handlers = EventHandlers()
        let accounts = invitations.accounts
        let invitations = self.invitations
        // With the name the account's maker chose, unless the address's owner has taken the account
        // over since: a registration delivered after the takeover must not bring back its words.
        handlers.on(UserRegistered.self) { event, context in
            let keepingName = try await context.isLatest("identity", of: event.userID, among: "auth")
            try await accounts.registered(event, keepingName: keepingName, on: context.connection, logger: context.logger)
        }
        handlers.on(UserEmailVerified.self) { event, context in
            try await accounts.verified(event, on: context.connection, logger: context.logger)
        }
        // Roles, name and avatar as the latest event of each says: an older one delivered late
        // changes nothing.
        handlers.on(UserRolesChanged.self) { event, context in
            guard try await context.isLatest("roles", of: event.userID, among: "auth") else { return }
            guard try await accounts.rolesChanged(event, on: context.connection, logger: context.logger) else {
                return try Self.awaitRegistration(of: event.userID, context)
            }
            try await invitations.followRoles(of: event.userID, roles: event.roles, on: context.connection, logger: context.logger)
        }
        handlers.on(UserSignedIn.self) { event, context in
            try await accounts.signedIn(event.userID, at: context.envelope.occurredAt, on: context.connection, logger: context.logger)
        }
        handlers.on(ProfileUpdated.self) { event, context in
            guard try await context.isLatest("profile", of: event.userID, among: "social") else { return }
            guard try await accounts.profileUpdated(event, on: context.connection, logger: context.logger) else {
                return try Self.awaitRegistration(of: event.userID, context)
            }
        }
        handlers.on(UserDeleted.self) { event, context in
            try await Self.purge(event.userID, invitations: invitations, on: context.connection, logger: context.logger)
        }
        // The address's owner proved it for the first time (disowning, or a reset of an account
        // nobody had proven): the maker's roster, coach link, name and avatar go (auth has taken the
        // roles away); the account stays.
        handlers.on(UserPasswordChanged.self) { event, context in
            guard event.makerDropped else { return }
            _ = try await context.isLatest("identity", of: event.userID, among: "auth")
            try await Self.purge(event.userID, invitations: invitations, keepingAccount: true, on: context.connection, logger: context.logger)
            try await accounts.forgetProfile(event.userID, on: context.connection, logger: context.logger)
            try await context.connection.forgetKeptAnswers(of: event.userID, madeBefore: context.envelope.occurredAt, logger: context.logger)
        }
        return handlers
    }

    /// An event about an account not made here yet: two processes take turns at the stream, and a
    /// failed handler is retried after later events, so its `user.registered` may still come. The
    /// handler fails, nothing of it kept (the mark of the latest event neither), and the event is
    /// retried. While the event is young each try is uncounted (`AccountNotYetKnown`, an
    /// `EventNotReadyYet`). An older one may be old only because this service fell behind (it was
    /// down, its registration failed once and waits for its retry), so it is not dropped either:
    /// its tries count (`AccountStillUnknown`, an `EventStillNotReady`), and an account that never
    /// comes sends it to the dead letters, where it is seen and can be sent again.
    static func awaitRegistration(of user: UUID, _ context: EventContext) throws {
        guard Date().timeIntervalSince(context.envelope.occurredAt) < 600 else { throw AccountStillUnknown(userID: user) }
        throw AccountNotYetKnown(userID: user)
    }

    /// An event about an account still unknown here long after it happened: retried, each try counted.
    struct AccountStillUnknown: EventStillNotReady, CustomStringConvertible {
        var userID: UUID
        var description: String { "the account \(userID) is still not known here" }
    }

    /// A deleted coach: every client is unlinked (they lose `client`) and the roster is gone, which
    /// revokes every invitation. A deleted client: the link ends, and the coach's roster keeps the
    /// entry as `left` without the person's name, address or phone.
    static func purge(_ user: UUID, invitations: Invitations, keepingAccount: Bool = false, on connection: PostgresConnection, logger: Logger) async throws {
        // An account's directory entry being made (`AccountDirectory.registered`) holds the account
        // until it commits, and is then found here; one made after finds the tombstone.
        try await connection.holdAccountForDeletion(user, logger: logger)
        let rows = try await connection.checkedQuery("\(unescaped: ClientStore.select) WHERE c.coach_id = \(user) FOR UPDATE OF c", logger: logger)
        for client in try await ClientStore.decode(rows) where client.status == .accepted {
            try await invitations.unlink(client, reason: .coachDeleted, on: connection, logger: logger)
        }
        try await connection.checkedRun(
            "DELETE FROM mail_outbox m USING clients c WHERE c.coach_id = \(user) AND m.id = c.mail_id AND m.status = 'pending'", logger: logger)
        try await connection.checkedRun("DELETE FROM clients WHERE coach_id = \(user)", logger: logger)
        if let linked = try await invitations.clients.linked(to: user, forUpdate: true, on: connection, logger: logger) {
            try await invitations.unlink(linked, reason: .clientDeleted, forget: true, on: connection, logger: logger)
        }
        // Entries the person left earlier keep nothing that identifies them either; once the account
        // is gone, not even its id (a disowned address keeps its account, and its id here).
        try await connection.checkedRun(
            """
            UPDATE clients SET name = NULL, email = NULL, email_normalized = NULL, phone = NULL, notes = NULL, updated_at = now(),
                client_user_id = CASE WHEN \(keepingAccount) THEN client_user_id END,
                mail_id = CASE WHEN \(keepingAccount) THEN mail_id END
            WHERE client_user_id = \(user)
            """, logger: logger)
        if !keepingAccount, let account = try await invitations.accounts.find(user, on: connection, logger: logger) {
            // The mail to the account's address and the record of its unsubscribe links go, as auth's
            // do; so do the deleted coach's invitations, whose replies went to that address. What
            // stays is the latest invitation of a roster that still holds the address (another
            // coach's, pending), which that coach's roster shows the delivery of, and while one does,
            // the unsubscribe links. Account deletions
            // are rare: the reply-to and token lookups read their tables whole, not through an index.
            let kept = "NOT EXISTS (SELECT 1 FROM clients c WHERE c.mail_id = m.id AND c.email IS NOT NULL)"
            try await connection.checkedRun(
                "DELETE FROM mail_outbox m WHERE lower(m.recipient COLLATE \"und-x-icu\") = \(EmailAddress.normalize(account.email)) AND \(unescaped: kept)",
                logger: logger)
            try await connection.checkedRun(
                "DELETE FROM mail_outbox m WHERE lower(m.reply_to COLLATE \"und-x-icu\") = \(EmailAddress.normalize(account.email)) AND \(unescaped: kept)",
                logger: logger)
            // An unsubscribe link in the kept invitation keeps working (RFC 8058).
            try await connection.checkedRun(
                """
                DELETE FROM unsubscribe_tokens t WHERE t.email_normalized = \(EmailAddress.normalize(account.email))
                  AND NOT EXISTS (SELECT 1 FROM clients c WHERE c.email_normalized = t.email_normalized)
                """, logger: logger)
        }
        if !keepingAccount {
            // The sends counted against the coach's daily limit name the account too; a kept account
            // keeps its count, so that disowning an address does not reset it.
            try await connection.checkedRun("DELETE FROM invitation_sends WHERE coach_id = \(user)", logger: logger)
            try await invitations.accounts.delete(user, on: connection, logger: logger)
        }
    }
}
