import Foundation
import Hummingbird
import Mailer
import PostgresNIO
import ServiceKit

/// The invitee's side: the preview a link opens, the acceptance, the invitations to one's own
/// address, and unsubscribing from invitation mail.
struct InvitationRoutes {
    let invitations: Invitations

    func add(to router: Router<ServiceRequestContext>) {
        router.post("v1/invitations/unsubscribe", use: unsubscribe)
        router.get("v1/invitations/:code", use: preview)
        let signedIn = router.group("v1/invitations", context: AuthenticatedContext.self)
        signedIn.get("mine", use: mine)
        signedIn.post(":code/accept", use: accept)
    }

    struct CoachCard: Codable, Sendable {
        var id: UUID
        @Nullable var displayName: String?
        @Nullable var avatarURL: String?
        enum CodingKeys: String, CodingKey { case avatarURL = "avatar_url", displayName = "display_name", id }

        init(id: UUID, account: AccountRecord?) {
            self.id = id
            displayName = account.map(Invitations.coachName)
            avatarURL = account?.avatarURL
        }
    }

    struct PreviewResponse: ResponseEncodable {
        @Nullable var clientName: String?
        var coach: CoachCard
        var expiresAt: Date
        var status: String
        enum CodingKeys: String, CodingKey { case clientName = "client_name", coach, expiresAt = "expires_at", status }
    }

    /// Enough for "You've been invited by Sam". Reading consumes nothing (mail scanners open links);
    /// guesses are limited per client address, and the code is never logged.
    @Sendable func preview(_ request: Request, context: ServiceRequestContext) async throws -> PreviewResponse {
        let code = context.parameters.get("code") ?? ""
        guard let (client, coach) = try await invitations.lookUp(code: code, clientAddress: context.clientAddress, logger: context.logger) else {
            throw InvitationErrors.notFound
        }
        // The invited name only while the invitation can still be taken: an old link shows no more.
        return PreviewResponse(
            clientName: client.status == .pending ? client.name : nil, coach: CoachCard(id: client.coachID, account: coach), expiresAt: client.expiresAt, status: client.status.rawValue)
    }

    struct AcceptRequest: StrictJSONBody {
        var switchCoach: Bool?
        enum CodingKeys: String, CodingKey, CaseIterable { case switchCoach = "switch_coach" }
    }

    struct AcceptResponse: ResponseEncodable {
        var clientID: UUID
        var coach: CoachCard
        /// The coach's roster entry the caller now is: what training's reads wait for
        /// (`roster_entry_id=`) right after the acceptance.
        var rosterEntryID: UUID
        /// `granted`: auth has made the caller a client (a token refresh carries it); `pending`: it
        /// will, once it catches up.
        var role: String
        enum CodingKeys: String, CodingKey { case clientID = "client_id", coach, rosterEntryID = "roster_entry_id", role }
    }

    /// The checks in their order, then one conditional update; the response waits for auth's grant of
    /// `client` (`user.roles_changed`), up to `ACCEPT_ROLE_WAIT_MS`. The person who accepted it gets
    /// the same answer again; anyone else `409 invitation_used`.
    @Sendable func accept(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<AcceptResponse> {
        let body = try await request.decodeIfPresent(as: AcceptRequest.self, context: context) ?? AcceptRequest()
        let code = context.parameters.get("code") ?? ""
        let caller = context.caller
        let invitations = self.invitations
        let account = try await invitations.provenAccount(caller, logger: context.logger)
        let (client, coach) = try await invitations.postgres.transaction(logger: context.logger) { connection -> (ClientRecord, AccountRecord?) in
            try await connection.requireLiveAccount(caller.userID, logger: context.logger)
            guard let client = try await invitations.clients.find(code: code, forUpdate: true, on: connection, logger: context.logger) else {
                throw InvitationErrors.notFound
            }
            switch client.status {
            case .revoked: throw InvitationErrors.revoked
            case .expired: throw APIError(.gone, code: "invitation_expired", detail: "This invitation has expired; ask your coach to send it again.")
            case .accepted where client.clientUserID == caller.userID:
                // The caller's own acceptance sent again, its answer lost on the way (an app without
                // `Idempotency-Key`): answered as it was, nothing done twice.
                return (client, try await invitations.accounts.find(client.coachID, on: connection, logger: context.logger))
            case .accepted, .left: throw ClientFields.used
            case .pending: break
            }
            // Its coach is no longer one, and this invitation is on its way to being revoked.
            guard try await !invitations.accounts.isKnownNotCoach(client.coachID, on: connection, logger: context.logger) else {
                throw InvitationErrors.revoked
            }
            guard !caller.has(.coach), !account.roles.contains(Role.coach.rawValue) else {
                throw APIError.conflict("A coach cannot also be someone's client.", code: "role_conflict")
            }
            // One acceptance per person at a time: two invitations accepted at once must not both find
            // the person without a coach. The roles auth last gave are read again once held: a grant
            // of `coach` handled since the account was read is seen here, or sees this link.
            try await invitations.lockClient(caller.userID, on: connection, logger: context.logger)
            guard try await !invitations.accounts.isKnownCoach(caller.userID, on: connection, logger: context.logger) else {
                throw APIError.conflict("A coach cannot also be someone's client.", code: "role_conflict")
            }
            var switching: ClientRecord?
            if let current = try await invitations.clients.linked(to: caller.userID, forUpdate: true, on: connection, logger: context.logger) {
                guard body.switchCoach == true else {
                    throw APIError.conflict("You already have a coach; send `switch_coach: true` to leave them for this one.", code: "already_has_coach")
                }
                switching = current
            }
            // The account's address counts only once proven: anyone can sign up with the invited
            // address (or a relay-looking one) and hold a forwarded code.
            guard account.emailVerified else { throw InvitationErrors.emailUnverified }
            let own = EmailAddress(account.email)
            let invited = client.email.flatMap(EmailAddress.init)
            let viaRelay = own == nil || own != invited
            if viaRelay {
                // Holding the mailed code is enough only for an Apple private-relay address, which never
                // matches the address the coach knows, and only one Apple vouched for: a relay
                // address proven by a mailed link may have been typed by anyone Apple forwards to.
                guard let own, own.domain == "privaterelay.appleid.com", account.emailVouchedBy == "apple" else {
                    throw APIError.conflict(
                        "This invitation was sent to another address; sign in with the account of the address it came to.", code: "email_mismatch")
                }
            }
            if let switching {
                try await invitations.unlink(switching, reason: .switched, hasOtherCoach: true, on: connection, logger: context.logger)
            }
            guard try await invitations.clients.accept(client.id, code: code, by: caller.userID, viaRelay: viaRelay, on: connection, logger: context.logger) else {
                throw ClientFields.used
            }
            // The client's event (auth grants them `client`); its live copy is the coach's news.
            try await invitations.outbox.write(
                InvitationAccepted(invitationID: client.invitationID, coachID: client.coachID, clientID: caller.userID, rosterEntryID: client.id), userID: caller.userID,
                liveTo: client.coachID, on: connection, logger: context.logger)
            let coach = try await invitations.accounts.find(client.coachID, on: connection, logger: context.logger)
            if viaRelay, let email = client.email {
                try await invitations.mailer.sendRelayNotice(to: email, coachName: coach.map(Invitations.coachName) ?? "your coach", on: connection, logger: context.logger)
            }
            return (client, coach)
        }
        let granted = try await invitations.waitForClientRole(caller.userID, logger: context.logger)
        return EditedResponse(
            status: granted ? .ok : .accepted,
            response: AcceptResponse(
                clientID: caller.userID, coach: CoachCard(id: client.coachID, account: coach), rosterEntryID: client.id, role: granted ? "granted" : "pending"))
    }

    struct MineItem: Codable, Sendable {
        @Nullable var clientName: String?
        var code: String
        var coach: CoachCard
        var expiresAt: Date
        var status: String
        enum CodingKeys: String, CodingKey { case clientName = "client_name", code, coach, expiresAt = "expires_at", status }
    }

    struct MineResponse: ResponseEncodable {
        var items: [MineItem]
    }

    /// The pending invitations to the caller's verified address, for a client who installed the app
    /// from the App Store and lost the link. Codes are stored only as hashes, so each comes as a new
    /// code (the mailed link stops working, and a mail not sent yet is not sent).
    @Sendable func mine(_ request: Request, context: AuthenticatedContext) async throws -> MineResponse {
        guard context.caller.emailVerified else {
            throw APIError(.forbidden, code: "email_unverified", detail: "Verify your email address first: invitations are found by it.")
        }
        let invitations = self.invitations
        let account = try await invitations.account(context.caller.userID, logger: context.logger)
        let items = try await invitations.postgres.transaction(logger: context.logger) { connection in
            var items: [MineItem] = []
            for client in try await invitations.clients.pending(to: account.email, on: connection, logger: context.logger) {
                let code = try await invitations.clients.reissueCode(client.id, on: connection, logger: context.logger)
                // A mail not sent yet would carry the code that just stopped working.
                try await invitations.clients.dropUnsentMail(of: client.id, on: connection, logger: context.logger)
                let coach = try await invitations.accounts.find(client.coachID, on: connection, logger: context.logger)
                items.append(
                    MineItem(clientName: client.name, code: code.value, coach: CoachCard(id: client.coachID, account: coach), expiresAt: client.expiresAt, status: "pending"))
            }
            return items
        }
        return MineResponse(items: items)
    }

    struct UnsubscribedResponse: ResponseEncodable {
        var unsubscribed: Bool
    }

    /// RFC 8058 one-click unsubscribe (the mail client POSTs `List-Unsubscribe=One-Click`), or the
    /// page's button: no coach's invitation mail goes to the address from now on.
    @Sendable func unsubscribe(_ request: Request, context: ServiceRequestContext) async throws -> UnsubscribedResponse {
        let token = request.uri.queryParameters["token"].map(String.init) ?? ""
        let invitations = self.invitations
        let known = try await invitations.postgres.transaction(logger: context.logger) { connection in
            try await invitations.clients.unsubscribe(token: token, on: connection, logger: context.logger)
        }
        guard known else { throw APIError.notFound("This unsubscribe link is not valid.") }
        return UnsubscribedResponse(unsubscribed: true)
    }
}

/// Problems the invitee's routes raise.
enum InvitationErrors {
    static let revoked = APIError(.gone, code: "invitation_revoked", detail: "This invitation was withdrawn; ask your coach for a new one.")
    static let notFound = APIError(.notFound, code: "invitation_not_found", detail: "No invitation has this code; ask your coach to send it again.")
    static let emailUnverified = APIError(
        .forbidden, code: "email_unverified", detail: "Verify your email address first: an invitation is accepted by the address it was sent to.")
}

extension Invitations {
    /// The caller's account as auth's events told it, once it has heard of the verification the
    /// caller's token already carries (waited for up to 3 s); unverified when neither says so.
    func provenAccount(_ caller: Caller, logger: Logger) async throws -> AccountRecord {
        let deadline = ContinuousClock.now + .seconds(3)
        while true {
            let account = try await account(caller.userID, logger: logger)
            if account.emailVerified || !caller.emailVerified || ContinuousClock.now >= deadline { return account }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Whether auth has made `user` a client, as its `user.roles_changed` told this service; waited
    /// for up to `ACCEPT_ROLE_WAIT_MS`.
    func waitForClientRole(_ user: UUID, logger: Logger) async throws -> Bool {
        let deadline = ContinuousClock.now + settings.acceptRoleWait
        while true {
            let roles = try await postgres.withConnectionOnItsLoop { connection in
                try await accounts.find(user, on: connection, logger: logger)?.roles ?? []
            }
            if roles.contains(Role.client.rawValue) { return true }
            guard ContinuousClock.now < deadline else { return false }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}
