import Foundation
import HTTPTypes
import Hummingbird
import Logging
import ServiceKit

/// The live event stream: `GET /v1/events` opens a server-sent events stream of what the services
/// publish for the signed-in user (`LiveStream`), `POST /v1/events/ticket` gives a ticket for
/// clients that cannot send the token in a header. docs/API.md, "Live events", is the client's view.
///
/// A stream is registered with the hub before anything is read, so a message published while the
/// backlog is read waits in the registration; the stream then sends the backlog, and after it only
/// what is newer than what it sent (`LiveEventStream.swift`): nothing twice, nothing missed.
struct LiveEvents: Sendable {
    let hub: LiveHub
    let redis: RedisClient
    let tokens: TokenVerifier
    let tickets: LiveTickets
    let slots: StreamSlots
    let config: LiveEventsConfig
    let logger: Logger

    init(hub: LiveHub, redis: RedisClient, tokens: TokenVerifier, config: LiveEventsConfig, logger: Logger) {
        self.hub = hub
        self.redis = redis
        self.tokens = tokens
        self.tickets = LiveTickets(redis: redis, lifetime: config.ticketLifetime)
        self.slots = StreamSlots(redis: redis, maxPerUser: config.maxPerUser, heartbeat: config.heartbeat)
        self.config = config
        self.logger = logger
    }

    static let lastEventID = HTTPField.Name("Last-Event-ID")!

    /// What a stream begins with.
    enum Start: Sendable {
        /// The entries the client missed (none for a new client), then live ones after `from`.
        case replay([LiveStream.Entry], from: StreamID)
        /// The client's missed events are gone, or its id is not one: `event: reset`, then
        /// live entries after `at`.
        case reset(at: StreamID)
    }

    /// Opens a stream for the caller (token or ticket), after the limits and a look at the user's
    /// live stream: a session that ended there, or an account deleted, is refused.
    func open(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let holder = try await holder(of: request)
        let asked = request.headers[Self.lastEventID] ?? request.uri.queryParameters["last_event_id"].map { String($0) }
        guard hub.reserve(limit: config.maxConnections) else {
            throw APIError(
                .serviceUnavailable, code: "too_many_connections", detail: "This server holds as many event streams as it can; try again shortly.",
                headers: [.retryAfter: "5"])
        }
        let registration = hub.register(user: holder.userID, session: holder.sessionID)
        var slot: String?
        do {
            // The session is checked before a slot is taken: taking one may end the account's
            // oldest stream, which a token of an ended session must not do.
            let backlog = try await LiveStream.read(for: holder.userID, after: asked.flatMap { StreamID($0) }, matching: LiveEventNames.ending, redis: redis)
            let ended = backlog.matching.contains { LiveEnding(type: $0.type, envelope: $0.envelope, of: holder.userID)?.ends(session: holder.sessionID) == true }
            guard !ended else { throw APIError.unauthorized("This session has ended; sign in again.", code: "session_revoked") }
            let claimed = try await slots.claim(user: holder.userID, stream: UUID().uuidString.lowercased())
            slot = claimed
            hub.makeRoom(for: registration, limit: config.maxPerUser)
            let lease = LiveLease(hub: hub, registration: registration, slots: slots, slot: claimed)
            let start = Self.start(asked: asked, backlog: backlog)
            context.logger.debug("event stream opened", metadata: ["user_id": "\(holder.userID)", "resumed": "\(asked != nil)"])
            return Response(
                status: .ok,
                headers: [
                    .contentType: "text/event-stream", .cacheControl: "no-cache, no-transform",
                    // nginx and kin would otherwise hold the events back to fill a buffer.
                    HTTPField.Name("X-Accel-Buffering")!: "no",
                ],
                body: ResponseBody { [self] writer in
                    try await stream(start, for: holder, lease: lease, writer: &writer)
                })
        } catch {
            hub.unregister(registration)
            hub.unreserve()
            if let slot { await slots.release(user: holder.userID, stream: slot) }
            if let problem = error as? APIError { throw problem }
            context.logger.warning("event stream not opened", metadata: ["error": "\(error)"])
            throw Self.unavailable
        }
    }

    /// Where a client starts: from its `Last-Event-ID`, or from now.
    static func start(asked: String?, backlog: LiveStream.Backlog) -> Start {
        guard let asked else { return .replay([], from: backlog.end) }
        guard let after = StreamID(asked) else { return .reset(at: backlog.end) }
        switch backlog.resumption(after: after) {
        case .replay(let entries): return .replay(entries, from: after)
        case .reset: return .reset(at: backlog.end)
        }
    }

    /// The caller, from `Authorization: Bearer` or a `ticket`, with the expiry of their token: a
    /// stream never outlives it, so one already at its end (in the verifier's leeway) is refused.
    func holder(of request: Request) async throws -> LiveTickets.Grant {
        let grant: LiveTickets.Grant
        if let authorization = request.headers[.authorization] {
            grant = try await bearerGrant(authorization)
        } else if let ticket = request.uri.queryParameters["ticket"] {
            let redeemed: LiveTickets.Grant?
            do {
                redeemed = try await tickets.redeem(String(ticket))
            } catch {
                logger.warning("ticket not checked", metadata: ["error": "\(error)"])
                throw Self.unavailable
            }
            guard let redeemed else {
                throw APIError.unauthorized("The ticket is unknown, used or expired; ask for a new one.", code: "invalid_ticket")
            }
            grant = redeemed
        } else {
            throw APIError.unauthorized(
                "Sign in first: send `Authorization: Bearer <access token>`, or a `ticket` from POST /v1/events/ticket.", code: "unauthorized")
        }
        guard grant.expiresAt > Date() else { throw TokenError.expired.apiError }
        return grant
    }

    /// The grant of a bearer access token.
    func bearerGrant(_ authorization: String) async throws -> LiveTickets.Grant {
        guard let token = TokenMiddleware<ServiceRequestContext>.bearerToken(authorization) else {
            throw APIError.unauthorized("Use `Authorization: Bearer <access token>`.", code: "invalid_token")
        }
        do {
            let (caller, expiresAt) = try await tokens.verifyExpiring(token)
            return LiveTickets.Grant(userID: caller.userID, sessionID: caller.sessionID, expiresAt: expiresAt)
        } catch {
            throw error.apiError
        }
    }

    static let unavailable = APIError(
        .serviceUnavailable, code: "live_events_unavailable", detail: "Live events cannot be served right now; try again shortly.",
        headers: [.retryAfter: "5"])
}
