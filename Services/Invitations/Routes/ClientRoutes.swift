import Foundation
import Hummingbird
import PostgresNIO
import ServiceKit

/// A coach's clients and their invitations. Coaches only; another coach's client is `404`.
struct ClientRoutes {
    let invitations: Invitations

    func add(to router: Router<ServiceRequestContext>) {
        let clients = router.group("v1/clients", context: AuthenticatedContext.self)
        clients.post(use: create)
        clients.get(use: roster)
        clients.get(":id", use: client)
        clients.patch(":id", use: update)
        clients.delete(":id", use: remove)
        clients.post(":id/invitation/resend", use: resend)
        clients.post(":id/invitation/revoke", use: revoke)
    }

    struct CreateRequest: StrictJSONBody {
        var name: String
        var email: String
        var phone: String?
        var notes: String?
        var confirmEmail: Bool?
        enum CodingKeys: String, CodingKey, CaseIterable { case name, email, phone, notes, confirmEmail = "confirm_email" }
    }

    /// The client and its invitation in one transaction, and the mail with them.
    @Sendable func create(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<ClientView> {
        try context.require(anyOf: .coach)
        try ClientFields.requireVerifiedSender(context)
        let body = try await request.decode(as: CreateRequest.self, context: context)
        let fields = try ClientFields.validate(name: body.name, email: body.email, phone: body.phone, notes: body.notes, confirmEmail: body.confirmEmail == true)
        let invitations = self.invitations
        let coach = try await invitations.account(context.caller.userID, logger: context.logger)
        let settings = invitations.settings
        let view = try await invitations.postgres.transaction(logger: context.logger) { connection in
            try await connection.requireLiveAccount(coach.userID, logger: context.logger)
            // One coach's invitations one at a time: the address check and the daily count hold.
            try await invitations.holdCoach(coach.userID, on: connection, logger: context.logger)
            guard try await !invitations.clients.hasLiveClient(coach: coach.userID, email: fields.email, on: connection, logger: context.logger) else {
                throw APIError.conflict("You already invited \(fields.email); resend that invitation instead.", code: "client_exists")
            }
            try await ClientFields.checkInviteLimit(coach.userID, settings: settings, clients: invitations.clients, on: connection, logger: context.logger)
            try await ClientFields.checkMailLimit(coach: coach.userID, email: fields.email, settings: settings, clients: invitations.clients, on: connection, logger: context.logger)
            let (id, code) = try await invitations.clients.insert(
                .init(name: fields.name, email: fields.email, phone: fields.phone ?? nil, notes: fields.notes ?? nil), coach: coach.userID,
                ttlDays: settings.invitationTTLDays, on: connection, logger: context.logger)
            let client = try await invitations.clients.find(id, coach: coach.userID, on: connection, logger: context.logger)!
            try await invitations.outbox.write(ClientInvited(rosterEntryID: id, coachID: coach.userID), userID: coach.userID, on: connection, logger: context.logger)
            try await invitations.mailInvitation(
                clientID: id, name: fields.name, email: fields.email, coach: coach, code: code, expiresAt: client.expiresAt, kind: "invite", on: connection,
                logger: context.logger)
            return ClientView(try await invitations.clients.find(id, coach: coach.userID, on: connection, logger: context.logger)!)
        }
        return EditedResponse(status: .created, response: view)
    }

    /// The roster, newest first, optionally of one status.
    @Sendable func roster(_ request: Request, context: AuthenticatedContext) async throws -> Page<ClientView> {
        try context.require(anyOf: .coach)
        let page = try PageRequest(query: request)
        var status: ClientRecord.Status?
        if let text = request.uri.queryParameters["status"].map(String.init), !text.isEmpty {
            guard let value = ClientRecord.Status(rawValue: text) else {
                throw APIError.validation([.init(field: "status", message: "must be one of pending, accepted, expired, revoked, left")])
            }
            status = value
        }
        let after = try page.position(RosterCursor.self)
        let invitations = self.invitations
        let rows = try await invitations.postgres.withConnectionOnItsLoop { connection in
            try await invitations.clients.roster(coach: context.caller.userID, status: status, limit: page.limit, after: after, on: connection, logger: context.logger)
        }
        let (items, next) = Cursor.page(rows, limit: page.limit) { RosterCursor(createdAt: $0.createdAt, id: $0.id) }
        return Page(items: items.map(ClientView.init), nextCursor: next)
    }

    @Sendable func client(_ request: Request, context: AuthenticatedContext) async throws -> ClientView {
        try context.require(anyOf: .coach)
        let id = try context.clientID()
        let invitations = self.invitations
        let client = try await invitations.postgres.withConnectionOnItsLoop { connection in
            try await invitations.clients.find(id, coach: context.caller.userID, on: connection, logger: context.logger)
        }
        guard let client else { throw ClientFields.notFound }
        return ClientView(client)
    }

    /// `name`, `phone`, `notes` (null clears the last two); `email` only while the invitation is
    /// pending (or expired), which sends it again to the new address with a new code.
    @Sendable func update(_ request: Request, context: AuthenticatedContext) async throws -> ClientView {
        try context.require(anyOf: .coach)
        let id = try context.clientID()
        let patch = try await request.decode(as: ClientPatch.self, context: context)
        let name = try patch.name.map { try ClientFields.name($0) }
        let phone = try patch.phone.map { try $0.flatMap { try ClientFields.phone($0) } }
        let notes = try patch.notes.map { try $0.flatMap { try ClientFields.notes($0) } }
        let email = try patch.email.map { try ClientFields.email($0, confirmed: patch.confirmEmail == true) }
        if email != nil { try ClientFields.requireVerifiedSender(context) }
        let invitations = self.invitations
        let coachID = context.caller.userID
        let coach = email == nil ? nil : try await invitations.account(coachID, logger: context.logger)
        let settings = invitations.settings
        return try await invitations.postgres.transaction(logger: context.logger) { connection in
            guard let client = try await invitations.clients.find(id, coach: coachID, forUpdate: true, on: connection, logger: context.logger) else {
                throw ClientFields.notFound
            }
            var newAddress: String?
            if let email, EmailAddress.normalize(email) != client.email.map(EmailAddress.normalize) {
                guard client.storedStatus == "pending" else {
                    throw APIError.conflict("The address can change only while the invitation is pending.", code: "email_locked")
                }
                try await invitations.holdCoach(coachID, on: connection, logger: context.logger)
                guard try await !invitations.clients.hasLiveClient(coach: coachID, email: email, except: id, on: connection, logger: context.logger) else {
                    throw APIError.conflict("You already invited \(email).", code: "client_exists")
                }
                try await ClientFields.checkMailLimit(coach: coachID, email: email, settings: settings, clients: invitations.clients, on: connection, logger: context.logger)
                // Mail to a new address is a new invitation, for the coach's daily limit too.
                try await ClientFields.checkInviteLimit(coachID, settings: settings, clients: invitations.clients, on: connection, logger: context.logger)
                try await invitations.clients.dropUnsentMail(of: id, on: connection, logger: context.logger)
                newAddress = email
            }
            try await invitations.clients.update(id, name: name, phone: phone, notes: notes, email: newAddress, on: connection, logger: context.logger)
            if let newAddress, let coach {
                let code = try await invitations.clients.renewCode(id, countAsResend: false, ttlDays: settings.invitationTTLDays, on: connection, logger: context.logger)
                let renewed = try await invitations.clients.find(id, coach: coachID, on: connection, logger: context.logger)!
                try await invitations.mailInvitation(
                    clientID: id, name: renewed.name ?? "", email: newAddress, coach: coach, code: code, expiresAt: renewed.expiresAt, kind: "invite",
                    on: connection, logger: context.logger)
            }
            return ClientView(try await invitations.clients.find(id, coach: coachID, on: connection, logger: context.logger)!)
        }
    }

    /// Removes the client from the roster; a linked client is unlinked (`client.unlinked`).
    @Sendable func remove(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        try context.require(anyOf: .coach)
        let id = try context.clientID()
        let invitations = self.invitations
        try await invitations.postgres.transaction(logger: context.logger) { connection in
            guard let client = try await invitations.clients.find(id, coach: context.caller.userID, forUpdate: true, on: connection, logger: context.logger) else {
                throw ClientFields.notFound
            }
            if client.status == .accepted {
                try await invitations.unlink(client, reason: .removed, on: connection, logger: context.logger)
            }
            try await invitations.clients.dropUnsentMail(of: id, on: connection, logger: context.logger)
            try await invitations.clients.delete(id, on: connection, logger: context.logger)
            try await invitations.outbox.write(ClientRemoved(rosterEntryID: id, coachID: context.caller.userID), userID: context.caller.userID, on: connection, logger: context.logger)
        }
        return .noContent
    }

    /// A new code (the old one stops working) and a new mail, the expiry started again; also for an
    /// expired or revoked invitation. At most `INVITATION_MAILS_PER_CLIENT_PER_DAY` mails a day.
    @Sendable func resend(_ request: Request, context: AuthenticatedContext) async throws -> ClientView {
        try context.require(anyOf: .coach)
        try ClientFields.requireVerifiedSender(context)
        let id = try context.clientID()
        let invitations = self.invitations
        let coach = try await invitations.account(context.caller.userID, logger: context.logger)
        let settings = invitations.settings
        return try await invitations.postgres.transaction(logger: context.logger) { connection in
            guard let client = try await invitations.clients.find(id, coach: coach.userID, forUpdate: true, on: connection, logger: context.logger) else {
                throw ClientFields.notFound
            }
            guard client.status != .accepted, client.status != .left, let email = client.email else { throw ClientFields.used }
            // An expired or revoked invitation comes back to life: not beside another live one to the
            // same address, made since (locked as `create` and an address change lock).
            try await invitations.holdCoach(coach.userID, on: connection, logger: context.logger)
            guard try await !invitations.clients.hasLiveClient(coach: coach.userID, email: email, except: id, on: connection, logger: context.logger) else {
                throw APIError.conflict("You already invited \(email) again since; resend that invitation instead.", code: "client_exists")
            }
            try await ClientFields.checkMailLimit(coach: coach.userID, email: email, settings: settings, clients: invitations.clients, on: connection, logger: context.logger)
            try await invitations.clients.dropUnsentMail(of: id, on: connection, logger: context.logger)
            let code = try await invitations.clients.renewCode(id, countAsResend: true, ttlDays: settings.invitationTTLDays, on: connection, logger: context.logger)
            let renewed = try await invitations.clients.find(id, coach: coach.userID, on: connection, logger: context.logger)!
            try await invitations.mailInvitation(
                clientID: id, name: renewed.name ?? "", email: email, coach: coach, code: code, expiresAt: renewed.expiresAt, kind: "resend", on: connection,
                logger: context.logger)
            return ClientView(try await invitations.clients.find(id, coach: coach.userID, on: connection, logger: context.logger)!)
        }
    }

    /// The code stops working (`410 invitation_revoked` to whoever holds it).
    @Sendable func revoke(_ request: Request, context: AuthenticatedContext) async throws -> ClientView {
        try context.require(anyOf: .coach)
        let id = try context.clientID()
        let invitations = self.invitations
        return try await invitations.postgres.transaction(logger: context.logger) { connection in
            guard let client = try await invitations.clients.find(id, coach: context.caller.userID, forUpdate: true, on: connection, logger: context.logger) else {
                throw ClientFields.notFound
            }
            guard client.status != .accepted, client.status != .left else { throw ClientFields.used }
            try await invitations.clients.revoke(id, on: connection, logger: context.logger)
            try await invitations.clients.dropUnsentMail(of: id, on: connection, logger: context.logger)
            return ClientView(try await invitations.clients.find(id, coach: context.caller.userID, on: connection, logger: context.logger)!)
        }
    }
}

/// `PATCH /v1/clients/{id}`: which fields came, and `null` apart from absent for the clearable ones.
struct ClientPatch: StrictJSONBody {
    var name: String?
    var email: String?
    /// nil: unchanged; `.some(nil)`: cleared.
    var phone: String??
    var notes: String??
    var confirmEmail: Bool?

    enum CodingKeys: String, CodingKey, CaseIterable { case name, email, phone, notes, confirmEmail = "confirm_email" }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decodeIfPresent(String.self, forKey: .name)
        email = try container.decodeIfPresent(String.self, forKey: .email)
        phone = container.contains(.phone) ? .some(try container.decodeIfPresent(String.self, forKey: .phone)) : nil
        notes = container.contains(.notes) ? .some(try container.decodeIfPresent(String.self, forKey: .notes)) : nil
        confirmEmail = try container.decodeIfPresent(Bool.self, forKey: .confirmEmail)
    }
}

/// The rules of a client's fields, and the problems the client routes share.
enum ClientFields {
    static let notFound = APIError.notFound("No such client.")
    static let used = APIError.conflict("This invitation has been accepted.", code: "invitation_used")

    struct Valid {
        var name: String
        var email: String
        var phone: String??
        var notes: String??
    }

    /// Every field's problem at once.
    static func validate(name: String, email: String, phone: String?, notes: String?, confirmEmail: Bool) throws -> Valid {
        var problems: [Problem.FieldError] = []
        func collect<T>(_ check: () throws -> T) -> T? {
            do { return try check() } catch let error as APIError where error.code == "validation_failed" {
                problems += error.errors ?? []
                return nil
            } catch { return nil }
        }
        let validName = collect { try Self.name(name) }
        let validPhone = collect { try phone.flatMap { try Self.phone($0) } }
        let validNotes = collect { try notes.flatMap { try Self.notes($0) } }
        guard let validEmail = EmailAddress(email)?.mailbox else {
            // The address's own code, naming the other fields' problems too.
            throw invalidEmail(email, alongside: problems)
        }
        guard problems.isEmpty, let validName else { throw APIError.validation(problems) }
        // The typo check last: a 400 that names a suggestion only for an otherwise valid client.
        _ = try Self.email(email, confirmed: confirmEmail)
        return Valid(name: validName, email: validEmail, phone: .some(validPhone ?? nil), notes: .some(validNotes ?? nil))
    }

    static func name(_ text: String) throws -> String {
        let name = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !name.isEmpty, name.codePoints <= 100, !name.hasInvisibleCharacters() else {
            throw APIError.validation([.init(field: "name", message: "must be 1 to 100 characters without control or invisible formatting characters")])
        }
        return name
    }

    /// The address as mail goes to it (`EmailAddress.mailbox`); a look-alike spelling of another
    /// address is refused like any invalid one, so it can neither be invited nor collide with one.
    static func email(_ text: String, confirmed: Bool) throws -> String {
        guard let email = EmailAddress(text)?.mailbox else { throw invalidEmail(text) }
        if !confirmed, let suggestion = EmailSuggestion.suggestion(for: email) {
            throw APIError(
                .badRequest, code: "email_suspicious", detail: "Did you mean \(suggestion)? Send `confirm_email: true` to invite \(email) as typed.",
                errors: [.init(field: "email", message: "looks like a typo of \(suggestion)")])
        }
        return email
    }

    static func invalidEmail(_ typed: String, alongside problems: [Problem.FieldError] = []) -> APIError {
        APIError(
            .badRequest, code: "invalid_email",
            detail:
                "\"\(typed.prefix(100))\" is not a valid email address: type it in plain characters (no fullwidth letters, ligatures or look-alike signs such as the Kelvin sign for K).",
            errors: [.init(field: "email", message: "is not a valid email address")] + problems)
    }

    /// Digits with the usual separators, an optional leading `+`: 5 to 32 characters, at least 5 digits.
    /// An empty phone is no phone.
    static func phone(_ text: String) throws -> String? {
        let phone = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if phone.isEmpty { return nil }
        let allowed = phone.enumerated().allSatisfy { index, character in
            character.isASCII && (character.isNumber || " -().".contains(character) || (character == "+" && index == 0))
        }
        guard allowed, (5...32).contains(phone.count), phone.filter(\.isNumber).count >= 5 else {
            throw APIError.validation([.init(field: "phone", message: "must be a phone number: digits, spaces, - ( ) . and a leading +")])
        }
        return phone
    }

    static func notes(_ text: String) throws -> String? {
        let notes = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if notes.isEmpty { return nil }
        guard notes.codePoints <= 2_000, !notes.hasInvisibleCharacters(allowing: ["\n", "\r", "\t"]) else {
            throw APIError.validation([.init(field: "notes", message: "must be at most 2000 characters without control or invisible formatting characters")])
        }
        return notes
    }

    /// Invitation mail goes out only for a coach whose own address is proven: the mail names the coach
    /// and replies go to that address.
    static func requireVerifiedSender(_ context: AuthenticatedContext) throws {
        guard context.caller.emailVerified else {
            throw APIError(.forbidden, code: "email_unverified", detail: "Verify your email address before you send invitations.")
        }
    }

    /// `429 invite_limit` once the coach has sent the day's invitations.
    static func checkInviteLimit(_ coach: UUID, settings: InvitationsSettings, clients: ClientStore, on connection: PostgresConnection, logger: Logger) async throws {
        let sent = try await clients.recentInvitations(coach: coach, on: connection, logger: logger)
        guard sent.count < settings.invitationsPerCoachPerDay else {
            throw APIError.tooManyRequests(
                "A coach may invite \(settings.invitationsPerCoachPerDay) clients a day.", code: "invite_limit", retryAfterSeconds: sent.secondsUntilOneFrees)
        }
    }

    /// `429 resend_limit` once the coach's mails to the address have come to the day's limit, whether
    /// for this roster entry or one removed before it.
    static func checkMailLimit(coach: UUID, email: String, settings: InvitationsSettings, clients: ClientStore, on connection: PostgresConnection, logger: Logger) async throws {
        let sent = try await clients.recentSends(coach: coach, email: email, on: connection, logger: logger)
        guard sent.count < settings.mailsPerClientPerDay else {
            throw APIError.tooManyRequests(
                "An invitation is mailed at most \(settings.mailsPerClientPerDay) times a day.", code: "resend_limit", retryAfterSeconds: sent.secondsUntilOneFrees)
        }
    }
}

extension AuthenticatedContext {
    /// The UUID in the `:id` path segment; anything else is 404 like an unknown id.
    func clientID() throws -> UUID {
        guard let id = parameters.get("id").flatMap(UUID.init(parsing:)) else { throw ClientFields.notFound }
        return id
    }
}
