import Foundation
import Hummingbird
import Logging
import PostgresNIO
import ServiceKit

/// Everything the auth routes work with, built once from the settings and the kit's dependencies.
/// Routes decode, call one of these operations, and encode; the operations own the transactions.
struct Accounts: Sendable {
    let settings: AuthSettings
    let postgres: PostgresClient
    let redis: RedisClient
    let outbox: EventOutbox
    let logger: Logger
    let users = UserStore()
    let sessions: SessionStore
    let emailTokens = EmailTokenStore()
    let hasher: PasswordHasher
    let policy: PasswordPolicy
    let throttle: LoginThrottle
    /// The password asked again when signed in (change, deletion): counted apart from sign-in.
    let reauthThrottle: LoginThrottle
    let mailer: AuthMailer
    let signer: AccessTokenSigner
    let apple: IdentityTokenVerifier?
    let google: IdentityTokenVerifier?
    let nonces: ProviderNonces

    init(settings: AuthSettings, common: CommonPasswordList, dependencies: ServiceDependencies) throws {
        self.settings = settings
        postgres = dependencies.postgres
        redis = dependencies.redis
        outbox = dependencies.outbox
        logger = dependencies.logger
        sessions = SessionStore(idleDays: settings.sessionIdleDays, reuseGrace: settings.refreshReuseGrace, outbox: dependencies.outbox)
        let checks = dependencies.metrics.makeCounter(
            descriptor: .init(metricName: "auth_password_checks", unitName: "total", helpText: "Passwords checked with bcrypt (an unknown account's against the dummy hash)"))
        hasher = PasswordHasher(cost: settings.bcryptCost, onCheck: { checks.increment() })
        policy = PasswordPolicy(common: common)
        throttle = LoginThrottle(redis: dependencies.redis, limits: settings.throttle, logger: dependencies.logger)
        reauthThrottle = LoginThrottle(redis: dependencies.redis, limits: settings.throttle, logger: dependencies.logger, scope: "reauth")
        mailer = AuthMailer(settings: settings.mail)
        signer = try AccessTokenSigner(keys: settings.signing, issuer: settings.issuer, audience: settings.audience, ttl: settings.accessTokenTTL)
        apple = settings.apple.map { IdentityTokenVerifier(config: $0, httpClient: dependencies.httpClient, logger: dependencies.logger) }
        google = settings.google.map { IdentityTokenVerifier(config: $0, httpClient: dependencies.httpClient, logger: dependencies.logger) }
        nonces = ProviderNonces(signingKey: settings.signing.privateKey)
    }

    /// Where the request came from, for sessions and throttling.
    struct Client: Sendable {
        var ip: String
        var userAgent: String?
    }

    // MARK: sessions

    /// Starts a session for `user` inside the caller's transaction: the refresh token, the access
    /// token, `last_sign_in_at`, and `user.signed_in`. Admin by configuration is settled first.
    func startSession(for user: UserRecord, method: String, client: Client, on connection: PostgresConnection) async throws -> (UserRecord, SessionTokens) {
        let user = try await grantConfiguredAdmin(user, on: connection)
        let (session, refresh) = try await sessions.create(userID: user.id, method: method, userAgent: client.userAgent, ip: client.ip, on: connection, logger: logger)
        try await users.recordSignIn(user.id, on: connection, logger: logger)
        try await outbox.write(UserSignedIn(userID: user.id, sessionID: session.id, provider: method), userID: user.id, on: connection, logger: logger)
        let access = try await signer.sign(userID: user.id, sessionID: session.id, roles: user.roles, emailVerified: user.emailVerified)
        var signedIn = user
        signedIn.lastSignInAt = Date()
        return (signedIn, SessionTokens(accessToken: access, refreshToken: refresh.value, expiresIn: signer.ttlSeconds, sessionID: session.id))
    }

    /// An address listed in `ADMIN_EMAILS` becomes admin once it is proven by mail with nothing kept
    /// that someone else set (`emailProvenByMail`): an unverified sign-up with someone else's address
    /// gets nothing, and neither does an Apple or Google sign-in on the strength of its email claim.
    func grantConfiguredAdmin(_ user: UserRecord, on connection: PostgresConnection) async throws -> UserRecord {
        guard user.emailVerified, user.emailProvenByMail, !user.roles.contains(.admin), settings.adminEmails.contains(EmailAddress.normalize(user.email)) else { return user }
        // Once per account: an admin who took the role away again is not overruled at the next
        // sign-in or refresh (to stop it for good, the address leaves ADMIN_EMAILS).
        guard try await users.recordConfiguredAdminGrant(user.id, on: connection, logger: logger) else {
            // A sign-in or refresh that raced this one may have made the grant while this one waited
            // for its row: the roles as they are now, not as read before the wait.
            return try await users.find(id: user.id, on: connection, logger: logger) ?? user
        }
        // The roles as they are now, the row held: a caller that read the user without its lock (a
        // refresh) would otherwise write back roles an admin has changed since.
        guard var updated = try await users.find(id: user.id, forUpdate: true, on: connection, logger: logger) else { return user }
        guard !updated.roles.contains(.admin) else { return updated }
        updated.roles = Role.ordered(updated.roles + [.admin])
        try await users.setRoles(updated.roles, of: user.id, on: connection, logger: logger)
        try await outbox.write(UserRolesChanged(userID: user.id, roles: updated.roles, added: [.admin], removed: []), userID: user.id, on: connection, logger: logger)
        logger.notice("granted admin from ADMIN_EMAILS", metadata: ["user_id": "\(user.id)"])
        return updated
    }

    /// Changes roles in the caller's transaction, enforcing the exclusive pairs and emitting
    /// `user.roles_changed` when something changed.
    func changeRoles(of user: UserRecord, adding: [Role] = [], removing: [Role] = [], on connection: PostgresConnection) async throws -> UserRecord {
        var roles = Set(user.roles)
        for role in adding {
            for (a, b) in Role.exclusivePairs where (role == a && roles.contains(b)) || (role == b && roles.contains(a)) {
                let other = role == a ? b : a
                throw APIError.conflict("An account cannot be both \(role.rawValue) and \(other.rawValue); remove \(other.rawValue) first.", code: "role_conflict")
            }
            roles.insert(role)
        }
        for role in removing {
            guard role != .user else { throw APIError.badRequest("Every account has the user role; it cannot be removed.", code: "invalid_role") }
            roles.remove(role)
        }
        let ordered = Role.ordered(roles)
        guard ordered != user.roles else { return user }
        try await users.setRoles(ordered, of: user.id, on: connection, logger: logger)
        let added = ordered.filter { !user.roles.contains($0) }
        let removed = user.roles.filter { !ordered.contains($0) }
        if removed.contains(.admin) {
            // An admin took it away: ADMIN_EMAILS must not give it back, even if it never granted it.
            _ = try await users.recordConfiguredAdminGrant(user.id, on: connection, logger: logger)
        }
        try await outbox.write(UserRolesChanged(userID: user.id, roles: ordered, added: added, removed: removed), userID: user.id, live: true, on: connection, logger: logger)
        var updated = user
        updated.roles = ordered
        return updated
    }

    /// Makes an account the mailbox owner's, who has just proven the address without having set the
    /// account up (a disowning verification, or a provider that answers for the address): every
    /// session ends, and the password, the provider sign-ins, the chosen name, the roles taken (coach)
    /// and the outstanding mail links go, since whoever set them may not be that owner.
    func takeOver(_ user: UserRecord, on connection: PostgresConnection) async throws -> UserRecord {
        try await sessions.endAll(of: user.id, on: connection, logger: logger)
        try await users.removeCredentials(of: user.id, on: connection, logger: logger)
        try await outbox.write(UserPasswordChanged(userID: user.id, method: .disowned, makerDropped: true), userID: user.id, on: connection, logger: logger)
        logger.notice("account taken over by its address's owner", metadata: ["user_id": "\(user.id)"])
        var clean = try await changeRoles(of: user, removing: user.roles.filter { $0 != .user }, on: connection)
        clean.passwordHash = nil
        clean.displayName = nil
        return clean
    }

    func view(of user: UserRecord, on connection: PostgresConnection) async throws -> UserView {
        UserView(user, providers: try await users.providers(of: user.id, on: connection, logger: logger))
    }
}

/// The tokens of a session as clients receive them.
struct SessionTokens: Codable, Sendable {
    var accessToken: String
    var refreshToken: String
    var expiresIn: Int
    var tokenType = "Bearer"
    var sessionID: UUID

    init(accessToken: String, refreshToken: String, expiresIn: Int, sessionID: UUID) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.expiresIn = expiresIn
        self.sessionID = sessionID
    }

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token", refreshToken = "refresh_token", expiresIn = "expires_in", tokenType = "token_type", sessionID = "session_id"
    }
}

/// An account as its owner (and admins) see it.
struct UserView: Codable, Sendable {
    var id: UUID
    var email: String
    var emailVerified: Bool
    var displayName: String?
    var roles: [Role]
    var providers: [String]
    var hasPassword: Bool
    var disabled: Bool
    var createdAt: Date
    var lastSignInAt: Date?

    init(_ user: UserRecord, providers: [String]) {
        id = user.id
        email = user.email
        emailVerified = user.emailVerified
        displayName = user.displayName
        roles = user.roles
        self.providers = providers
        hasPassword = user.passwordHash != nil
        disabled = user.isDisabled
        createdAt = user.createdAt
        lastSignInAt = user.lastSignInAt
    }

    // In the order of their names, as the JSON is written (sorted keys).
    enum CodingKeys: String, CodingKey {
        case createdAt = "created_at", disabled, displayName = "display_name", email, emailVerified = "email_verified"
        case hasPassword = "has_password", id, lastSignInAt = "last_sign_in_at", providers, roles
    }
}

/// A sign-in's answer: the account and its new session (`created` for Apple and Google).
struct SignInResponse: Codable, Sendable {
    var user: UserView
    var session: SessionTokens
    var created: Bool?
}

extension Accounts {
    /// The caller's account, refusing a session that has ended (logout, reset, disable) even though
    /// its access token has not expired yet.
    func liveUser(_ context: AuthenticatedContext) async throws -> UserRecord {
        let caller = context.caller
        return try await postgres.withConnectionOnItsLoop { connection in
            guard let user = try await users.find(id: caller.userID, on: connection, logger: context.logger) else { throw AuthErrors.sessionRevoked }
            if let sessionID = caller.sessionID {
                guard try await sessions.isLive(sessionID, userID: caller.userID, on: connection, logger: context.logger) else { throw AuthErrors.sessionRevoked }
            }
            guard !user.isDisabled else { throw AuthErrors.disabled }
            return user
        }
    }

    /// The caller's account, locked in `connection`'s transaction, as it was when `user` was read and
    /// its password checked outside the transaction (bcrypt is slow): a reset, a change or a
    /// takeover that committed meanwhile changed the password or ended the caller's session, and what
    /// the caller asked must not be done after it (`401 session_revoked`).
    func lockUnchanged(_ user: UserRecord, context: AuthenticatedContext, on connection: PostgresConnection) async throws -> UserRecord {
        guard let current = try await users.find(id: user.id, forUpdate: true, on: connection, logger: context.logger), current.passwordHash == user.passwordHash
        else { throw AuthErrors.sessionRevoked }
        if let sessionID = context.caller.sessionID {
            guard try await sessions.isLive(sessionID, userID: user.id, on: connection, logger: context.logger) else { throw AuthErrors.sessionRevoked }
        }
        guard !current.isDisabled else { throw AuthErrors.disabled }
        return current
    }

    /// The caller's account if it is a live admin *now*: the roles in the token are not enough here,
    /// since a demoted or disabled admin's token lives on for a few minutes.
    func liveAdmin(_ context: AuthenticatedContext) async throws -> UserRecord {
        try context.require(anyOf: .admin)
        let user = try await liveUser(context)
        guard user.roles.contains(.admin) else { throw APIError.forbidden("This needs the admin role.") }
        return user
    }

    /// Admins' changes to roles and to who may sign in run one at a time, each checking again under
    /// the lock that its caller is still an enabled admin: two admins demoting each other at once
    /// would otherwise both succeed and leave none, and an admin demoted or disabled while its grant
    /// or its enabling waited would still make it.
    func holdAdminChanges(by caller: UUID, on connection: PostgresConnection) async throws {
        try await lockAdminChanges(on: connection)
        guard let user = try await users.find(id: caller, on: connection, logger: logger), user.roles.contains(.admin), !user.isDisabled else {
            throw APIError.forbidden("This needs the admin role.")
        }
    }

    /// The lock every change to who administers takes, before any account's row: held until the
    /// transaction ends (taking it again in the same one is free).
    func lockAdminChanges(on connection: PostgresConnection) async throws {
        try await connection.checkedRun("SELECT pg_advisory_xact_lock(hashtext('auth.admin-changes'))", logger: logger)
    }

    /// Refuses (`409 last_admin`) unless an enabled admin other than `admin` remains; under the same
    /// lock as every other change to who is admin, so two last admins leaving at once leave one.
    func requireAnotherAdmin(than admin: UUID, on connection: PostgresConnection) async throws {
        try await lockAdminChanges(on: connection)
        let others = try await connection.checkedQuery(
            "SELECT count(*) FROM users WHERE roles @> ARRAY['admin'] AND disabled_at IS NULL AND id <> \(admin)", logger: logger)
        var count = 0
        for try await value in others.decode(Int.self) { count = value }
        guard count > 0 else {
            throw APIError.conflict("You are the last admin: make someone else admin before you delete this account.", code: "last_admin")
        }
    }

    /// Checks the password of a signed-in user again (change, deletion), counting failures.
    func confirmPassword(_ password: String, of user: UserRecord, context: AuthenticatedContext, request: Request) async throws {
        let ip = context.clientAddress
        try await reauthThrottle.begin(account: user.id.uuidString, ip: ip)
        guard try await hasher.verify(password, hash: user.passwordHash) else {
            throw APIError(.forbidden, code: "invalid_credentials", detail: "The password is wrong.")
        }
        await reauthThrottle.succeeded(account: user.id.uuidString, ip: ip)
    }

    /// Whether the caller's session began within the re-authentication window.
    func sessionStartedRecently(_ context: AuthenticatedContext) async throws -> Bool {
        guard let sessionID = context.caller.sessionID else { return false }
        let window = Int(settings.reauthWindow.components.seconds)
        return try await postgres.withConnectionOnItsLoop { connection in
            try await connection.returnsRow(
                """
                SELECT 1 FROM sessions WHERE id = \(sessionID) AND user_id = \(context.caller.userID) AND created_at > now() - \(window) * interval '1 second'
                """, logger: context.logger)
        }
    }

    /// Verification mails to one address in an hour, whoever asks for them: signing up with
    /// someone's address and deleting the account again and again would otherwise flood their inbox.
    static let verificationMailsPerAddressPerHour = 5

    /// Counts a verification mail to `address` (by its canonical form, hashed); 429 `rate_limited`
    /// past `verificationMailsPerAddressPerHour`. Lifts while Redis is out of reach, as the sign-up cap.
    func countVerificationMail(to address: String) async throws {
        let canonical = EmailAddress(address)?.canonical ?? EmailAddress.normalize(address)
        try await limit(
            "auth:verify-mail:\(LoginThrottle.hashed(canonical))", per: .seconds(3600), max: Self.verificationMailsPerAddressPerHour,
            detail: "Verification mails to this address are limited to \(Self.verificationMailsPerAddressPerHour) an hour.", whenUnavailable: .allow)
    }

    /// A fixed-window limit counted in Redis (`RateLimit`): 429 `rate_limited` with `Retry-After` over `max`.
    func limit(_ key: String, per window: Duration, max: Int, detail: String, whenUnavailable: RateLimit.WhenUnavailable) async throws {
        try await RateLimit(max: max, per: window, whenUnavailable: whenUnavailable).count(key, detail: detail, redis: redis, logger: logger)
    }
}
