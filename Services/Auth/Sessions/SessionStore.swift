import Crypto
import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// An opaque secret handed to a client (refresh token, mail link token): 256 random bits, base64url.
/// Only its SHA-256 is stored, so a database leak does not leak usable tokens.
struct OpaqueToken: Sendable {
    let value: String

    init() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        value = Base64URL.encode(Data(bytes))
    }

    var hash: Data { Self.hash(value) }

    /// `Data`, which PostgresNIO binds as `bytea`.
    static func hash(_ value: String) -> Data { Data(SHA256.hash(data: Data(value.utf8))) }
}

struct SessionRecord: Sendable {
    var id: UUID
    var userID: UUID
    var method: String
    var userAgent: String?
    var ip: String?
    var createdAt: Date
    var lastUsedAt: Date
    var expiresAt: Date
}

/// What rotating a refresh token found.
enum RefreshOutcome: Sendable {
    case rotated(session: SessionRecord, refreshToken: OpaqueToken)
    case unknown
    case expired
    /// The token had been used before: the session is ended.
    case reused(sessionID: UUID, userID: UUID)
}

/// Sessions and their refresh tokens. A session lives `idleDays` from its last use.
struct SessionStore: Sendable {
    let idleDays: Int

    static let columns = "id, user_id, method, user_agent, ip, created_at, last_used_at, expires_at"

    static func decode(_ rows: PostgresRowSequence) async throws -> [SessionRecord] {
        var sessions: [SessionRecord] = []
        for try await (id, userID, method, agent, ip, created, lastUsed, expires) in rows.decode((UUID, UUID, String, String?, String?, Date, Date, Date).self) {
            sessions.append(SessionRecord(id: id, userID: userID, method: method, userAgent: agent, ip: ip, createdAt: created, lastUsedAt: lastUsed, expiresAt: expires))
        }
        return sessions
    }

    /// Starts a session and returns it with its first refresh token.
    func create(userID: UUID, method: String, userAgent: String?, ip: String?, on connection: PostgresConnection, logger: Logger) async throws -> (SessionRecord, OpaqueToken) {
        let token = OpaqueToken()
        let agent = userAgent.map { String($0.prefix(512)) }
        let session = try await Self.decode(connection.checkedQuery("""
            INSERT INTO sessions (id, user_id, method, user_agent, ip, expires_at)
            VALUES (\(UUID()), \(userID), \(method), \(agent), \(ip), now() + \(idleDays) * interval '1 day')
            RETURNING \(unescaped: Self.columns)
            """, logger: logger)).first!
        try await connection.checkedQuery("INSERT INTO refresh_tokens (token_hash, session_id) VALUES (\(token.hash), \(session.id))", logger: logger)
        return (session, token)
    }

    /// Exchanges a refresh token for a new one. The token row is locked, so two concurrent uses of
    /// one token cannot both rotate: the second sees it used and ends the session.
    func rotate(_ presented: String, on connection: PostgresConnection, logger: Logger) async throws -> RefreshOutcome {
        let rows = try await connection.checkedQuery("""
            SELECT t.used_at, s.id, s.user_id, s.expires_at <= now()
            FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id
            WHERE t.token_hash = \(OpaqueToken.hash(presented))
            FOR UPDATE OF t, s
            """, logger: logger)
        var found: (usedAt: Date?, sessionID: UUID, userID: UUID, expired: Bool)?
        for try await row in rows.decode((Date?, UUID, UUID, Bool).self) { found = row }
        guard let found else { return .unknown }
        if found.usedAt != nil {
            try await end(found.sessionID, on: connection, logger: logger)
            return .reused(sessionID: found.sessionID, userID: found.userID)
        }
        if found.expired {
            try await end(found.sessionID, on: connection, logger: logger)
            return .expired
        }
        try await connection.checkedQuery("UPDATE refresh_tokens SET used_at = now() WHERE token_hash = \(OpaqueToken.hash(presented))", logger: logger)
        let token = OpaqueToken()
        try await connection.checkedQuery("INSERT INTO refresh_tokens (token_hash, session_id) VALUES (\(token.hash), \(found.sessionID))", logger: logger)
        let session = try await Self.decode(connection.checkedQuery("""
            UPDATE sessions SET last_used_at = now(), expires_at = now() + \(idleDays) * interval '1 day'
            WHERE id = \(found.sessionID) RETURNING \(unescaped: Self.columns)
            """, logger: logger)).first!
        return .rotated(session: session, refreshToken: token)
    }

    /// Live sessions of a user, most recently used first.
    func list(userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [SessionRecord] {
        try await Self.decode(connection.checkedQuery("""
            SELECT \(unescaped: Self.columns) FROM sessions WHERE user_id = \(userID) AND expires_at > now()
            ORDER BY last_used_at DESC, id
            """, logger: logger))
    }

    /// Whether the session still exists: an access token outlives a logout by at most its 15 minutes,
    /// but auth's own routes refuse it at once.
    func isLive(_ sessionID: UUID, userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let rows = try await connection.checkedQuery("SELECT 1 FROM sessions WHERE id = \(sessionID) AND user_id = \(userID) AND expires_at > now()", logger: logger)
        for try await _ in rows { return true }
        return false
    }

    /// Ends one session of `userID`; false when the user has no such session (another user's id included).
    @discardableResult
    func end(_ sessionID: UUID, of userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let rows = try await connection.checkedQuery("DELETE FROM sessions WHERE id = \(sessionID) AND user_id = \(userID) RETURNING id", logger: logger)
        for try await _ in rows { return true }
        return false
    }

    private func end(_ sessionID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedQuery("DELETE FROM sessions WHERE id = \(sessionID)", logger: logger)
    }

    /// Ends every session of a user (optionally but one); returns how many.
    @discardableResult
    func endAll(of userID: UUID, except keep: UUID? = nil, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let rows = try await connection.checkedQuery("""
            DELETE FROM sessions WHERE user_id = \(userID) AND (\(keep == nil) OR id <> \(keep ?? UUID())) RETURNING id
            """, logger: logger)
        var count = 0
        for try await _ in rows { count += 1 }
        return count
    }
}
