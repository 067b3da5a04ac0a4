import Foundation
import Logging
import PostgresNIO
import ServiceKit

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
/// Every way a session is ended before its time goes through `end` or `endAll`, which announce it
/// live (`user.sessions_ended`) in the same transaction: the gateway closes the event streams opened
/// with the ended sessions' tokens, which still verify until they expire. (Sessions the janitor
/// removes had no live token left; a deleted account's go with it, and `user.deleted` says so.)
struct SessionStore: Sendable {
    let idleDays: Int
    /// `REFRESH_REUSE_GRACE_SECONDS` (`reissue`).
    let reuseGrace: Duration
    let outbox: EventOutbox

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
        let session = try await Self.decode(
            connection.checkedQuery(
                """
                INSERT INTO sessions (id, user_id, method, user_agent, ip, expires_at)
                VALUES (\(UUID()), \(userID), \(method), \(agent), \(ip), now() + \(idleDays) * interval '1 day')
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
        ).first!
        try await connection.checkedRun("INSERT INTO refresh_tokens (token_hash, session_id) VALUES (\(token.hash), \(session.id))", logger: logger)
        return (session, token)
    }

    /// Exchanges a refresh token for a new one. The session row, then the token row, is locked, so
    /// two concurrent uses of one token cannot both rotate: the second sees it used. A spent token
    /// ends the session, unless `reissue` takes it (within the grace, what it was exchanged for
    /// unused).
    func rotate(_ presented: String, on connection: PostgresConnection, logger: Logger) async throws -> RefreshOutcome {
        let presentedHash = OpaqueToken.hash(presented)
        var found: FindRefreshToken.Row?
        for try await row in try await connection.checkedExecute(FindRefreshToken(hash: presentedHash), logger: logger) { found = row }
        guard let found else { return .unknown }
        if found.usedAt != nil {
            if !found.expired, let reissued = try await reissue(presentedHash, session: found.sessionID, on: connection, logger: logger) {
                logger.info("refresh token presented again within the grace: what it was exchanged for is replaced", metadata: ["session_id": "\(found.sessionID)"])
                return reissued
            }
            try await end(found.sessionID, of: found.userID, on: connection, logger: logger)
            return .reused(sessionID: found.sessionID, userID: found.userID)
        }
        if found.expired {
            try await end(found.sessionID, of: found.userID, on: connection, logger: logger)
            return .expired
        }
        let token = OpaqueToken()
        for try await session in try await connection.checkedExecute(RotateRefreshToken(spent: presentedHash, issued: token.hash, sessionID: found.sessionID, idleDays: idleDays), logger: logger) {
            return .rotated(session: session, refreshToken: token)
        }
        // Cannot happen while the lookup's lock holds the session; a session gone is a dead token.
        return .unknown
    }

    /// A spent token presented again within `reuseGrace` of its exchange, while the token it was
    /// exchanged for is unused: the client never got that answer (it was lost on the way), so the
    /// unused token is spent in its place and a new one issued. The tokens issued for one exchange
    /// count as that exchange's (each made at the instant the presented one was spent, each spent
    /// at it when replaced), so whichever of them the client holds may come back within the grace,
    /// and the last issued is the one that lives. Past the grace, or once the session's live token
    /// has been used, a spent token is what a thief holds: nil, and the session ends. A thief who
    /// presents a stolen token within the grace is given tokens, and the owner's are spent: the
    /// owner's next refresh, after the grace, ends the session (and the thief's tokens with it).
    private func reissue(_ presentedHash: Data, session: UUID, on connection: PostgresConnection, logger: Logger) async throws -> RefreshOutcome? {
        guard reuseGrace > .zero else { return nil }
        let token = OpaqueToken()
        let rows = try await connection.checkedQuery(
            """
            WITH presented AS (
                SELECT used_at FROM refresh_tokens WHERE token_hash = \(presentedHash) AND used_at > now() - \(reuseGrace.components.seconds) * interval '1 second'),
            replaced AS (
                UPDATE refresh_tokens t SET used_at = p.used_at FROM presented p
                WHERE t.session_id = \(session) AND t.used_at IS NULL AND t.created_at = p.used_at
                RETURNING p.used_at),
            issued AS (
                INSERT INTO refresh_tokens (token_hash, session_id, created_at) SELECT \(token.hash), \(session), used_at FROM replaced)
            UPDATE sessions SET last_used_at = now(), expires_at = now() + \(idleDays) * interval '1 day'
            WHERE id = \(session) AND EXISTS (SELECT 1 FROM replaced)
            RETURNING \(unescaped: Self.columns)
            """, logger: logger)
        guard let record = try await Self.decode(rows).first else { return nil }
        return .rotated(session: record, refreshToken: token)
    }

    // A refresh is one of a client's most frequent calls (every access token's life), so its two
    // statements are prepared: PostgreSQL parsed and planned the five unnamed ones they replace on
    // every call.

    /// `rotate`'s lookup: the presented token and its session, both locked, the session first.
    /// Ending a session (a reused token, a logout) locks the session and then, by the cascade, its
    /// tokens; a lookup that locked a token before its session could deadlock with it (a thief's
    /// spent token and the owner's current one sent at once). The token's row is read again once
    /// locked, so a rotation that committed while this one waited shows as `used_at`.
    struct FindRefreshToken: PostgresPreparedStatement {
        static let name = "auth.find_refresh_token"
        static let sql = """
            WITH session AS (
                SELECT id, user_id, expires_at <= now() AS expired FROM sessions
                WHERE id = (SELECT session_id FROM refresh_tokens WHERE token_hash = $1)
                FOR UPDATE
            )
            SELECT t.used_at, s.id, s.user_id, s.expired
            FROM session s JOIN refresh_tokens t ON t.session_id = s.id
            WHERE t.token_hash = $1
            FOR UPDATE OF t
            """
        static let bindingDataTypes: [PostgresDataType] = [.bytea]
        typealias Row = (usedAt: Date?, sessionID: UUID, userID: UUID, expired: Bool)

        let hash: Data

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            try bindings.append(hash)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let cells = row.makeRandomAccess()
            return (try cells[0].decode(Date?.self), try cells[1].decode(UUID.self), try cells[2].decode(UUID.self), try cells[3].decode(Bool.self))
        }
    }

    /// `rotate`'s change, in one round trip: the presented token spent, the next one stored, and the
    /// session's life extended (its row is returned).
    struct RotateRefreshToken: PostgresPreparedStatement {
        static let name = "auth.rotate_refresh_token"
        static let sql = """
            WITH spent AS (UPDATE refresh_tokens SET used_at = now() WHERE token_hash = $1),
                 issued AS (INSERT INTO refresh_tokens (token_hash, session_id) VALUES ($2, $3))
            UPDATE sessions SET last_used_at = now(), expires_at = now() + $4 * interval '1 day'
            WHERE id = $3 RETURNING \(SessionStore.columns)
            """
        static let bindingDataTypes: [PostgresDataType] = [.bytea, .bytea, .uuid, .int8]
        typealias Row = SessionRecord

        let spent: Data
        let issued: Data
        let sessionID: UUID
        let idleDays: Int

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 4)
            try bindings.append(spent)
            try bindings.append(issued)
            bindings.append(sessionID)
            bindings.append(Int64(idleDays))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> SessionRecord {
            let cells = row.makeRandomAccess()
            return SessionRecord(
                id: try cells[0].decode(UUID.self), userID: try cells[1].decode(UUID.self), method: try cells[2].decode(String.self),
                userAgent: try cells[3].decode(String?.self), ip: try cells[4].decode(String?.self), createdAt: try cells[5].decode(Date.self),
                lastUsedAt: try cells[6].decode(Date.self), expiresAt: try cells[7].decode(Date.self))
        }
    }

    /// Live sessions of a user, most recently used first.
    func list(userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [SessionRecord] {
        try await Self.decode(
            connection.checkedQuery(
                """
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
        var ended = false
        for try await _ in rows { ended = true }
        if ended { try await announce([sessionID], of: userID, all: false, on: connection, logger: logger) }
        return ended
    }

    /// Ends every session of a user (optionally but one); returns how many.
    @discardableResult
    func endAll(of userID: UUID, except keep: UUID? = nil, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let rows = try await connection.checkedQuery(
            """
            DELETE FROM sessions WHERE user_id = \(userID) AND (\(keep == nil) OR id <> \(keep ?? UUID())) RETURNING id
            """, logger: logger)
        var ended: [UUID] = []
        for try await id in rows.decode(UUID.self) { ended.append(id) }
        if !ended.isEmpty { try await announce(ended, of: userID, all: keep == nil, on: connection, logger: logger) }
        return ended.count
    }

    /// `user.sessions_ended`, live for the user: not news for their apps, which learn it at their
    /// next call, but for the gateway, which ends the streams the sessions opened.
    private func announce(_ sessionIDs: [UUID], of userID: UUID, all: Bool, on connection: PostgresConnection, logger: Logger) async throws {
        try await outbox.write(SessionsEnded(userID: userID, sessionIDs: sessionIDs, all: all), userID: userID, live: true, on: connection, logger: logger)
    }
}
