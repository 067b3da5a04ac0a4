import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// The invitations domain: its stores, its outboxes, and the rules the routes share.
struct Invitations: Sendable {
    let postgres: PostgresClient
    let redis: RedisClient
    let outbox: EventOutbox
    let settings: InvitationsSettings
    let logger: Logger
    let clients = ClientStore()
    let accounts = AccountDirectory()
    let mailer: InvitationMailer

    init(dependencies: ServiceDependencies, settings: InvitationsSettings) {
        postgres = dependencies.postgres
        redis = dependencies.redis
        outbox = dependencies.outbox
        self.settings = settings
        logger = dependencies.logger
        mailer = InvitationMailer(settings: settings)
    }

    /// The account as auth's events described it. Right after a sign-up the event may still be on
    /// its way: it is awaited briefly, then the request is refused with `503` to be tried again. A
    /// deleted account (its token outlives it by a few minutes) is `401 account_deleted` at once.
    func account(_ userID: UUID, logger: Logger) async throws -> AccountRecord {
        let deadline = ContinuousClock.now + .seconds(3)
        while true {
            let found = try await postgres.withConnectionOnItsLoop { connection -> AccountRecord? in
                if let found = try await accounts.find(userID, on: connection, logger: logger) { return found }
                if try await accounts.isDeleted(userID, on: connection, logger: logger) {
                    throw APIError.accountDeleted
                }
                return nil
            }
            if let found { return found }
            guard ContinuousClock.now < deadline else {
                throw APIError(.serviceUnavailable, code: "account_unknown", detail: "This account is not known here yet; try again in a moment.", headers: [.retryAfter: "1"])
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// An invitation looked up by its code, as the API's preview and the page both do: counted against
    /// the client address's look-ups (guessing codes costs the same either way), then the invitation
    /// and its coach, or nil for a code that names none.
    func lookUp(code: String, clientAddress: String, logger: Logger) async throws -> (client: ClientRecord, coach: AccountRecord?)? {
        try await RateLimit(max: settings.previewsPerMinute, per: .seconds(60), whenUnavailable: .allow).count(
            "invitations:preview:\(TrustedProxies.limitKey(clientAddress))", detail: "Too many invitation look-ups from this address.",
            redis: redis, logger: logger)
        // A code is 43 characters; anything far longer was not made here and costs no query.
        guard !code.isEmpty, code.utf8.count <= 256 else { return nil }
        return try await postgres.withConnectionOnItsLoop { connection -> (ClientRecord, AccountRecord?)? in
            guard let client = try await clients.find(code: code, on: connection, logger: logger) else { return nil }
            return (client, try await accounts.find(client.coachID, on: connection, logger: logger))
        }
    }

    /// The name a coach's clients see: the profile's, else the local part of the address.
    static func coachName(_ coach: AccountRecord) -> String {
        if let name = coach.displayName, !name.isEmpty { return name }
        return String(coach.email.prefix { $0 != "@" })
    }

    /// An invitation mail for `client` (unless its address unsubscribed), its send recorded, its
    /// mail remembered for the roster's delivery state.
    func mailInvitation(
        clientID: UUID, name: String, email: String, coach: AccountRecord, code: OpaqueToken, expiresAt: Date, kind: String,
        on connection: PostgresConnection, logger: Logger
    ) async throws {
        try await clients.recordSend(coach: coach.userID, client: clientID, email: email, kind: kind, on: connection, logger: logger)
        guard try await !clients.isUnsubscribed(email, on: connection, logger: logger) else {
            try await clients.setMail(nil, of: clientID, on: connection, logger: logger)
            return
        }
        let unsubscribe = try await clients.unsubscribeToken(for: email, on: connection, logger: logger)
        let mailID = try await mailer.sendInvitation(
            to: email, clientName: name, coachName: Self.coachName(coach), coachEmail: coach.email, code: code, expiresAt: expiresAt, unsubscribe: unsubscribe,
            on: connection, logger: logger)
        try await clients.setMail(mailID, of: clientID, on: connection, logger: logger)
    }

    /// A coach's roster and a client's link follow the roles auth last gave the account. One no longer
    /// a coach (an admin took the role) keeps no client, each unlinked (`coach_role_removed`), and no
    /// open invitation, each revoked with its unsent mail. A linked client who now holds `coach` (an
    /// admin's grant, or the role taken while the acceptance was on its way to auth, which then
    /// refuses it) leaves their coach (`became_coach`): a coach cannot also be someone's client.
    func followRoles(of user: UUID, roles: [Role], on connection: PostgresConnection, logger: Logger) async throws {
        if roles.contains(.coach) {
            // After an acceptance under way, which holds the person the same way: its link is then
            // found here, or it finds the role this event recorded.
            try await lockClient(user, on: connection, logger: logger)
            if let linked = try await clients.linked(to: user, forUpdate: true, on: connection, logger: logger) {
                try await unlink(linked, reason: .becameCoach, on: connection, logger: logger)
            }
            return
        }
        // After any invitation being made or sent again now, which hold the coach the same way.
        try await lockCoach(user, on: connection, logger: logger)
        let rows = try await connection.checkedQuery(
            "\(unescaped: ClientStore.select) WHERE c.coach_id = \(user) AND c.status IN ('pending', 'accepted') FOR UPDATE OF c", logger: logger)
        for client in try await ClientStore.decode(rows) {
            if client.status == .accepted {
                try await unlink(client, reason: .coachRoleRemoved, on: connection, logger: logger)
            } else {
                try await clients.revoke(client.id, on: connection, logger: logger)
                try await clients.dropUnsentMail(of: client.id, on: connection, logger: logger)
            }
        }
    }

    /// One coach's invitations one at a time (making one, sending it again, changing its address,
    /// and `followRoles`), until the transaction ends. A coach auth's latest roles event here says
    /// is no longer one is refused (`403`), though the token still says coach: it lives for minutes
    /// after a demotion, and would otherwise open the invitations `followRoles` revoked. An account
    /// no roles event has named is taken at its token's word (a new coach's event may be on its way).
    func holdCoach(_ coach: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await lockCoach(coach, on: connection, logger: logger)
        guard try await !accounts.isKnownNotCoach(coach, on: connection, logger: logger) else {
            throw APIError(.forbidden, code: "forbidden", detail: "This account is no longer a coach.")
        }
    }

    /// One person's acceptances one at a time, and their promotion to coach (`followRoles`), until
    /// the transaction ends.
    func lockClient(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("SELECT pg_advisory_xact_lock(hashtext('invitations.client:' || \(user.uuidString)))", logger: logger)
    }

    private func lockCoach(_ coach: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("SELECT pg_advisory_xact_lock(hashtext('invitations.coach:' || \(coach.uuidString)))", logger: logger)
    }

    /// Ends the link of an accepted client, announcing it (`client.unlinked`).
    func unlink(_ client: ClientRecord, reason: ClientUnlinked.Reason, hasOtherCoach: Bool = false, forget: Bool = false, on connection: PostgresConnection, logger: Logger) async throws {
        try await clients.leave(client.id, forget: forget, on: connection, logger: logger)
        if let user = client.clientUserID {
            try await outbox.write(
                ClientUnlinked(coachID: client.coachID, clientID: user, reason: reason, hasOtherCoach: hasOtherCoach, rosterEntryID: client.id), userID: user, on: connection, logger: logger)
        }
    }
}
