import Foundation
import Hummingbird
import PostgresNIO
import ServiceKit

/// Sessions and tokens: refresh rotation, logout, the session list, `me`, and the public keys.
struct SessionRoutes {
    let accounts: Accounts

    func add(to router: Router<ServiceRequestContext>) {
        router.get(".well-known/jwks.json", use: jwks)
        router.post("v1/auth/token/refresh", use: refresh)
        let signedIn = router.group("v1/auth", context: AuthenticatedContext.self)
        signedIn.get("me", use: me)
        signedIn.post("logout", use: logout)
        signedIn.get("sessions", use: listSessions)
        signedIn.delete("sessions/:id", use: endSession)
    }

    @Sendable func jwks(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        Response(
            status: .ok,
            headers: [.contentType: "application/json", .cacheControl: "public, max-age=300"],
            body: .init(byteBuffer: ByteBuffer(bytes: try accounts.settings.signing.jwksJSON))
        )
    }

    struct RefreshRequest: StrictJSONBody {
        var refreshToken: String
        enum CodingKeys: String, CodingKey, CaseIterable { case refreshToken = "refresh_token" }
    }

    /// Rotates: the presented token is spent and a new one returned with a fresh access token
    /// carrying the account's current roles. A spent token presented again ends the session.
    @Sendable func refresh(_ request: Request, context: ServiceRequestContext) async throws -> SessionTokens {
        let body = try await request.decode(as: RefreshRequest.self, context: context)
        let accounts = self.accounts
        enum Result { case tokens(SessionTokens), refused(APIError) }
        // The transaction commits a session ended for reuse before the refusal is returned.
        let result = try await accounts.postgres.transaction(logger: context.logger) { connection -> Result in
            switch try await accounts.sessions.rotate(body.refreshToken, on: connection, logger: context.logger) {
            case .unknown:
                return .refused(.unauthorized("The refresh token is not valid; sign in again.", code: "invalid_refresh_token"))
            case .expired:
                return .refused(.unauthorized("The session has expired; sign in again.", code: "session_expired"))
            case .reused(let sessionID, let userID):
                context.logger.warning("refresh token reused: session ended", metadata: ["session_id": "\(sessionID)", "user_id": "\(userID)"])
                return .refused(.unauthorized("This refresh token was already used, so the session has been ended; sign in again.", code: "refresh_token_reused"))
            case .rotated(let session, let refreshToken):
                guard var user = try await accounts.users.find(id: session.userID, on: connection, logger: context.logger), !user.isDisabled else {
                    try await accounts.sessions.end(session.id, of: session.userID, on: connection, logger: context.logger)
                    return .refused(AuthErrors.disabled)
                }
                user = try await accounts.grantConfiguredAdmin(user, on: connection)
                let access = try await accounts.signer.sign(userID: user.id, sessionID: session.id, roles: user.roles, emailVerified: user.emailVerified)
                return .tokens(SessionTokens(accessToken: access, refreshToken: refreshToken.value, expiresIn: accounts.signer.ttlSeconds, sessionID: session.id))
            }
        }
        switch result {
        case .tokens(let tokens): return tokens
        case .refused(let error): throw error
        }
    }

    /// One prepared statement (parsed and planned once per connection, as this is the hottest read):
    /// the account, its providers, and whether this session is still live.
    struct MeQuery: PostgresPreparedStatement {
        // PostgresNIO's default name is `String(reflecting: Self.self)`, worked out on every execution.
        static let name = "auth.me"
        static let sql = """
            SELECT u.id, u.email, u.email_verified, u.password_hash, u.display_name, u.roles, u.disabled_at, u.created_at, u.last_sign_in_at, u.email_proven_by_mail,
                   ARRAY(SELECT provider FROM identities WHERE user_id = u.id ORDER BY provider),
                   ($3 OR EXISTS (SELECT 1 FROM sessions WHERE id = $2 AND user_id = u.id AND expires_at > now()))
            FROM users u WHERE u.id = $1
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid, .bool]
        typealias Row = (user: UserRecord, providers: [String], live: Bool)

        var userID: UUID
        var sessionID: UUID?

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(userID)
            bindings.append(sessionID ?? UUID())
            bindings.append(sessionID == nil)
            return bindings
        }

        /// Column by column rather than with `row.decode((…).self)`, whose variadic generics decoded
        /// each column unspecialized.
        func decodeRow(_ row: PostgresRow) throws -> Row {
            let cells = row.makeRandomAccess()
            let (id, email, verified, hash, name, roles, disabledAt, createdAt, lastSignIn, provenByMail, providers, live) = (
                try cells[0].decode(UUID.self), try cells[1].decode(String.self), try cells[2].decode(Bool.self), try cells[3].decode(String?.self),
                try cells[4].decode(String?.self), try cells[5].decode([String].self), try cells[6].decode(Date?.self), try cells[7].decode(Date.self),
                try cells[8].decode(Date?.self), try cells[9].decode(Bool.self), try cells[10].decode([String].self), try cells[11].decode(Bool.self)
            )
            return (UserRecord((id, email, verified, hash, name, roles, disabledAt, createdAt, lastSignIn, provenByMail)), providers, live)
        }
    }

    @Sendable func me(_ request: Request, context: AuthenticatedContext) async throws -> UserView {
        let caller = context.caller
        let found = try await accounts.postgres.withConnectionOnItsLoop { connection -> MeQuery.Row? in
            for try await row in try await connection.checkedExecute(MeQuery(userID: caller.userID, sessionID: caller.sessionID), logger: context.logger) {
                return row
            }
            return nil
        }
        guard let found, found.live else { throw AuthErrors.sessionRevoked }
        guard !found.user.isDisabled else { throw AuthErrors.disabled }
        return UserView(found.user, providers: found.providers)
    }

    struct LogoutRequest: StrictJSONBody {
        var scope: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case scope }
    }

    /// Ends this session, or with `{"scope": "all"}` every session of the account.
    @Sendable func logout(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let scope = try await request.decodeIfPresent(as: LogoutRequest.self, context: context)?.scope ?? "current"
        guard scope == "current" || scope == "all" else {
            throw APIError.validation([.init(field: "scope", message: "must be \"current\" or \"all\"")])
        }
        let caller = context.caller
        let accounts = self.accounts
        // A token whose session already ended cannot end the sessions made since.
        _ = try await accounts.liveUser(context)
        // A transaction: the sessions end together with their announcement (`SessionStore`).
        try await accounts.postgres.transaction(logger: context.logger) { connection in
            if scope == "all" {
                try await accounts.sessions.endAll(of: caller.userID, on: connection, logger: context.logger)
            } else if let sessionID = caller.sessionID {
                try await accounts.sessions.end(sessionID, of: caller.userID, on: connection, logger: context.logger)
            }
        }
        return .noContent
    }

    struct SessionView: Codable, ResponseEncodable {
        var id: UUID
        var method: String
        var userAgent: String?
        var ip: String?
        var createdAt: Date
        var lastUsedAt: Date
        var expiresAt: Date
        var current: Bool

        enum CodingKeys: String, CodingKey {
            case id, method, userAgent = "user_agent", ip, createdAt = "created_at", lastUsedAt = "last_used_at", expiresAt = "expires_at", current
        }
    }

    @Sendable func listSessions(_ request: Request, context: AuthenticatedContext) async throws -> Page<SessionView> {
        let accounts = self.accounts
        let caller = context.caller
        let sessions = try await accounts.postgres.withConnectionOnItsLoop { connection in
            try await accounts.sessions.list(userID: caller.userID, on: connection, logger: context.logger)
        }
        if let current = caller.sessionID, !sessions.contains(where: { $0.id == current }) { throw AuthErrors.sessionRevoked }
        return Page(
            items: sessions.map {
                SessionView(
                    id: $0.id, method: $0.method, userAgent: $0.userAgent, ip: $0.ip, createdAt: $0.createdAt,
                    lastUsedAt: $0.lastUsedAt, expiresAt: $0.expiresAt, current: $0.id == caller.sessionID)
            }, nextCursor: nil)
    }

    /// Ends one of the caller's sessions; another user's session id is 404, as if it did not exist.
    @Sendable func endSession(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        guard let id = context.parameters.get("id").flatMap(UUID.init(parsing:)) else { throw APIError.notFound("No such session.") }
        let accounts = self.accounts
        _ = try await accounts.liveUser(context)
        let caller = context.caller
        let ended = try await accounts.postgres.transaction(logger: context.logger) { connection in
            try await accounts.sessions.end(id, of: caller.userID, on: connection, logger: context.logger)
        }
        guard ended else { throw APIError.notFound("No such session.") }
        return .noContent
    }
}
