import Foundation
import Hummingbird
import Logging
import PostgresNIO
import ServiceKit

/// The social domain: its stores, its outbox, and the rules every route shares (whose profile is
/// visible to whom, the caller's own profile made on first use).
struct Social: Sendable {
    let postgres: PostgresClient
    let redis: RedisClient
    let outbox: EventOutbox
    let settings: SocialSettings
    let logger: Logger
    let profiles = ProfileStore()
    let follows = FollowStore()
    let blocks = BlockStore()
    let warnings = WarningStore()
    var notifications: NotificationStore { NotificationStore(outbox: outbox, repeatPushWindow: settings.repeatPushWindow) }

    init(dependencies: ServiceDependencies, settings: SocialSettings) {
        postgres = dependencies.postgres
        redis = dependencies.redis
        outbox = dependencies.outbox
        self.settings = settings
        logger = dependencies.logger
    }

    /// Counts a follow, unfollow or request of `user` in the hour; over `FOLLOW_ACTIONS_PER_HOUR`,
    /// `429 rate_limited` with `Retry-After`. A follow loop is someone's spam, not a use of the app.
    /// While Redis is unreachable the action is let through (logged).
    func countFollowAction(by user: UUID, logger: Logger) async throws {
        try await RateLimit(max: settings.followActionsPerHour, per: .seconds(3600), whenUnavailable: .allow)
            .count("social:follow-actions:" + user.uuidString.lowercased(), detail: "Too many follows and unfollows in the last hour.", redis: redis, logger: logger)
    }

    /// `profile.updated` with the profile's dietary data and public card, in the caller's transaction.
    func announce(_ profile: ProfileRecord, on connection: PostgresConnection, logger: Logger) async throws {
        try await outbox.write(
            ProfileUpdated(
                userID: profile.id, dietaryPreferences: profile.dietaryPreferences, allergies: profile.allergies, displayName: profile.displayName,
                avatarURL: profile.avatarURL),
            userID: profile.id, on: connection, logger: logger)
    }

    /// A transaction that is tried again when PostgreSQL picks it as a deadlock victim or a
    /// serialization failure: bulk changes (a profile going public, an account deletion) lock many
    /// profile rows, and a follow storm must not turn that into an error for the client. A profile
    /// deleted under the transaction's feet (foreign key violation) is 404.
    func transaction<Result: Sendable>(logger: Logger, _ body: (PostgresConnection) async throws -> sending Result) async throws -> Result {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await postgres.transaction(logger: logger, body)
            } catch let error as PSQLError where attempt < 4 && ["40P01", "40001"].contains(error.serverInfo?[.sqlState] ?? "") {
                logger.debug("transaction retried", metadata: ["sqlstate": "\(error.serverInfo?[.sqlState] ?? "")", "attempt": "\(attempt)"])
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...10) * attempt))
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23503" {
                throw APIError.notFound("No such profile.")
            }
        }
    }

    /// The caller's own profile, made now if `user.registered` has not arrived yet. A deleted
    /// account's token (it can outlive the account by a few minutes) gets 401, not a new profile.
    func ownProfile(_ caller: Caller, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> ProfileRecord {
        if let profile = try await profiles.find(id: caller.userID, forUpdate: forUpdate, on: connection, logger: logger) { return profile }
        guard try await profiles.ensure(id: caller.userID, displayName: nil, verified: caller.has(.creator), overwriteVerified: false, on: connection, logger: logger),
            let profile = try await profiles.find(id: caller.userID, forUpdate: forUpdate, on: connection, logger: logger)
        else {
            throw APIError.accountDeleted
        }
        return profile
    }

    /// `FollowStore.lockPair` for something the caller does to `other` (follow, block), making the
    /// caller's own profile first if `user.registered` has not arrived yet.
    func lockPair(caller: Caller, with other: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        if try await !follows.lockPair(caller.userID, other, on: connection, logger: logger).contains(caller.userID) {
            _ = try await ownProfile(caller, on: connection, logger: logger)
        }
    }

    /// Someone else's profile and how the caller stands to it, or 404 when the caller may not know
    /// it exists: hidden by moderators, or its owner blocks the caller. Staff see everything.
    func visibleProfile(_ id: UUID, to caller: Caller, on connection: PostgresConnection, logger: Logger) async throws -> (ProfileRecord, Relationship) {
        try await visible(ProfileWithRelationship(target: id, viewer: caller.userID), to: caller, on: connection, logger: logger)
    }

    /// `visibleProfile`, or a profile moderators hid that follows the caller or asked to: one the
    /// caller may still block, so that an account hidden while it followed them can be cut off. Any
    /// other hidden profile stays not found, as everywhere.
    func blockableProfile(_ id: UUID, by caller: Caller, on connection: PostgresConnection, logger: Logger) async throws {
        let (profile, relationship) = try await visible(
            ProfileWithRelationship(target: id, viewer: caller.userID), to: caller, includingHidden: true, on: connection, logger: logger)
        guard profile.hiddenAt != nil, !caller.isStaff, profile.id != caller.userID, !relationship.followedBy else { return }
        let asked = try await connection.returnsRow(
            "SELECT 1 FROM follow_requests WHERE requester_id = \(id) AND target_id = \(caller.userID)", logger: logger)
        guard asked else { throw APIError.notFound("No such profile.") }
    }

    /// `visibleProfile` found by username (case-insensitively).
    func visibleProfile(username: String, to caller: Caller, on connection: PostgresConnection, logger: Logger) async throws -> (ProfileRecord, Relationship) {
        try await visible(ProfileWithRelationshipByUsername(username: username, viewer: caller.userID), to: caller, on: connection, logger: logger)
    }

    private func visible(
        _ statement: some ProfileAndRelationship, to caller: Caller, includingHidden: Bool = false, on connection: PostgresConnection, logger: Logger
    ) async throws -> (ProfileRecord, Relationship) {
        for try await (profile, relationship) in try await connection.checkedExecute(statement, logger: logger) {
            if profile.id != caller.userID, !caller.isStaff, (profile.hiddenAt != nil && !includingHidden) || relationship.blockedBy {
                throw APIError.notFound("No such profile.")
            }
            return (profile, relationship)
        }
        throw APIError.notFound("No such profile.")
    }

    /// One page of a newest-first list: reads `?limit=` and `?cursor=`, lets `fetch` read `limit + 1`
    /// rows after the cursor on one connection, and returns the page with the next cursor.
    func page<Item: Codable & Sendable>(_ request: Request, _ fetch: (PostgresConnection, Int, TimeCursor?) async throws -> [(Item, TimeCursor)]) async throws -> Page<Item> {
        let page = try PageRequest(query: request)
        let after = try page.position(TimeCursor.self)
        let rows = try await postgres.withConnectionOnItsLoop { connection in try await fetch(connection, page.limit, after) }
        let (items, next) = Cursor.page(rows, limit: page.limit) { $0.1 }
        return Page(items: items.map(\.0), nextCursor: next)
    }

    func view(_ profile: ProfileRecord, relationship: Relationship?, for caller: Caller) -> ProfileView {
        ProfileView(profile, relationship: relationship, isOwner: profile.id == caller.userID, isStaff: caller.isStaff)
    }
}

/// A profile and the caller's relationship to it in one round trip: the read every profile view
/// does. `$1` (`key`) finds the profile, by id or by username; `$2` is the caller. The profile's
/// columns come first, then the relationship's flags in one integer.
protocol ProfileAndRelationship: PostgresPreparedStatement where Row == (ProfileRecord, Relationship) {
    associatedtype Key: PostgresNonThrowingEncodable
    var key: Key { get }
    var viewer: UUID { get }
}

extension ProfileAndRelationship {
    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(key)
        bindings.append(viewer)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        let cells = row.makeRandomAccess()
        return (try ProfileRecord(cells: cells), Relationship(flags: try cells[19].decode(Int32.self)))
    }
}

struct ProfileWithRelationship: ProfileAndRelationship {
    // PostgresNIO's default name is `String(reflecting: Self.self)`, worked out on every execution.
    static let name = "social.profile_with_relationship"
    static let sql = "SELECT \(ProfileStore.columns), \(FollowStore.relationshipFlags("$2", "$1")) FROM profiles WHERE user_id = $1"
    static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid]

    var target: UUID
    var viewer: UUID
    var key: UUID { target }
}

/// `ProfileWithRelationship` by username, in one round trip too (`profiles_username_key` finds it).
struct ProfileWithRelationshipByUsername: ProfileAndRelationship {
    static let name = "social.profile_with_relationship_by_username"
    static let sql = "SELECT \(ProfileStore.columns), \(FollowStore.relationshipFlags("$2", "profiles.user_id")) FROM profiles WHERE lower(username) = lower($1)"
    static let bindingDataTypes: [PostgresDataType] = [.text, .uuid]

    var username: String
    var viewer: UUID
    var key: String { username }
}

extension Caller {
    /// Moderators and admins see every profile and field.
    var isStaff: Bool { has(.moderator) || has(.admin) }
}

extension AuthenticatedContext {
    /// The UUID in the `:id` path segment; anything else is 404 like an unknown id.
    func profileID(_ name: String = "id") throws -> UUID {
        guard let id = parameters.get(name).flatMap(UUID.init(parsing:)) else { throw APIError.notFound("No such profile.") }
        return id
    }
}

// The bodies the routes return.
extension ProfileView: ResponseEncodable {}
extension OnboardingView: ResponseEncodable {}
extension WarningView: ResponseEncodable {}
extension FollowState: ResponseEncodable {}
extension BlockState: ResponseEncodable {}
extension MuteState: ResponseEncodable {}
extension NotificationRoutes.UnreadCount: ResponseEncodable {}
extension NotificationRoutes.ReadResult: ResponseEncodable {}
extension ModerationRoutes.HiddenState: ResponseEncodable {}
