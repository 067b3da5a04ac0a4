import Foundation
import Hummingbird
import ServiceKit

/// The caller's own notifications: list, unread count, mark read.
struct NotificationRoutes {
    let social: Social

    func add(to router: Router<ServiceRequestContext>) {
        let notifications = router.group("v1/notifications", context: AuthenticatedContext.self)
        notifications.get(use: list)
        notifications.get("unread-count", use: unreadCount)
        notifications.post("read", use: markRead)
    }

    @Sendable func list(_ request: Request, context: AuthenticatedContext) async throws -> Page<NotificationView> {
        var unreadOnly = false
        if let unread = request.uri.queryParameters["unread"] {
            guard let flag = Bool(String(unread)) else { throw APIError.validation([.init(field: "unread", message: "must be true or false")]) }
            unreadOnly = flag
        }
        let social = self.social
        return try await social.page(request) { connection, limit, after in
            try await social.notifications.list(for: context.caller.userID, unreadOnly: unreadOnly, limit: limit, after: after, on: connection, logger: context.logger)
        }
    }

    struct UnreadCount: Codable, Sendable {
        var unread: Int
    }

    @Sendable func unreadCount(_ request: Request, context: AuthenticatedContext) async throws -> UnreadCount {
        let social = self.social
        return UnreadCount(
            unread: try await social.postgres.withConnectionOnItsLoop { connection in
                try await social.notifications.unreadCount(of: context.caller.userID, on: connection, logger: context.logger)
            })
    }

    struct ReadRequest: StrictJSONBody {
        var ids: [UUID]?
        var all: Bool?
        enum CodingKeys: String, CodingKey, CaseIterable { case ids, all }
    }

    struct ReadResult: Codable, Sendable {
        var updated: Int
        var unread: Int
    }

    /// `{"ids": [...]}` marks those (only the caller's own count), `{"all": true}` marks everything.
    @Sendable func markRead(_ request: Request, context: AuthenticatedContext) async throws -> ReadResult {
        let body = try await request.decode(as: ReadRequest.self, context: context)
        let ids: [UUID]?
        switch (body.ids, body.all) {
        case (let list?, nil) where !list.isEmpty && list.count <= 100: ids = list
        case (nil, true?): ids = nil
        default:
            throw APIError.validation([.init(field: "body", message: "send either ids (1 to 100 notification ids) or \"all\": true")])
        }
        let social = self.social
        let user = context.caller.userID
        return try await social.transaction(logger: context.logger) { connection in
            let updated = try await social.notifications.markRead(of: user, ids: ids, on: connection, logger: context.logger)
            return ReadResult(updated: updated, unread: try await social.notifications.unreadCount(of: user, on: connection, logger: context.logger))
        }
    }
}
