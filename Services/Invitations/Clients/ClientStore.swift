import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// The queries on `clients` and the tables beside it. Every function runs on the caller's
/// connection, so a route composes them in one transaction with the mail and the events they cause.
struct ClientStore: Sendable {
    /// The client with its delivery state and its account's last sign-in; `c` is `clients`.
    static let select = """
        SELECT c.id, c.coach_id, c.name, c.email, c.phone, c.notes, c.created_at, c.updated_at, c.invitation_id, c.status, c.sent_at, c.expires_at,
               c.resend_count, c.accepted_at, c.left_at, c.client_user_id, c.accepted_via_relay,
               CASE WHEN u.email_normalized IS NOT NULL OR c.mail_id IS NULL THEN 'suppressed'
                    WHEN m.status = 'sent' THEN 'sent' WHEN m.status = 'failed' THEN 'failed' ELSE 'queued' END,
               a.last_sign_in_at
        FROM clients c
        LEFT JOIN mail_outbox m ON m.id = c.mail_id
        LEFT JOIN unsubscribed_addresses u ON u.email_normalized = c.email_normalized
        LEFT JOIN accounts a ON a.user_id = c.client_user_id
        """

    typealias Row = (UUID, UUID, String?, String?, String?, String?, Date, Date, UUID, String, Date, Date, Int, Date?, Date?, UUID?, Bool, String, Date?)

    static func decode(_ rows: PostgresRowSequence) async throws -> [ClientRecord] {
        var clients: [ClientRecord] = []
        for try await row in rows.decode(Row.self) {
            let (id, coach, name, email, phone, notes, created, updated, invitation, status, sent, expires, resends, accepted, left, user, relay, delivery, signedIn) = row
            clients.append(
                ClientRecord(
                    id: id, coachID: coach, name: name, email: email, phone: phone, notes: notes, createdAt: created, updatedAt: updated, invitationID: invitation,
                    storedStatus: status, sentAt: sent, expiresAt: expires, resendCount: resends, acceptedAt: accepted, leftAt: left, clientUserID: user,
                    acceptedViaRelay: relay, delivery: delivery, lastSignInAt: signedIn))
        }
        return clients
    }

    /// One of `coach`'s clients; another coach's is nil, as if it did not exist.
    func find(_ id: UUID, coach: UUID, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> ClientRecord? {
        try await Self.decode(
            connection.checkedQuery("\(unescaped: Self.select) WHERE c.id = \(id) AND c.coach_id = \(coach) \(unescaped: forUpdate ? "FOR UPDATE OF c" : "")", logger: logger)
        ).first
    }

    /// The client whose invitation `code` is, locked: acceptances, resends and revokes of one
    /// invitation run one after the other.
    func find(code: String, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> ClientRecord? {
        try await Self.decode(
            connection.checkedQuery(
                "\(unescaped: Self.select) WHERE c.code_hash = \(OpaqueToken.hash(code)) \(unescaped: forUpdate ? "FOR UPDATE OF c" : "")", logger: logger)
        ).first
    }

    /// The client linked to `user` (their coach's entry), if any.
    func linked(to user: UUID, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> ClientRecord? {
        try await Self.decode(
            connection.checkedQuery(
                "\(unescaped: Self.select) WHERE c.client_user_id = \(user) AND c.status = 'accepted' \(unescaped: forUpdate ? "FOR UPDATE OF c" : "")", logger: logger)
        ).first
    }

    /// Whether `coach` already has a live client (pending and not expired, or accepted) at `email`.
    func hasLiveClient(coach: UUID, email: String, except: UUID? = nil, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            """
            SELECT 1 FROM clients WHERE coach_id = \(coach) AND email_normalized = \(EmailAddress.normalize(email)) AND id <> \(except ?? UUID())
              AND (status = 'accepted' OR (status = 'pending' AND expires_at > now()))
            """, logger: logger)
    }

    /// A page of the roster, newest first; `status` filters (`expired` is pending past its expiry).
    func roster(coach: UUID, status: ClientRecord.Status?, limit: Int, after cursor: RosterCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [ClientRecord] {
        let filter: String =
            switch status {
            case nil: "true"
            case .pending: "c.status = 'pending' AND c.expires_at > now()"
            case .expired: "c.status = 'pending' AND c.expires_at <= now()"
            case .accepted: "c.status = 'accepted'"
            case .revoked: "c.status = 'revoked'"
            case .left: "c.status = 'left'"
            }
        return try await Self.decode(
            connection.checkedQuery(
                """
                \(unescaped: Self.select)
                WHERE c.coach_id = \(coach) AND \(unescaped: filter)
                  AND (\(cursor == nil) OR (c.created_at, c.id) < (\(cursor?.createdAt ?? Date()), \(cursor?.id ?? UUID())))
                ORDER BY c.created_at DESC, c.id DESC
                LIMIT \(limit + 1)
                """, logger: logger))
    }

    struct NewClient: Sendable {
        var name: String
        var email: String
        var phone: String?
        var notes: String?
    }

    /// The client and its pending invitation, with a new code (returned once, stored as its hash).
    func insert(_ client: NewClient, coach: UUID, ttlDays: Int, on connection: PostgresConnection, logger: Logger) async throws -> (UUID, OpaqueToken) {
        let id = UUID()
        let code = OpaqueToken()
        try await connection.checkedRun(
            """
            INSERT INTO clients (id, coach_id, name, email, email_normalized, phone, notes, invitation_id, status, code_hash, expires_at)
            VALUES (\(id), \(coach), \(client.name), \(client.email), \(EmailAddress.normalize(client.email)), \(client.phone), \(client.notes), \(UUID()), 'pending',
                    \(code.hash), now() + \(ttlDays) * interval '1 day')
            """, logger: logger)
        return (id, code)
    }

    /// A new code for the invitation (the old one stops working), its expiry started again.
    func renewCode(_ id: UUID, countAsResend: Bool, ttlDays: Int, on connection: PostgresConnection, logger: Logger) async throws -> OpaqueToken {
        let code = OpaqueToken()
        try await connection.checkedRun(
            """
            UPDATE clients SET code_hash = \(code.hash), status = 'pending', sent_at = now(), expires_at = now() + \(ttlDays) * interval '1 day',
                resend_count = resend_count + \(countAsResend ? 1 : 0), updated_at = now()
            WHERE id = \(id)
            """, logger: logger)
        return code
    }

    /// The newest pending invitations to `email` not yet expired, at most `limit`, locked: every
    /// coach may invite an address, and one request reissues a code for each found.
    func pending(to email: String, limit: Int = 100, on connection: PostgresConnection, logger: Logger) async throws -> [ClientRecord] {
        try await Self.decode(
            connection.checkedQuery(
                """
                \(unescaped: Self.select) WHERE c.email_normalized = \(EmailAddress.normalize(email)) AND c.status = 'pending' AND c.expires_at > now()
                ORDER BY c.created_at DESC LIMIT \(limit) FOR UPDATE OF c
                """, logger: logger))
    }

    /// A new code for the same invitation (its expiry and counts unchanged): the code is stored only
    /// as its hash, so the invitee who lost the mail gets a new one.
    func reissueCode(_ id: UUID, on connection: PostgresConnection, logger: Logger) async throws -> OpaqueToken {
        let code = OpaqueToken()
        try await connection.checkedRun("UPDATE clients SET code_hash = \(code.hash) WHERE id = \(id)", logger: logger)
        return code
    }

    /// The client's invitation mail not sent yet is not sent: its code is dead, or its address
    /// changed. The roster then shows that no mail goes (`suppressed`), not one on its way. A mail a
    /// sender holds (`claimed_until`: its first sending or a retry) may be going out: it is withdrawn
    /// instead, so that it is not tried again, and the roster shows how that sending ends (`sent`,
    /// or `failed`). Deleted, it could still go out while the roster said none went. A sender of the
    /// release before this one claims without `claimed_until`: its first sending (no attempt, no
    /// error, its lease ahead) counts as held too, through a rollout.
    func dropUnsentMail(of id: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            WITH unsent AS (
                SELECT m.id, coalesce(m.claimed_until > now(), m.attempts = 0 AND m.last_error IS NULL AND m.next_attempt_at > now()) AS held FROM mail_outbox m JOIN clients c ON m.id = c.mail_id
                WHERE c.id = \(id) AND m.status = 'pending' FOR UPDATE OF m),
            withdrawn AS (UPDATE mail_outbox SET withdrawn_at = now() WHERE id IN (SELECT id FROM unsent WHERE held)),
            dropped AS (DELETE FROM mail_outbox WHERE id IN (SELECT id FROM unsent WHERE NOT held) RETURNING id)
            UPDATE clients SET mail_id = NULL WHERE id = \(id) AND mail_id IN (SELECT id FROM dropped)
            """, logger: logger)
    }

    func setMail(_ mailID: UUID?, of id: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE clients SET mail_id = \(mailID) WHERE id = \(id)", logger: logger)
    }

    func update(_ id: UUID, name: String?, phone: String??, notes: String??, email: String?, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            UPDATE clients SET
                name = coalesce(\(name), name),
                phone = CASE WHEN \(phone != nil) THEN \(phone ?? nil) ELSE phone END,
                notes = CASE WHEN \(notes != nil) THEN \(notes ?? nil) ELSE notes END,
                email = coalesce(\(email), email),
                email_normalized = coalesce(\(email.map(EmailAddress.normalize)), email_normalized),
                updated_at = now()
            WHERE id = \(id)
            """, logger: logger)
    }

    func revoke(_ id: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE clients SET status = 'revoked', updated_at = now() WHERE id = \(id)", logger: logger)
    }

    func delete(_ id: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM clients WHERE id = \(id)", logger: logger)
    }

    /// The acceptance: one conditional update, so of two at once, or an acceptance racing a resend
    /// or a revoke, exactly one takes effect.
    func accept(_ id: UUID, code: String, by user: UUID, viaRelay: Bool, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            """
            UPDATE clients SET status = 'accepted', accepted_at = now(), client_user_id = \(user), accepted_via_relay = \(viaRelay), updated_at = now()
            WHERE id = \(id) AND status = 'pending' AND code_hash = \(OpaqueToken.hash(code)) AND expires_at > now()
            RETURNING 1
            """, logger: logger)
    }

    /// The link ends; `forget` also drops what identified the person (their account is gone).
    func leave(_ id: UUID, forget: Bool, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            UPDATE clients SET status = 'left', left_at = now(), updated_at = now(),
                name = CASE WHEN \(forget) THEN NULL ELSE name END, email = CASE WHEN \(forget) THEN NULL ELSE email END,
                email_normalized = CASE WHEN \(forget) THEN NULL ELSE email_normalized END,
                phone = CASE WHEN \(forget) THEN NULL ELSE phone END, notes = CASE WHEN \(forget) THEN NULL ELSE notes END
            WHERE id = \(id)
            """, logger: logger)
    }

    // MARK: sends and limits

    /// Records a send; sends older than the limits' day (and a day's margin) go, everyone's: what
    /// is kept of an address (its hash) is kept no longer than the limit needs it.
    func recordSend(coach: UUID, client: UUID, email: String, kind: String, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM invitation_sends WHERE sent_at < now() - interval '2 days'", logger: logger)
        try await connection.checkedRun(
            """
            INSERT INTO invitation_sends (coach_id, client_id, kind, address_hash)
            VALUES (\(coach), \(client), \(kind), sha256(convert_to(\(EmailAddress.normalize(email)), 'UTF8')))
            """, logger: logger)
    }

    /// `coach`'s sends to `email` in the last 24 hours, whichever roster entry they were for, and the
    /// seconds until the oldest of them leaves the window.
    func recentSends(coach: UUID, email: String, on connection: PostgresConnection, logger: Logger) async throws -> (count: Int, secondsUntilOneFrees: Int) {
        try await window(
            """
            SELECT count(*)::int, coalesce(extract(epoch FROM min(sent_at) + interval '1 day' - now()), 0)::int FROM invitation_sends
            WHERE coach_id = \(coach) AND address_hash = sha256(convert_to(\(EmailAddress.normalize(email)), 'UTF8')) AND sent_at > now() - interval '1 day'
            """, on: connection, logger: logger)
    }

    /// Invitations `coach` created in the last 24 hours. Older sends are forgotten here.
    func recentInvitations(coach: UUID, on connection: PostgresConnection, logger: Logger) async throws -> (count: Int, secondsUntilOneFrees: Int) {
        try await connection.checkedRun("DELETE FROM invitation_sends WHERE coach_id = \(coach) AND sent_at < now() - interval '2 days'", logger: logger)
        return try await window(
            "SELECT count(*)::int, coalesce(extract(epoch FROM min(sent_at) + interval '1 day' - now()), 0)::int FROM invitation_sends WHERE coach_id = \(coach) AND kind = 'invite' AND sent_at > now() - interval '1 day'",
            on: connection, logger: logger)
    }

    private func window(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws -> (count: Int, secondsUntilOneFrees: Int) {
        for try await (count, seconds) in try await connection.checkedQuery(query, logger: logger).decode((Int, Int).self) { return (count, max(1, seconds)) }
        return (0, 1)
    }

    // MARK: unsubscribing

    func isUnsubscribed(_ email: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM unsubscribed_addresses WHERE email_normalized = \(EmailAddress.normalize(email))", logger: logger)
    }

    /// A token for the unsubscribe link of a mail to `email`.
    func unsubscribeToken(for email: String, on connection: PostgresConnection, logger: Logger) async throws -> OpaqueToken {
        let token = OpaqueToken()
        try await connection.checkedRun(
            "INSERT INTO unsubscribe_tokens (token_hash, email_normalized) VALUES (\(token.hash), \(EmailAddress.normalize(email)))", logger: logger)
        return token
    }

    /// Unsubscribes the address `token` speaks for, and drops its invitation mails not sent yet;
    /// false for a token this service did not make.
    func unsubscribe(token: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        var address: String?
        for try await email in try await connection.checkedQuery(
            "SELECT email_normalized FROM unsubscribe_tokens WHERE token_hash = \(OpaqueToken.hash(token))", logger: logger
        ).decode(String.self) {
            address = email
        }
        guard let address else { return false }
        try await connection.checkedRun("INSERT INTO unsubscribed_addresses (email_normalized) VALUES (\(address)) ON CONFLICT DO NOTHING", logger: logger)
        try await connection.checkedRun(
            "DELETE FROM mail_outbox WHERE lower(recipient COLLATE \"und-x-icu\") = \(address) AND status = 'pending' AND template = 'invitation'", logger: logger)
        return true
    }
}
