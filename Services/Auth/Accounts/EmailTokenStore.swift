import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Single-use tokens sent by mail: email verification (24 h) and password reset (1 h).
struct EmailTokenStore: Sendable {
    enum Purpose: String, Sendable {
        case verifyEmail = "verify_email"
        case resetPassword = "reset_password"

        var lifetimeSeconds: Int {
            switch self {
            case .verifyEmail: 24 * 3600
            case .resetPassword: 3600
            }
        }
    }

    enum Consumed: Sendable {
        case valid(userID: UUID, email: String)
        case unknown
        case expired
        case used
    }

    func issue(_ purpose: Purpose, userID: UUID, email: String, on connection: PostgresConnection, logger: Logger) async throws -> OpaqueToken {
        let token = OpaqueToken()
        try await connection.checkedRun(
            """
            INSERT INTO email_tokens (token_hash, user_id, purpose, email, expires_at)
            VALUES (\(token.hash), \(userID), \(purpose.rawValue), \(email), now() + \(purpose.lifetimeSeconds) * interval '1 second')
            """, logger: logger)
        return token
    }

    /// Marks the token used and returns whose it was; a token is good once, for its purpose only.
    /// What `value` is now, without using it: a route checks the link before it spends work (a
    /// password hash) on it, then `consume`s it in its transaction.
    func check(_ value: String, purpose: Purpose, on connection: PostgresConnection, logger: Logger) async throws -> Consumed {
        try await state(value, purpose: purpose, lock: false, on: connection, logger: logger)
    }

    func consume(_ value: String, purpose: Purpose, on connection: PostgresConnection, logger: Logger) async throws -> Consumed {
        let state = try await state(value, purpose: purpose, lock: true, on: connection, logger: logger)
        if case .valid = state {
            try await connection.checkedRun("UPDATE email_tokens SET used_at = now() WHERE token_hash = \(OpaqueToken.hash(value))", logger: logger)
        }
        return state
    }

    private func state(_ value: String, purpose: Purpose, lock: Bool, on connection: PostgresConnection, logger: Logger) async throws -> Consumed {
        let rows = try await connection.checkedQuery(
            """
            SELECT user_id, email, used_at IS NOT NULL, expires_at <= now() FROM email_tokens
            WHERE token_hash = \(OpaqueToken.hash(value)) AND purpose = \(purpose.rawValue)
            \(unescaped: lock ? "FOR UPDATE" : "")
            """, logger: logger)
        var found: (UUID, String, Bool, Bool)?
        for try await row in rows.decode((UUID, String, Bool, Bool).self) { found = row }
        guard let (userID, email, used, expired) = found else { return .unknown }
        if used { return .used }
        if expired { return .expired }
        return .valid(userID: userID, email: email)
    }

    /// Other outstanding tokens of the same purpose stop working once one is used (or the password changes).
    func invalidate(_ purpose: Purpose, userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            UPDATE email_tokens SET used_at = now() WHERE user_id = \(userID) AND purpose = \(purpose.rawValue) AND used_at IS NULL
            """, logger: logger)
    }
}
