import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// What the mailed links do, for the API (`POST /v1/auth/email/verify`, `POST /v1/auth/password/reset`)
/// and for the pages the links open (`PageRoutes`) alike: one set of rules, one set of problems.
extension Accounts {
    /// How whoever follows the verification link shows they are also the one who set the account up.
    enum VerifyProof {
        /// The app opened the link and sent the account's access token.
        case session(UUID)
        /// The page asked for the account's password.
        case password
        /// They did not set it up: the account keeps the address and loses what its maker set.
        case disown
    }

    /// A verification's outcome: after disowning, a single-use token to set the first password.
    struct Verified: Sendable {
        var passwordToken: String?
        var passwordTokenExpiresAt: Date?
    }

    /// What a mailed token is now, without using it: a page shows it before it asks for anything, and
    /// a route checks it before it spends work (a password hash) on it.
    func mailToken(_ token: String, purpose: EmailTokenStore.Purpose, logger: Logger) async throws -> EmailTokenStore.Consumed {
        try await postgres.withConnectionOnItsLoop { connection in
            try await emailTokens.check(token, purpose: purpose, on: connection, logger: logger)
        }
    }

    /// Whoever proves the mailbox owns the account, and a proof alone does not vouch for what someone
    /// else set before it: the mailed token verifies only together with the account's live session
    /// (`caller`) or its `password` (everything is kept), or with `disown` (sessions end; the password,
    /// the provider sign-ins and the chosen name go; a password-setting token comes back). Anyone may
    /// sign up with an address they do not hold, keep the session, and wait for its owner to click.
    /// A wrong password counts as a failed sign-in (`reauthThrottle`), from the page as from the app.
    func verifyEmail(token: String, password: String?, disown: Bool, caller: Caller?, clientAddress: String, logger: Logger) async throws -> Verified {
        let checked = try await mailToken(token, purpose: .verifyEmail, logger: logger)
        guard case .valid(let userID, _) = checked else { throw AuthErrors.mailToken(checked) }
        let proof: VerifyProof
        if disown {
            guard password == nil else {
                throw APIError.validation([.init(field: "password", message: "is not sent when disowning the account: its password is what goes")])
            }
            proof = .disown
        } else if let caller, caller.userID == userID, let sessionID = caller.sessionID {
            proof = .session(sessionID)
        } else if let password {
            try await reauthThrottle.begin(account: userID.uuidString, ip: clientAddress)
            let hash = try await postgres.withConnectionOnItsLoop { connection in
                try await users.find(id: userID, on: connection, logger: logger)?.passwordHash
            }
            guard try await hasher.verify(password, hash: hash) else {
                throw APIError.unauthorized("The password is wrong.", code: "invalid_credentials")
            }
            await reauthThrottle.succeeded(account: userID.uuidString, ip: clientAddress)
            proof = .password
        } else {
            throw AuthErrors.proofRequired
        }
        return try await postgres.transaction(logger: logger) { connection in
            let consumed = try await emailTokens.consume(token, purpose: .verifyEmail, on: connection, logger: logger)
            guard case .valid(userID, let email) = consumed else { throw AuthErrors.mailToken(consumed) }
            guard let user = try await users.find(id: userID, forUpdate: true, on: connection, logger: logger),
                EmailAddress.normalize(user.email).utf8.elementsEqual(EmailAddress.normalize(email).utf8)
            else {
                throw AuthErrors.mailToken(.unknown)
            }
            if case .session(let sessionID) = proof {
                guard try await sessions.isLive(sessionID, userID: userID, on: connection, logger: logger) else { throw AuthErrors.proofRequired }
            }
            // Disowning is for an address nobody has proven: a link that outlived the proof (issued
            // beside it) must not take a proven account over.
            if case .disown = proof, user.emailVerified { throw AuthErrors.mailToken(.used) }
            try await emailTokens.invalidate(.verifyEmail, userID: userID, on: connection, logger: logger)
            var result = Verified()
            var verified = user
            if case .disown = proof {
                verified = try await takeOver(user, on: connection)
                let passwordToken = try await emailTokens.issue(.resetPassword, userID: userID, email: user.email, on: connection, logger: logger)
                result.passwordToken = passwordToken.value
                result.passwordTokenExpiresAt = Date().addingTimeInterval(TimeInterval(EmailTokenStore.Purpose.resetPassword.lifetimeSeconds))
            }
            try await users.markVerified(userID, byMail: true, on: connection, logger: logger)
            if !user.emailVerified {
                try await outbox.write(UserEmailVerified(userID: userID, email: user.email), userID: userID, live: true, on: connection, logger: logger)
            }
            verified.emailVerified = true
            verified.emailProvenByMail = true
            _ = try await grantConfiguredAdmin(verified, on: connection)
            return result
        }
    }

    /// Sets the password from a reset mail's token, proves the address (the link came to it), and ends
    /// every session. The first proof of an address takes from the account what its maker set, as
    /// disowning does (`takeOver`), but for the password the reset sets.
    func resetPassword(token: String, password: String, logger: Logger) async throws {
        if let violation = policy.violation(password) { throw AuthErrors.weakPassword(violation) }
        // The link first: a made-up token must not cost the server a password hash (bcrypt's
        // threads are the sign-ins' too). It is consumed, and checked again, in the transaction.
        let checked = try await mailToken(token, purpose: .resetPassword, logger: logger)
        guard case .valid = checked else { throw AuthErrors.mailToken(checked) }
        let hash = try await hasher.hash(password)
        try await postgres.transaction(logger: logger) { connection in
            let consumed = try await emailTokens.consume(token, purpose: .resetPassword, on: connection, logger: logger)
            guard case .valid(let userID, _) = consumed else { throw AuthErrors.mailToken(consumed) }
            guard let user = try await users.find(id: userID, forUpdate: true, on: connection, logger: logger) else { throw AuthErrors.mailToken(.unknown) }
            if let violation = policy.violation(password, email: user.email) { throw AuthErrors.weakPassword(violation) }
            try await users.setPassword(hash: hash, of: userID, on: connection, logger: logger)
            try await emailTokens.invalidate(.resetPassword, userID: userID, on: connection, logger: logger)
            try await sessions.endAll(of: userID, on: connection, logger: logger)
            // Whoever signed in with Apple or Google under this address before anyone had proven it
            // (the provider had not verified it) may not be its owner, who has just proven it: those
            // sign-ins go, so an account claimed in someone else's name is not theirs to keep. Even
            // if the address was verified by mail since: the owner may have followed that link.
            // Those linked with the password go too: whoever knew the password the reset replaces
            // could have linked their own.
            try await users.unlinkOnReset(userID, on: connection, logger: logger)
            // Nobody had proven the address: whoever set the account up may not be the one who just
            // did. As on disowning, the name and the roles they took go, and every service drops what
            // the account made (`maker_dropped`) before it hears that the address is proven, so what
            // comes to the address from then on stays.
            let firstProof = !user.emailVerified
            if firstProof {
                try await users.forgetDisplayName(of: userID, on: connection, logger: logger)
            }
            try await outbox.write(UserPasswordChanged(userID: userID, method: .reset, makerDropped: firstProof), userID: userID, on: connection, logger: logger)
            if firstProof {
                _ = try await changeRoles(of: user, removing: user.roles.filter { $0 != .user }, on: connection)
            }
            // The reset proved the address and left only credentials its owner set (or linked once the
            // address was proven): good enough for ADMIN_EMAILS.
            try await users.markVerified(userID, byMail: true, on: connection, logger: logger)
            try await emailTokens.invalidate(.verifyEmail, userID: userID, on: connection, logger: logger)
            if !user.emailVerified {
                try await outbox.write(UserEmailVerified(userID: userID, email: user.email), userID: userID, live: true, on: connection, logger: logger)
            }
        }
    }
}
