import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Sign in with Apple or Google, once the route has checked the nonce and the ID token: the person
/// is signed in to the account of the identity, to the account with the token's address (linked),
/// or to a new account.
extension Accounts {
    /// A provider sign-in whose ID token verified.
    struct ProviderSignIn: Sendable {
        var identity: VerifiedIdentity
        /// The provider as people call it (`Apple`), for the problems.
        var providerName: String
        var nonce: String?
        var nonceExpiry: Date?
        /// The name the app passed on (Apple gives it to the app only the first time).
        var name: String?
        /// The password of the existing account with the token's address, to link to it.
        var linkPassword: String?
    }

    /// Signs the person in, in one transaction that also spends the nonce (or the token).
    func signIn(_ attempt: ProviderSignIn, client: Client, logger: Logger) async throws -> SignInResponse {
        // A password sent to link is checked before the transaction (throttled, and bcrypt's work
        // holds no lock or connection); the transaction then links only if it is still that hash.
        let confirmedHash = try await confirmLinkPassword(attempt.linkPassword, email: attempt.identity.email, client: client, logger: logger)
        let identity = attempt.identity
        return try await postgres.transaction(logger: logger) { connection in
            try await nonces.spend(nonce: attempt.nonce, expiresAt: attempt.nonceExpiry, identity: identity, on: connection, logger: logger)
            if let user = try await users.user(provider: identity.provider, subject: identity.subject, on: connection, logger: logger) {
                guard !user.isDisabled else { throw AuthErrors.disabled }
                return try await signInExisting(user, attempt, client: client, on: connection, logger: logger)
            }
            let email = try Self.claimedEmail(of: attempt)
            if let existing = try await users.find(email: email, forUpdate: true, on: connection, logger: logger) {
                guard !existing.isDisabled else { throw AuthErrors.disabled }
                let linked = try await link(attempt, to: existing, email: email, confirmedHash: confirmedHash, on: connection, logger: logger)
                return try await signInExisting(linked, attempt, client: client, on: connection, logger: logger)
            }
            return try await signUp(attempt, email: email, client: client, on: connection, logger: logger)
        }
    }

    /// The token's address, as a typed one would be taken: a look-alike spelling finds and makes no account.
    static func claimedEmail(of attempt: ProviderSignIn) throws -> String {
        guard let claimed = attempt.identity.email else {
            throw APIError(
                .badRequest, code: "email_required",
                detail: "The \(attempt.providerName) token carries no email address; allow sharing the email (a private relay address is fine).")
        }
        guard let email = EmailAddress(claimed)?.mailbox else { throw AuthErrors.invalidEmail(claimed) }
        return email
    }

    /// Links the identity to the account with its address: when the person shows the account's
    /// password; or when the provider answers for the address: then an account whose address was
    /// proven keeps all it has, and one whose address never was is the mailbox owner's, cleared of
    /// what its maker set. The provider's claim never makes anyone admin.
    func link(_ attempt: ProviderSignIn, to existing: UserRecord, email: String, confirmedHash: String?, on connection: PostgresConnection, logger: Logger) async throws
        -> UserRecord
    {
        let identity = attempt.identity
        if attempt.linkPassword != nil {
            guard let confirmedHash, existing.passwordHash == confirmedHash else {
                throw APIError.unauthorized("The password is wrong.", code: "invalid_credentials")
            }
            try await users.link(
                provider: identity.provider, subject: identity.subject, email: email, proven: existing.emailVerified, withPassword: true, to: existing.id,
                on: connection, logger: logger)
            return existing
        }
        guard identity.emailVouched else {
            throw APIError.conflict(
                "An account with this email exists and \(attempt.providerName) does not vouch for the address: send the account's password with the ID token (`password`) to link them.",
                code: "account_exists")
        }
        var user = existing
        if !existing.emailVerified {
            user = try await takeOver(existing, on: connection)
            try await users.markVerified(existing.id, byMail: false, on: connection, logger: logger)
            user.emailVerified = true
            try await outbox.write(
                UserEmailVerified(userID: user.id, email: user.email, vouchedBy: identity.provider), userID: user.id, live: true, on: connection, logger: logger)
        }
        try await users.link(provider: identity.provider, subject: identity.subject, email: email, proven: true, to: existing.id, on: connection, logger: logger)
        return user
    }

    /// A session on an account that was there: it takes the name the provider gave if it has none.
    func signInExisting(_ user: UserRecord, _ attempt: ProviderSignIn, client: Client, on connection: PostgresConnection, logger: Logger) async throws -> SignInResponse {
        var user = user
        if user.displayName == nil, let name = DisplayName.sanitized(attempt.name ?? attempt.identity.name) {
            try await users.setDisplayName(name, of: user.id, on: connection, logger: logger)
            user.displayName = name
        }
        let (signedIn, session) = try await startSession(for: user, method: attempt.identity.provider, client: client, on: connection)
        return SignInResponse(user: try await view(of: signedIn, on: connection), session: session, created: false)
    }

    /// A new account with this identity, its address verified if the provider answers for it,
    /// proven by mail otherwise.
    func signUp(_ attempt: ProviderSignIn, email: String, client: Client, on connection: PostgresConnection, logger: Logger) async throws -> SignInResponse {
        let identity = attempt.identity
        guard
            let user = try await users.insert(
                email: email, emailVerified: identity.emailVouched, passwordHash: nil, displayName: DisplayName.sanitized(attempt.name ?? identity.name),
                roles: [.user], on: connection, logger: logger)
        else {
            throw APIError.conflict("An account with this email was just created; try again.", code: "email_taken")
        }
        try await users.link(provider: identity.provider, subject: identity.subject, email: email, proven: identity.emailVouched, to: user.id, on: connection, logger: logger)
        try await outbox.write(
            UserRegistered(userID: user.id, email: user.email, displayName: user.displayName, provider: identity.provider), userID: user.id, on: connection, logger: logger)
        if identity.emailVouched {
            try await outbox.write(
                UserEmailVerified(userID: user.id, email: user.email, vouchedBy: identity.provider), userID: user.id, live: true, on: connection, logger: logger)
        } else {
            // The provider does not answer for the address: prove it the usual way.
            let token = try await emailTokens.issue(.verifyEmail, userID: user.id, email: user.email, on: connection, logger: logger)
            try await mailer.sendVerification(to: user.email, token: token, on: connection, logger: logger)
        }
        let (signedIn, session) = try await startSession(for: user, method: identity.provider, client: client, on: connection)
        return SignInResponse(user: UserView(signedIn, providers: [identity.provider]), session: session, created: true)
    }

    /// The hash of the password of the account at `email`, when `password` matches it; nil when no
    /// password came. Counted as a sign-in attempt.
    func confirmLinkPassword(_ password: String?, email: String?, client: Client, logger: Logger) async throws -> String? {
        guard let password, let email else { return nil }
        let normalized = EmailAddress.normalize(email)
        try await throttle.begin(account: normalized, ip: client.ip)
        let users = self.users
        let hash = try await postgres.withConnectionOnItsLoop { connection in
            try await users.find(email: email, on: connection, logger: logger)?.passwordHash
        }
        guard try await hasher.verify(password, hash: hash) else {
            throw APIError.unauthorized("The password is wrong.", code: "invalid_credentials")
        }
        await throttle.succeeded(account: normalized, ip: client.ip)
        return hash
    }
}
