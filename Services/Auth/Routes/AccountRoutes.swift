import Foundation
import Hummingbird
import ServiceKit

/// Email-and-password accounts: sign-up, login, email verification, password reset and change,
/// self-serve coach role, account deletion.
struct AccountRoutes {
    let accounts: Accounts

    func add(to router: Router<ServiceRequestContext>) {
        let open = router.group("v1/auth")
        open.post("signup", use: signup)
        open.post("login", use: login)
        open.post("email/verify", use: verifyEmail)
        open.post("password/forgot", use: forgotPassword)
        open.post("password/reset", use: resetPassword)
        let signedIn = router.group("v1/auth", context: AuthenticatedContext.self)
        signedIn.post("email/verify/resend", use: resendVerification)
        signedIn.post("password/change", use: changePassword)
        signedIn.post("roles/coach", use: becomeCoach)
        signedIn.delete("account", use: deleteAccount)
    }

    struct SignupRequest: StrictJSONBody {
        var email: String
        var password: String
        var displayName: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case email, password, displayName = "display_name" }
    }

    @Sendable func signup(_ request: Request, context: ServiceRequestContext) async throws -> EditedResponse<SignInResponse> {
        let body = try await request.decode(as: SignupRequest.self, context: context)
        // Stored as the mailbox (the domain in its ASCII form) and unique by its canonical form, so
        // a look-alike spelling can neither take nor shadow someone's address.
        guard let email = EmailAddress(body.email)?.mailbox else { throw AuthErrors.invalidEmail(body.email) }
        try checkPassword(body.password, email: email)
        let displayName = try DisplayName.validate(body.displayName)
        // Before the hash: a flood of sign-ups would otherwise hold bcrypt's threads, which sign-ins
        // share, and walk through addresses asking which have accounts.
        try await accounts.limit(
            "auth:signup:ip:\(TrustedProxies.limitKey(context.clientAddress))", per: .seconds(3600), max: accounts.settings.signupsPerHourPerIP,
            detail: "Too many sign-ups from this address.", whenUnavailable: .allow)
        let hash = try await accounts.hasher.hash(body.password)
        // Past the address's verification mails, the account is made without one: its holder asks
        // for another later (`POST /v1/auth/email/verify/resend`).
        let mailing: Bool
        do {
            try await accounts.countVerificationMail(to: email)
            mailing = true
        } catch let error as APIError where error.status == .tooManyRequests {
            context.logger.notice("verification mail not sent: the address's mails this hour are spent")
            mailing = false
        }
        let client = context.client(request)
        let accounts = self.accounts
        let (user, session) = try await accounts.postgres.transaction(logger: context.logger) { connection in
            guard let user = try await accounts.users.insert(email: email, emailVerified: false, passwordHash: hash, displayName: displayName, roles: [.user], on: connection, logger: context.logger)
            else {
                throw APIError.conflict("An account with this email already exists; sign in instead.", code: "email_taken")
            }
            try await accounts.outbox.write(
                UserRegistered(userID: user.id, email: user.email, displayName: user.displayName, provider: "email"), userID: user.id, on: connection, logger: context.logger)
            if mailing {
                let token = try await accounts.emailTokens.issue(.verifyEmail, userID: user.id, email: user.email, on: connection, logger: context.logger)
                try await accounts.mailer.sendVerification(to: user.email, token: token, on: connection, logger: context.logger)
            }
            return try await accounts.startSession(for: user, method: "password", client: client, on: connection)
        }
        return EditedResponse(status: .created, response: SignInResponse(user: UserView(user, providers: []), session: session))
    }

    struct LoginRequest: StrictJSONBody {
        var email: String
        var password: String
        enum CodingKeys: String, CodingKey, CaseIterable { case email, password }
    }

    /// Unknown email, account without a password and wrong password all answer the same
    /// `invalid_credentials` after the same bcrypt work.
    @Sendable func login(_ request: Request, context: ServiceRequestContext) async throws -> SignInResponse {
        let body = try await request.decode(as: LoginRequest.self, context: context)
        let email = EmailAddress.normalize(body.email)
        let client = context.client(request)
        try await accounts.throttle.begin(account: email, ip: client.ip)
        let accounts = self.accounts
        let user = try await accounts.postgres.withConnectionOnItsLoop { connection in
            try await accounts.users.find(email: email, on: connection, logger: context.logger)
        }
        let matches = try await accounts.hasher.verify(body.password, hash: user?.passwordHash)
        guard matches, let user else {
            throw APIError.unauthorized("The email or password is wrong.", code: "invalid_credentials")
        }
        await accounts.throttle.succeeded(account: email, ip: client.ip)
        guard !user.isDisabled else { throw AuthErrors.disabled }
        // Hashed again, outside the transaction as every hash, when `BCRYPT_COST` was raised since.
        var stronger: String?
        if let hash = user.passwordHash, accounts.hasher.isWeakerThanConfigured(hash) { stronger = try await accounts.hasher.hash(body.password) }
        return try await accounts.postgres.transaction(logger: context.logger) { connection in
            // The password was checked outside this transaction (bcrypt is slow): a reset, change
            // or takeover that committed meanwhile ended every session, and this one must not be
            // made after it with the old password. The account is held until the session is in.
            guard let current = try await accounts.users.find(id: user.id, forUpdate: true, on: connection, logger: context.logger),
                current.passwordHash == user.passwordHash
            else {
                throw APIError.unauthorized("The email or password is wrong.", code: "invalid_credentials")
            }
            guard !current.isDisabled else { throw AuthErrors.disabled }
            if let stronger { try await accounts.users.setPassword(hash: stronger, of: current.id, on: connection, logger: context.logger) }
            let (signedIn, session) = try await accounts.startSession(for: current, method: "password", client: client, on: connection)
            return SignInResponse(user: try await accounts.view(of: signedIn, on: connection), session: session)
        }
    }

    struct VerifyRequest: StrictJSONBody {
        var token: String
        var password: String?
        var disown: Bool?
        enum CodingKeys: String, CodingKey, CaseIterable { case token, password, disown }
    }

    struct VerifiedResponse: ResponseEncodable {
        var emailVerified: Bool
        /// After disowning: a single-use token for `POST /v1/auth/password/reset`, so the mailbox's
        /// owner sets the account's first password.
        var passwordToken: String?
        var passwordTokenExpiresAt: Date?
        enum CodingKeys: String, CodingKey {
            case emailVerified = "email_verified", passwordToken = "password_token", passwordTokenExpiresAt = "password_token_expires_at"
        }
    }

    /// The rules are `Accounts.verifyEmail`'s, shared with the page the link opens.
    @Sendable func verifyEmail(_ request: Request, context: ServiceRequestContext) async throws -> VerifiedResponse {
        let body = try await request.decode(as: VerifyRequest.self, context: context)
        let verified = try await accounts.verifyEmail(
            token: body.token, password: body.password, disown: body.disown == true, caller: context.caller, clientAddress: context.clientAddress,
            logger: context.logger)
        return VerifiedResponse(emailVerified: true, passwordToken: verified.passwordToken, passwordTokenExpiresAt: verified.passwordTokenExpiresAt)
    }

    @Sendable func resendVerification(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let accounts = self.accounts
        let alreadyVerified = APIError.conflict("This email address is already verified.", code: "already_verified")
        let user = try await accounts.liveUser(context)
        guard !user.emailVerified else { throw alreadyVerified }
        try await accounts.limit(
            "auth:verify-resend:\(user.id)", per: .seconds(3600), max: accounts.settings.resendPerHour,
            detail: "Verification mails are limited to \(accounts.settings.resendPerHour) an hour.", whenUnavailable: .allow)
        try await accounts.countVerificationMail(to: user.email)
        try await accounts.postgres.transaction(logger: context.logger) { connection in
            // Again under the account's lock: a verification committing meanwhile spent every verify
            // link, and one issued after it would outlive it.
            guard let current = try await accounts.users.find(id: user.id, forUpdate: true, on: connection, logger: context.logger), !current.emailVerified else {
                throw alreadyVerified
            }
            let token = try await accounts.emailTokens.issue(.verifyEmail, userID: user.id, email: user.email, on: connection, logger: context.logger)
            try await accounts.mailer.sendVerification(to: user.email, token: token, on: connection, logger: context.logger)
        }
        return .accepted
    }

    struct ForgotRequest: StrictJSONBody {
        var email: String
        enum CodingKeys: String, CodingKey, CaseIterable { case email }
    }

    /// Always 202, and in the same time: the lookup and the mail happen after the response, so neither
    /// the response nor its timing says whether an account exists. Mails to one address are limited
    /// (silently) so the endpoint cannot be used to flood someone's inbox.
    @Sendable func forgotPassword(_ request: Request, context: ServiceRequestContext) async throws -> HTTPResponse.Status {
        let body = try await request.decode(as: ForgotRequest.self, context: context)
        // The mail goes to the account's stored address, never to the text typed here.
        guard let email = EmailAddress(body.email)?.canonical else { throw AuthErrors.invalidEmail(body.email) }
        let accounts = self.accounts
        let logger = context.logger
        Task {
            do {
                let allowed: Bool
                do {
                    try await accounts.limit("auth:reset-mail:\(LoginThrottle.hashed(email))", per: .seconds(3600), max: 5, detail: "", whenUnavailable: .allow)
                    allowed = true
                } catch is APIError {
                    allowed = false
                }
                guard allowed else { return }
                try await accounts.postgres.transaction(logger: logger) { connection in
                    guard let user = try await accounts.users.find(email: email, on: connection, logger: logger), !user.isDisabled else { return }
                    let token = try await accounts.emailTokens.issue(.resetPassword, userID: user.id, email: user.email, on: connection, logger: logger)
                    try await accounts.mailer.sendPasswordReset(to: user.email, name: user.nameForMail, token: token, on: connection, logger: logger)
                }
            } catch {
                logger.error("password reset mail not queued", metadata: ["error": "\(error)"])
            }
        }
        return .accepted
    }

    struct ResetRequest: StrictJSONBody {
        var token: String
        var password: String
        enum CodingKeys: String, CodingKey, CaseIterable { case token, password }
    }

    /// Sets the password, proves the address (the link came to it), and ends every session: the rules
    /// are `Accounts.resetPassword`'s, shared with the page the link opens.
    @Sendable func resetPassword(_ request: Request, context: ServiceRequestContext) async throws -> HTTPResponse.Status {
        let body = try await request.decode(as: ResetRequest.self, context: context)
        try await accounts.resetPassword(token: body.token, password: body.password, logger: context.logger)
        return .noContent
    }

    struct ChangeRequest: StrictJSONBody {
        var currentPassword: String
        var password: String
        enum CodingKeys: String, CodingKey, CaseIterable { case currentPassword = "current_password", password }
    }

    /// Needs the current password (counted like a login failure when wrong); other sessions end, and
    /// so do the Apple and Google sign-ins linked with a password.
    /// The reset links go too, once the address is proven: before that, a reset link is how the
    /// mailbox's owner takes back an account someone else set up with it, which the maker's
    /// password changes must not undo.
    @Sendable func changePassword(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let body = try await request.decode(as: ChangeRequest.self, context: context)
        let accounts = self.accounts
        let user = try await accounts.liveUser(context)
        guard user.passwordHash != nil else {
            throw APIError(.forbidden, code: "no_password", detail: "This account signs in with Apple or Google and has no password; set one with the password reset mail.")
        }
        try await accounts.confirmPassword(body.currentPassword, of: user, context: context, request: request)
        try checkPassword(body.password, email: user.email)
        let hash = try await accounts.hasher.hash(body.password)
        try await accounts.postgres.transaction(logger: context.logger) { connection in
            let locked = try await accounts.lockUnchanged(user, context: context, on: connection)
            try await accounts.users.setPassword(hash: hash, of: user.id, on: connection, logger: context.logger)
            if locked.emailVerified {
                try await accounts.emailTokens.invalidate(.resetPassword, userID: user.id, on: connection, logger: context.logger)
            }
            try await accounts.sessions.endAll(of: user.id, except: context.caller.sessionID, on: connection, logger: context.logger)
            // Whoever else knew the old password could have linked their own Apple or Google sign-in
            // with it: those go, as the other sessions do.
            try await accounts.users.unlinkLinkedWithPassword(user.id, on: connection, logger: context.logger)
            try await accounts.outbox.write(UserPasswordChanged(userID: user.id, method: .change), userID: user.id, on: connection, logger: context.logger)
            try await accounts.mailer.sendPasswordChanged(to: user.email, name: user.nameForMail, on: connection, logger: context.logger)
        }
        return .noContent
    }

    /// Self-serve coach role (when `COACH_SELF_SERVE` allows it); it reaches the token at the next refresh.
    @Sendable func becomeCoach(_ request: Request, context: AuthenticatedContext) async throws -> UserView {
        guard accounts.settings.coachSelfServe else {
            throw APIError.forbidden("Coach accounts are granted by an admin here.")
        }
        let accounts = self.accounts
        _ = try await accounts.liveUser(context)
        return try await accounts.postgres.transaction(logger: context.logger) { connection in
            guard let user = try await accounts.users.find(id: context.caller.userID, forUpdate: true, on: connection, logger: context.logger), !user.isDisabled else {
                throw AuthErrors.sessionRevoked
            }
            let updated = try await accounts.changeRoles(of: user, adding: [.coach], on: connection)
            return try await accounts.view(of: updated, on: connection)
        }
    }

    struct DeleteRequest: StrictJSONBody {
        var password: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case password }
    }

    /// With the password, or for an Apple/Google-only account a session started in the last
    /// `REAUTH_WINDOW_SECONDS`. Everything of the account goes; `user.deleted` tells the other services.
    /// The last admin cannot go (`409 last_admin`): nobody could administer the accounts after.
    @Sendable func deleteAccount(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<DeletedResponse> {
        let body = try await request.decodeIfPresent(as: DeleteRequest.self, context: context) ?? DeleteRequest(password: nil)
        let accounts = self.accounts
        let user = try await accounts.liveUser(context)
        if user.passwordHash != nil {
            guard let password = body.password else {
                throw APIError.validation([.init(field: "password", message: "is required to delete an account that has one")])
            }
            try await accounts.confirmPassword(password, of: user, context: context, request: request)
        } else {
            let recent = try await accounts.sessionStartedRecently(context)
            guard recent else {
                throw APIError(
                    .forbidden, code: "reauthentication_required",
                    detail: "Sign in with Apple or Google again, then delete the account within \(accounts.settings.reauthWindow.components.seconds / 60) minutes.")
            }
        }
        try await accounts.postgres.transaction(logger: context.logger) { connection in
            // The admin lock before the row, in the order an admin's change to this account takes
            // them (the other way round, each would wait for the other); for every account, since
            // one may have been made admin since it was read.
            try await accounts.lockAdminChanges(on: connection)
            let current = try await accounts.lockUnchanged(user, context: context, on: connection)
            if current.roles.contains(.admin) { try await accounts.requireAnotherAdmin(than: current.id, on: connection) }
            try await accounts.users.delete(current, on: connection, logger: context.logger)
            // Live too: the gateway ends the account's event streams, whose tokens still verify for a while.
            try await accounts.outbox.write(UserDeleted(userID: user.id), userID: user.id, live: true, on: connection, logger: context.logger)
        }
        return EditedResponse(status: .accepted, response: DeletedResponse(id: user.id, status: "deleted"))
    }

    struct DeletedResponse: ResponseEncodable {
        var id: UUID
        var status: String
    }

    private func checkPassword(_ password: String, email: String?) throws {
        if let violation = accounts.policy.violation(password, email: email) { throw AuthErrors.weakPassword(violation) }
    }
}

/// Problems several auth routes raise.
enum AuthErrors {
    static let disabled = APIError(.forbidden, code: "account_disabled", detail: "This account is disabled. Contact support.")
    static let sessionRevoked = APIError.unauthorized("This session has ended; sign in again.", code: "session_revoked")
    static let proofRequired = APIError.unauthorized(
        "Confirming the address also needs the account's password (or its signed-in app's access token); if you did not sign up, send `disown: true` instead.",
        code: "proof_required")

    /// An address that breaks `EmailAddress`'s rule, a look-alike spelling among them.
    static func invalidEmail(_ typed: String) -> APIError {
        APIError(
            .badRequest, code: "invalid_email",
            detail:
                "\"\(typed.prefix(100))\" is not a valid email address: type it in plain characters (no fullwidth letters, ligatures or look-alike signs such as the Kelvin sign for K).",
            errors: [.init(field: "email", message: "is not a valid email address")])
    }

    static func weakPassword(_ rule: String) -> APIError {
        APIError(.badRequest, code: "weak_password", detail: rule, errors: [.init(field: "password", message: rule)])
    }

    static func mailToken(_ outcome: EmailTokenStore.Consumed) -> APIError {
        switch outcome {
        case .expired: APIError(.badRequest, code: "token_expired", detail: "This link has expired; ask for a new one.")
        case .used: APIError(.badRequest, code: "token_used", detail: "This link was already used; ask for a new one if you need it.")
        default: APIError(.badRequest, code: "invalid_token", detail: "This link is not valid.")
        }
    }
}

enum DisplayName {
    static let maxLength = 80

    /// A name from a provider is cleaned rather than refused: a sign-in must not fail over it.
    static func sanitized(_ name: String?) -> String? {
        guard let name else { return nil }
        let cleaned = name.withoutInvisibleCharacters.trimmingCharacters(in: .whitespacesAndNewlines)
        // Cut at a character's end within the limit in code points, not inside a flag or an emoji sequence.
        var kept = "", points = 0
        for character in cleaned {
            points += character.unicodeScalars.count
            if points > maxLength { break }
            kept.append(character)
        }
        return kept.isEmpty ? nil : kept
    }

    static func validate(_ name: String?) throws -> String? {
        guard let trimmed = name?.trimmingCharacters(in: .whitespacesAndNewlines), !trimmed.isEmpty else { return nil }
        guard trimmed.codePoints <= maxLength, !trimmed.hasInvisibleCharacters() else {
            throw APIError.validation([.init(field: "display_name", message: "must be at most \(maxLength) characters without control or invisible formatting characters")])
        }
        return trimmed
    }
}

extension ServiceRequestContext {
    func client(_ request: Request) -> Accounts.Client {
        Accounts.Client(ip: clientAddress, userAgent: request.headers[.userAgent])
    }
}

extension SignInResponse: ResponseEncodable {}
extension UserView: ResponseEncodable {}
extension SessionTokens: ResponseEncodable {}
