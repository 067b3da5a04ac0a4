import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// What a notification is about.
enum NotificationKind: String, Codable, Sendable {
    case follow
    case followRequest = "follow_request"
    case followAccepted = "follow_accepted"
}

/// A notification as its recipient reads it.
struct NotificationView: Codable, Sendable {
    var id: UUID
    var type: String
    var actor: ProfileSummary?
    var createdAt: Date
    var read: Bool

    // In the order of their names (`ProfileView.CodingKeys` says why).
    enum CodingKeys: String, CodingKey {
        case actor, createdAt = "created_at", id, read, type
    }
}

/// Stored notifications. Each new one is also an event published live on `user:<recipient>`, written
/// in the same transaction as the change that caused it.
struct NotificationStore: Sendable {
    let outbox: EventOutbox
    /// A repeat within this window is not pushed (`firstPush`); zero pushes every notification.
    var repeatPushWindow: Duration = .zero

    /// Stores and announces a notification, unless the recipient blocks or (still) mutes the actor,
    /// or moderators hid the actor's profile (which is `404` to the recipient everywhere else).
    func notify(_ recipient: UUID, _ kind: NotificationKind, actor: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        let id = UUID()
        var stored = false
        for try await _ in try await connection.checkedExecute(Store(id: id, recipient: recipient, kind: kind, actor: actor), logger: logger) { stored = true }
        guard stored else { return }
        let live = try await firstPush(to: recipient, kind, actor: actor, on: connection, logger: logger)
        let created = NotificationCreated(notificationID: id, userID: recipient, kind: NotificationCreated.Kind(rawValue: kind.rawValue), actorID: actor)
        try await outbox.write(created, userID: recipient, live: live, on: connection, logger: logger)
    }

    /// Whether this notification is the first of its kind from `actor` to `recipient` within
    /// `repeatPushWindow`, and so is pushed live; a repeat is stored and listed, not pushed. Marked in
    /// the notification's own transaction (`notification_pushes`), so an attempt that rolls back
    /// (a retried deadlock victim) leaves no mark.
    func firstPush(to recipient: UUID, _ kind: NotificationKind, actor: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        guard repeatPushWindow > .zero else { return true }
        let window = Double(repeatPushWindow.components.seconds)
        return try await connection.returnsRow(FirstPush(recipient: recipient, actor: actor, kind: kind, window: window), logger: logger)
    }

    /// `firstPush`'s mark, prepared once per connection as every follow runs it.
    struct FirstPush: PostgresPreparedStatement {
        static let name = "social.first_push"
        static let sql = """
            INSERT INTO notification_pushes (user_id, actor_id, type) VALUES ($1, $2, $3)
            ON CONFLICT (user_id, actor_id, type) DO UPDATE SET pushed_at = now()
                WHERE notification_pushes.pushed_at < now() - make_interval(secs => $4)
            RETURNING true
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid, .text, .float8]
        typealias Row = Void

        let recipient: UUID
        let actor: UUID
        let kind: NotificationKind
        let window: Double

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 4)
            bindings.append(recipient)
            bindings.append(actor)
            bindings.append(kind.rawValue)
            bindings.append(window)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// `notify`'s insert, prepared once per connection as every follow runs it.
    struct Store: PostgresPreparedStatement {
        static let name = "social.store_notification"
        static let sql = """
            INSERT INTO notifications (id, user_id, type, actor_id)
            SELECT $1, $2, $3, $4
            WHERE NOT EXISTS (SELECT 1 FROM blocks WHERE blocker_id = $2 AND blocked_id = $4)
              AND NOT EXISTS (SELECT 1 FROM mutes WHERE muter_id = $2 AND muted_id = $4 AND (until IS NULL OR until > now()))
              AND NOT EXISTS (SELECT 1 FROM profiles WHERE user_id = $4 AND hidden_at IS NOT NULL)
            RETURNING true
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid, .text, .uuid]
        typealias Row = Void

        let id: UUID
        let recipient: UUID
        let kind: NotificationKind
        let actor: UUID

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 4)
            bindings.append(id)
            bindings.append(recipient)
            bindings.append(kind.rawValue)
            bindings.append(actor)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Forgets a notification that no longer holds (a withdrawn follow request).
    func retract(_ recipient: UUID, _ kind: NotificationKind, actor: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        _ = try await connection.returnsRow(Retract(recipient: recipient, actor: actor, kind: kind), logger: logger)
    }

    /// `retract`, prepared once per connection as every unfollow runs it.
    struct Retract: PostgresPreparedStatement {
        static let name = "social.retract_notification"
        static let sql = "DELETE FROM notifications WHERE user_id = $1 AND actor_id = $2 AND type = $3 RETURNING 1"
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid, .text]
        typealias Row = Void

        let recipient: UUID
        let actor: UUID
        let kind: NotificationKind

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(recipient)
            bindings.append(actor)
            bindings.append(kind.rawValue)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Drops every notification of `kind` for `recipient`: the requests it announced are all gone
    /// (a profile made public approves them all).
    func retractAll(_ recipient: UUID, _ kind: NotificationKind, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM notifications WHERE user_id = \(recipient) AND type = \(kind.rawValue)", logger: logger)
    }

    /// Drops what `actor` caused for `recipient` (on a block).
    func removeAll(for recipient: UUID, from actor: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM notifications WHERE user_id = \(recipient) AND actor_id = \(actor)", logger: logger)
    }

    func list(for user: UUID, unreadOnly: Bool, limit: Int, after: TimeCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [(NotificationView, TimeCursor)] {
        let (micros, tie) = TimeCursor.bounds(after)
        var result: [(NotificationView, TimeCursor)] = []
        for try await row in try await connection.checkedExecute(Page(user: user, unreadOnly: unreadOnly, micros: micros, tie: tie, limit: limit + 1), logger: logger) {
            result.append(row)
        }
        return result
    }

    /// `list`'s page, prepared as the notifications screen is read often; the parameters as in
    /// `FollowListPage`.
    struct Page: PostgresPreparedStatement {
        static let name = "social.notifications_page"
        static let sql = """
            SELECT n.id, n.type, n.created_at, \(TimeCursor.micros("n.created_at")), n.read_at IS NOT NULL,
                   p.user_id, p.username, p.display_name, p.avatar_etag, coalesce(p.is_verified, false)
            FROM notifications n LEFT JOIN profiles p ON p.user_id = n.actor_id
            WHERE n.user_id = $1 AND (NOT $2 OR n.read_at IS NULL) AND p.hidden_at IS NULL
              AND (n.created_at, n.id) < ('epoch'::timestamptz + $3 * interval '1 microsecond', $4)
            ORDER BY n.created_at DESC, n.id DESC LIMIT $5
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .bool, .int8, .uuid, .int8]
        typealias Row = (NotificationView, TimeCursor)

        let user: UUID
        let unreadOnly: Bool
        let micros: Int64
        let tie: UUID
        let limit: Int

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(user)
            bindings.append(unreadOnly)
            bindings.append(micros)
            bindings.append(tie)
            bindings.append(Int64(limit))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (id, type, created, micros, read, actorID, username, name, etag, verified) = try row.decode((UUID, String, Date, Int64, Bool, UUID?, String?, String?, String?, Bool).self)
            let actor = actorID.map { ProfileSummary(($0, username, name, etag, verified)) }
            return (NotificationView(id: id, type: type, actor: actor, createdAt: created, read: read), TimeCursor(micros: micros, id: id))
        }
    }

    /// Unread notifications that `list` shows: none from a hidden profile.
    func unreadCount(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        for try await count in try await connection.checkedExecute(UnreadCount(user: user), logger: logger) { return Int(count) }
        return 0
    }

    /// The badge count, which apps ask for often: prepared once per connection. As an unnamed
    /// statement PostgreSQL parsed and planned it on every call, which took it from some 60,000 to
    /// 15,000 executions/s (`pgbench -M prepared` against `-M extended`, 16 clients, this machine).
    struct UnreadCount: OneParameterStatement {
        static let name = "social.unread_count"
        static let sql = """
            SELECT count(*)::int8 FROM notifications n LEFT JOIN profiles p ON p.user_id = n.actor_id
            WHERE n.user_id = $1 AND n.read_at IS NULL AND p.hidden_at IS NULL
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid]
        typealias Row = Int64

        var user: UUID

        var parameter: UUID { user }

        func decodeRow(_ row: PostgresRow) throws -> Int64 {
            try row.makeRandomAccess()[0].decode(Int64.self)
        }
    }

    /// Marks the user's own notifications read (ids of other people's are ignored); `ids` nil is all.
    func markRead(of user: UUID, ids: [UUID]?, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let rows = try await connection.checkedQuery(
            """
            UPDATE notifications SET read_at = now()
            WHERE user_id = \(user) AND read_at IS NULL AND (\(ids == nil) OR id = ANY(\(ids ?? [])))
            RETURNING id
            """, logger: logger)
        var count = 0
        for try await _ in rows { count += 1 }
        return count
    }
}

/// A moderator's warning to a user.
struct WarningView: Codable, Sendable {
    var id: UUID
    var userID: UUID
    var reason: String
    /// Shown to staff only.
    var moderatorID: UUID?
    var createdAt: Date

    enum CodingKeys: String, CodingKey {
        case id, userID = "user_id", reason, moderatorID = "moderator_id", createdAt = "created_at"
    }
}

struct WarningStore: Sendable {
    /// How long the same warning given again is a retry of the first rather than a second warning.
    static let retryWindow: Duration = .seconds(600)

    /// The same warning given in the last `retryWindow`, if any.
    func recent(to user: UUID, by moderator: UUID, reason: String, on connection: PostgresConnection, logger: Logger) async throws -> WarningView? {
        let rows = try await connection.checkedQuery(
            """
            SELECT id, created_at FROM warnings
            WHERE user_id = \(user) AND moderator_id = \(moderator) AND reason = \(reason)
              AND created_at > clock_timestamp() - \(Int64(Self.retryWindow.components.seconds)) * interval '1 second'
            ORDER BY created_at DESC LIMIT 1
            """, logger: logger)
        var found: WarningView?
        for try await (id, created) in rows.decode((UUID, Date).self) {
            found = WarningView(id: id, userID: user, reason: reason, moderatorID: moderator, createdAt: created)
        }
        return found
    }

    func add(to user: UUID, by moderator: UUID, reason: String, on connection: PostgresConnection, logger: Logger) async throws -> WarningView {
        let id = UUID()
        let rows = try await connection.checkedQuery(
            """
            INSERT INTO warnings (id, user_id, moderator_id, reason) VALUES (\(id), \(user), \(moderator), \(reason)) RETURNING created_at
            """, logger: logger)
        for try await created in rows.decode(Date.self) {
            return WarningView(id: id, userID: user, reason: reason, moderatorID: moderator, createdAt: created)
        }
        throw APIError.notFound("No such profile.")
    }

    func list(for user: UUID, includeModerator: Bool, limit: Int, after: TimeCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [(WarningView, TimeCursor)] {
        let (micros, tie) = TimeCursor.bounds(after)
        let rows = try await connection.checkedQuery(
            """
            SELECT id, user_id, reason, moderator_id, created_at, \(unescaped: TimeCursor.micros("created_at"))
            FROM warnings WHERE user_id = \(user)
              AND (created_at, id) < ('epoch'::timestamptz + \(micros) * interval '1 microsecond', \(tie))
            ORDER BY created_at DESC, id DESC LIMIT \(limit + 1)
            """, logger: logger)
        var result: [(WarningView, TimeCursor)] = []
        for try await (id, userID, reason, moderator, created, micros) in rows.decode((UUID, UUID, String, UUID?, Date, Int64).self) {
            result.append((WarningView(id: id, userID: userID, reason: reason, moderatorID: includeModerator ? moderator : nil, createdAt: created), TimeCursor(micros: micros, id: id)))
        }
        return result
    }
}
