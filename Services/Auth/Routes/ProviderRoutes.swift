import Foundation
import Hummingbird
import Models
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens

/// Sign in with Apple and Google from native apps: the app sends the provider's ID token, the
/// service verifies it itself and signs the person in, making the account on first use.
struct ProviderRoutes {
    let accounts: Accounts

    func add(to router: Router<ServiceRequestContext>) {
        router.post("v1/auth/nonce", use: nonce)
        router.post("v1/auth/apple", use: { request, context in try await signIn(request, context: context, with: accounts.apple, name: "Apple") })
        router.post("v1/auth/google", use: { request, context in try await signIn(request, context: context, with: accounts.google, name: "Google") })
    }

    struct NonceResponse: Codable, Sendable {
        var nonce: String
        var expiresAt: Date
        enum CodingKeys: String, CodingKey { case nonce, expiresAt = "expires_at" }
    }

    /// A nonce for one provider sign-in (`ProviderNonces` says why). Anyone may ask: nothing is stored.
    @Sendable func nonce(_ request: Request, context: ServiceRequestContext) async throws -> NonceResponse {
        let (nonce, expiresAt) = accounts.nonces.issue()
        return NonceResponse(nonce: nonce, expiresAt: expiresAt)
    }

    struct ProviderRequest: StrictJSONBody {
        var idToken: String
        var nonce: String?
        /// Apple sends the user's name to the app only the first time; the app passes it on.
        var name: PersonName?
        /// The password of the existing account with the token's address, to link this sign-in to it
        /// where the provider does not answer for the address (`409 account_exists` said so).
        var password: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case idToken = "id_token", nonce, name, password }
    }

    /// Apple's name arrives as given and family name; a plain string is accepted too.
    struct PersonName: Decodable {
        var full: String?

        enum CodingKeys: String, CodingKey { case givenName = "given_name", familyName = "family_name", firstName, lastName }

        init(from decoder: any Decoder) throws {
            if let text = try? decoder.singleValueContainer().decode(String.self) {
                full = text
                return
            }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let given = try container.decodeIfPresent(String.self, forKey: .givenName) ?? container.decodeIfPresent(String.self, forKey: .firstName)
            let family = try container.decodeIfPresent(String.self, forKey: .familyName) ?? container.decodeIfPresent(String.self, forKey: .lastName)
            let parts = [given, family].compactMap { $0?.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            full = parts.isEmpty ? nil : parts.joined(separator: " ")
        }
    }

    func signIn(_ request: Request, context: ServiceRequestContext, with verifier: IdentityTokenVerifier?, name providerName: String) async throws -> SignInResponse {
        guard let verifier else {
            // Not a fault of the server's: this deployment does not offer the provider (no client ids
            // configured), as if the route did not exist.
            throw APIError(.notFound, code: "provider_not_configured", detail: "Sign in with \(providerName) is not set up on this server.")
        }
        let body = try await request.decode(as: ProviderRequest.self, context: context)
        // A nonce this server did not issue, or an expired one, is refused before the token is read;
        // a spent one in the transaction below, where spending it is part of the sign-in.
        let nonceExpiry: Date?
        if let nonce = body.nonce {
            do { nonceExpiry = try accounts.nonces.check(nonce) } catch { throw error.apiError }
        } else if accounts.settings.providerNonceRequired {
            throw APIError.validation([.init(field: "nonce", message: "is required: get one from POST /v1/auth/nonce and pass it to \(providerName)'s sign-in")])
        } else {
            nonceExpiry = nil
        }
        let identity: VerifiedIdentity
        do {
            identity = try await verifier.verify(body.idToken, nonce: body.nonce)
        } catch let error as IdentityTokenError {
            throw error.apiError
        }
        let suppliedName = DisplayName.sanitized(body.name?.full ?? identity.name)
        let client = context.client(request)
        let accounts = self.accounts
        let provider = identity.provider
        // A password sent to link is checked before the transaction (throttled, and bcrypt's work
        // holds no lock or connection); the transaction then links only if it is still that hash.
        let confirmedHash = try await confirmLinkPassword(body.password, email: identity.email, client: client, context: context)
        return try await accounts.postgres.transaction(logger: context.logger) { connection in
            try await accounts.nonces.spend(nonce: body.nonce, expiresAt: nonceExpiry, identity: identity, on: connection, logger: context.logger)
            // Known identity: sign in.
            if var user = try await accounts.users.user(provider: provider, subject: identity.subject, on: connection, logger: context.logger) {
                guard !user.isDisabled else { throw AuthErrors.disabled }
                if user.displayName == nil, let suppliedName {
                    try await connection.checkedRun("UPDATE users SET display_name = \(suppliedName) WHERE id = \(user.id)", logger: context.logger)
                    user.displayName = suppliedName
                }
                let (signedIn, session) = try await accounts.startSession(for: user, method: provider, client: client, on: connection)
                return SignInResponse(user: try await accounts.view(of: signedIn, on: connection), session: session, created: false)
            }
            guard let claimed = identity.email else {
                throw APIError(.badRequest, code: "email_required", detail: "The \(providerName) token carries no email address; allow sharing the email (a private relay address is fine).")
            }
            // The same rule as a typed address: a look-alike spelling finds and makes no account.
            guard let email = EmailAddress(claimed)?.mailbox else { throw AuthErrors.invalidEmail(claimed) }
            // Same email as an existing account. Linked when the person shows its password; or when the
            // provider answers for the address: then an account whose address was proven keeps all it
            // has, and one whose address never was is the mailbox owner's, cleared of what its maker
            // set. The provider's claim never makes anyone admin.
            if let existing = try await accounts.users.find(email: email, forUpdate: true, on: connection, logger: context.logger) {
                guard !existing.isDisabled else { throw AuthErrors.disabled }
                var user = existing
                if body.password != nil {
                    guard let confirmedHash, existing.passwordHash == confirmedHash else {
                        throw APIError.unauthorized("The password is wrong.", code: "invalid_credentials")
                    }
                    try await accounts.users.link(
                        provider: provider, subject: identity.subject, email: email, proven: existing.emailVerified, to: existing.id, on: connection, logger: context.logger)
                } else if identity.emailVouched {
                    if !existing.emailVerified {
                        user = try await accounts.takeOver(existing, on: connection)
                        try await accounts.users.markVerified(existing.id, byMail: false, on: connection, logger: context.logger)
                        user.emailVerified = true
                        try await accounts.outbox.write(
                            UserEmailVerified(userID: user.id, email: user.email, vouchedBy: provider), userID: user.id, live: true, on: connection, logger: context.logger)
                    }
                    try await accounts.users.link(provider: provider, subject: identity.subject, email: email, proven: true, to: existing.id, on: connection, logger: context.logger)
                } else {
                    throw APIError.conflict(
                        "An account with this email exists and \(providerName) does not vouch for the address: send the account's password with the ID token (`password`) to link them.",
                        code: "account_exists")
                }
                if user.displayName == nil, let suppliedName {
                    try await connection.checkedRun("UPDATE users SET display_name = \(suppliedName) WHERE id = \(user.id)", logger: context.logger)
                    user.displayName = suppliedName
                }
                let (signedIn, session) = try await accounts.startSession(for: user, method: provider, client: client, on: connection)
                return SignInResponse(user: try await accounts.view(of: signedIn, on: connection), session: session, created: false)
            }
            // New person: a new account with this identity, its address verified if the provider
            // answers for it, proven by mail otherwise.
            guard
                let user = try await accounts.users.insert(
                    email: email, emailVerified: identity.emailVouched, passwordHash: nil, displayName: suppliedName,
                    roles: [.user], on: connection, logger: context.logger)
            else {
                throw APIError.conflict("An account with this email was just created; try again.", code: "email_taken")
            }
            try await accounts.users.link(provider: provider, subject: identity.subject, email: email, proven: identity.emailVouched, to: user.id, on: connection, logger: context.logger)
            try await accounts.outbox.write(
                UserRegistered(userID: user.id, email: user.email, displayName: user.displayName, provider: provider),
                userID: user.id, on: connection, logger: context.logger)
            if identity.emailVouched {
                try await accounts.outbox.write(
                    UserEmailVerified(userID: user.id, email: user.email, vouchedBy: provider), userID: user.id, live: true, on: connection, logger: context.logger)
            } else {
                // The provider does not answer for the address: prove it the usual way.
                let token = try await accounts.emailTokens.issue(.verifyEmail, userID: user.id, email: user.email, on: connection, logger: context.logger)
                try await accounts.mailer.sendVerification(to: user.email, token: token, on: connection, logger: context.logger)
            }
            let (signedIn, session) = try await accounts.startSession(for: user, method: provider, client: client, on: connection)
            return SignInResponse(user: UserView(signedIn, providers: [provider]), session: session, created: true)
        }
    }
}

extension ProviderRoutes {
    /// The hash of the password of the account at `email`, when `password` matches it; nil when no
    /// password came. Counted as a sign-in attempt.
    func confirmLinkPassword(_ password: String?, email: String?, client: Accounts.Client, context: ServiceRequestContext) async throws -> String? {
        guard let password, let email else { return nil }
        let normalized = EmailAddress.normalize(email)
        try await accounts.throttle.begin(account: normalized, ip: client.ip)
        let accounts = self.accounts
        let hash = try await accounts.postgres.withConnectionOnItsLoop { connection in
            try await accounts.users.find(email: email, on: connection, logger: context.logger)?.passwordHash
        }
        guard try await accounts.hasher.verify(password, hash: hash) else {
            throw APIError.unauthorized("The password is wrong.", code: "invalid_credentials")
        }
        await accounts.throttle.succeeded(account: normalized, ip: client.ip)
        return hash
    }
}

extension ProviderRoutes.NonceResponse: ResponseEncodable {}
