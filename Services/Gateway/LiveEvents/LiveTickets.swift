import Foundation
import ServiceKit

/// Tickets for clients that cannot set an `Authorization` header on an event stream (a browser's
/// `EventSource`): `POST /v1/events/ticket` with the access token gives one, `GET /v1/events?ticket=`
/// spends it. A ticket is 256 random bits, good once and for `lifetime`, and stands for the token that
/// asked for it: its user, its session (`sid`, so that ending the session refuses it) and its expiry,
/// at which the stream it opens ends. Redis keeps only its SHA-256, so a Redis dump holds no usable
/// ticket; nothing logs it (`RequestLog` writes no query, and redacts `ticket=` if one is passed).
struct LiveTickets: Sendable {
    let redis: RedisClient
    let lifetime: Duration

    /// What a ticket stands for.
    struct Grant: Codable, Sendable, Equatable {
        var userID: UUID
        var sessionID: UUID?
        /// The expiry of the access token that asked for the ticket.
        var expiresAt: Date

        enum CodingKeys: String, CodingKey {
            case userID = "user_id", sessionID = "session_id", expiresAt = "expires_at"
        }
    }

    static func key(_ ticket: String) -> String {
        "sse:ticket:" + OpaqueToken.hash(ticket).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    /// A new ticket for `grant`, and when it stops being good.
    func issue(_ grant: Grant) async throws -> (ticket: String, expiresAt: Date) {
        let ticket = OpaqueToken().value
        let milliseconds = Int(lifetime.components.seconds * 1_000 + lifetime.components.attoseconds / 1_000_000_000_000_000)
        let value = String(decoding: try JSONEncoder.api.encode(grant), as: UTF8.self)
        try await redis.send("SET", RedisArgument(Self.key(ticket)), RedisArgument(value), "PX", RedisArgument(milliseconds))
        return (ticket, Date().addingTimeInterval(Double(milliseconds) / 1_000))
    }

    /// What `ticket` stands for, once: it is deleted as it is read (`GETDEL`). Nil for a ticket that
    /// was never given, was spent, or expired; a malformed one costs no lookup.
    func redeem(_ ticket: String) async throws -> Grant? {
        guard ticket.utf8.count == 43, Base64URL.isCanonical(ticket) else { return nil }
        let reply = try await redis.send("GETDEL", RedisArgument(Self.key(ticket)))
        guard let text = reply.string else { return nil }
        return try? JSONDecoder.api.decode(Grant.self, from: Data(text.utf8))
    }
}
