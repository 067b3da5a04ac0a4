import Foundation
import Hummingbird
import ServiceKit

/// `GET /v1/events` and `POST /v1/events/ticket`, served by the gateway itself: no service has the
/// prefix in `RouteTable`, so these requests reach the gateway's router.
struct LiveEventRoutes {
    let events: LiveEvents

    func add(to router: Router<ServiceRequestContext>) {
        router.get("v1/events") { request, context in try await events.open(request, context: context) }
        router.post("v1/events/ticket") { request, context in try await ticket(request, context: context) }
    }

    struct TicketResponse: Codable, ResponseEncodable {
        var ticket: String
        var expiresAt: Date

        enum CodingKeys: String, CodingKey {
            case ticket, expiresAt = "expires_at"
        }
    }

    /// Tickets one account may be given a minute: an app reconnecting after every drop needs a few.
    static let ticketLimit = RateLimit(max: 30, per: .seconds(60), whenUnavailable: .allow)

    /// A ticket for the bearer of the access token (a ticket cannot ask for another).
    @Sendable func ticket(_ request: Request, context: ServiceRequestContext) async throws -> TicketResponse {
        guard let authorization = request.headers[.authorization] else {
            throw APIError.unauthorized("Sign in first: this route needs a bearer access token.", code: "unauthorized")
        }
        let grant = try await events.bearerGrant(authorization)
        guard grant.expiresAt > Date() else { throw APIError.unauthorized("The access token has expired; refresh it.", code: "token_expired") }
        // Each ticket is a key in Redis for a minute: one token may not fill Redis with them.
        try await Self.ticketLimit.count(
            "sse:ticket-limit:\(grant.userID.uuidString.lowercased())", detail: "Too many event tickets; an app needs one per connection.",
            redis: events.redis, logger: context.logger)
        do {
            let issued = try await events.tickets.issue(grant)
            return TicketResponse(ticket: issued.ticket, expiresAt: issued.expiresAt)
        } catch {
            context.logger.warning("ticket not issued", metadata: ["error": "\(error)"])
            throw LiveEvents.unavailable
        }
    }
}
