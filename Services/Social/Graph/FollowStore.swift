import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Position in a newest-first list: the row's time in microseconds (exact, unlike a floating-point
/// date) and an id to break ties.
struct TimeCursor: Codable, Sendable {
    var micros: Int64
    var id: UUID

    /// The bounds of `(time, id) < ('epoch' + micros µs, tie)`, the condition every list query
    /// writes. The first page's bounds (the year 2100 and the greatest id) are
    /// past every row, so one condition serves every page, and in a prepared statement's generic plan
    /// it stays an index condition: a deep page is found by the index, not by reading the ones above.
    static func bounds(_ cursor: TimeCursor?) -> (micros: Int64, tie: UUID) {
        guard let cursor else { return (endOfTime, greatestID) }
        // Clamped to years 1970–2100: a hand-made cursor must not overflow the timestamp arithmetic.
        return (min(max(cursor.micros, 0), endOfTime), cursor.id)
    }

    /// 2100-01-01 in microseconds since 1970.
    static let endOfTime: Int64 = 4_102_444_800_000_000
    static let greatestID = UUID(uuid: (0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))

    static func micros(_ column: String) -> String { "(extract(epoch FROM \(column)) * 1000000)::int8" }
}

/// A profile in a list, with when it entered the list (`followed_at`, `requested_at`, ...).
/// The summary's fields always (null when unset: the document requires them), the list's own
/// dates when set.
struct ListedProfile: Codable, Sendable {
    var id: UUID
    @Nullable var username: String?
    @Nullable var displayName: String?
    @Nullable var avatarURL: String?
    var isVerified: Bool
    var followedAt: Date?
    var requestedAt: Date?
    var blockedAt: Date?
    var mutedAt: Date?
    var mutedUntil: Date?

    // In the order of their names (`ProfileView.CodingKeys` says why).
    enum CodingKeys: String, CodingKey {
        case avatarURL = "avatar_url", blockedAt = "blocked_at", displayName = "display_name", followedAt = "followed_at", id
        case isVerified = "is_verified", mutedAt = "muted_at", mutedUntil = "muted_until", requestedAt = "requested_at", username
    }

    init(_ summary: ProfileSummary) {
        id = summary.id
        username = summary.username
        displayName = summary.displayName
        avatarURL = summary.avatarURL
        isVerified = summary.isVerified
    }
}

/// Follows and follow requests, and the counts on both profiles, always changed together.
struct FollowStore: Sendable {
    /// Serializes everything that changes how two people stand to each other (follow, request,
    /// approve, block), whichever of them acts, so a follow cannot slip in beside a block. It also
    /// takes a key-share lock on both profiles: that waits for a profile being switched public (which
    /// holds its row for update while it approves requests) or purged, and is read after, so the
    /// caller sees the profile as it now is. Key-share does not conflict with the count updates, so
    /// follows of one popular profile still run side by side. One round trip in the common case: the
    /// advisory lock is taken first (the row in `FROM`), then the row locks (the array, evaluated as
    /// the row is projected). The statement's snapshot predates the wait for the advisory lock, so a
    /// profile made meanwhile is not in it: one that is missing is looked for again, and locked, by a
    /// second statement. Returns the ids of the two whose profiles exist.
    @discardableResult
    func lockPair(_ a: UUID, _ b: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Set<UUID> {
        var existing: Set<UUID> = []
        for try await ids in try await connection.checkedExecute(LockPair(a: a, b: b), logger: logger) { existing = Set(ids) }
        let missing = [a, b].filter { !existing.contains($0) }
        if !missing.isEmpty {
            let found = try await connection.checkedQuery("SELECT user_id FROM profiles WHERE user_id = ANY(\(missing)) ORDER BY user_id FOR KEY SHARE", logger: logger)
            for try await id in found.decode(UUID.self) { existing.insert(id) }
        }
        return existing
    }

    /// The six relationship flags of viewer and target as one SQL integer, a bit each in the order of
    /// `Relationship(flags:)`: as six columns they cost a profile read 4,600 instructions more (of
    /// 404,000; PostgresNIO indexes every column of every result by its name). `viewer` and
    /// `target` are the SQL expressions (bind parameters such as `$1`) that stand for the two ids.
    static func relationshipFlags(_ viewer: String, _ target: String) -> String {
        // A viewer moderators hid follows as a stranger would: its owner cannot see it among their
        // followers, so what following shows (a private profile, `followers_only` fields) is not shown it.
        """
        (EXISTS (SELECT 1 FROM follows WHERE follower_id = \(viewer) AND followee_id = \(target))
         AND NOT EXISTS (SELECT 1 FROM profiles h WHERE h.user_id = \(viewer) AND h.hidden_at IS NOT NULL))::int
        + (EXISTS (SELECT 1 FROM follows WHERE follower_id = \(target) AND followee_id = \(viewer)))::int * 2
        + (EXISTS (SELECT 1 FROM follow_requests WHERE requester_id = \(viewer) AND target_id = \(target)))::int * 4
        + (EXISTS (SELECT 1 FROM blocks WHERE blocker_id = \(viewer) AND blocked_id = \(target)))::int * 8
        + (EXISTS (SELECT 1 FROM blocks WHERE blocker_id = \(target) AND blocked_id = \(viewer)))::int * 16
        + (EXISTS (SELECT 1 FROM mutes WHERE muter_id = \(viewer) AND muted_id = \(target) AND (until IS NULL OR until > now())))::int * 32
        """
    }

    /// Adds the follow; true when it is new (and the counts moved), false when it already existed.
    func follow(_ follower: UUID, _ followee: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(AddFollow(follower: follower, followee: followee), logger: logger)
    }

    /// Removes the follow; true when there was one (and the counts moved).
    func unfollow(_ follower: UUID, _ followee: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(RemoveFollow(follower: follower, followee: followee), logger: logger)
    }

    // The statements of every follow, unfollow and block are prepared once per connection: a follow
    // ran eight statements, and PostgreSQL parsed and planned each unnamed one on every call.

    /// `lockPair`'s first statement. The two ids are two parameters, not an array: PostgreSQL costs
    /// a generic plan for `= ANY($1)` as if the array held ten ids, more than a plan made for two,
    /// so it planned the statement again on every follow.
    struct LockPair: PostgresPreparedStatement {
        static let name = "social.lock_pair"
        static let sql = """
            SELECT ARRAY(SELECT user_id FROM profiles WHERE user_id IN ($1, $2) ORDER BY user_id FOR KEY SHARE)
            FROM (SELECT pg_advisory_xact_lock(hashtextextended($3, 7))) AS pair
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid, .text]
        typealias Row = [UUID]

        let a: UUID
        let b: UUID

        func makeBindings() throws -> PostgresBindings {
            // The same key whichever of the two acts.
            let (low, high) = a.uuidString < b.uuidString ? (a, b) : (b, a)
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(a)
            bindings.append(b)
            bindings.append(low.uuidString + high.uuidString)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> [UUID] { try row.makeRandomAccess()[0].decode([UUID].self) }
    }

    struct AddFollow: FollowCountChange {
        static let name = "social.add_follow"
        static let sql = adjustingCounts(after: "INSERT INTO follows (follower_id, followee_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true")
        static let delta: Int32 = 1
        let follower: UUID
        let followee: UUID
    }

    struct RemoveFollow: FollowCountChange {
        static let name = "social.remove_follow"
        static let sql = adjustingCounts(after: "DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2 RETURNING true")
        static let delta: Int32 = -1
        let follower: UUID
        let followee: UUID
    }

    /// Records a request to follow a private profile; true when it is new.
    func request(_ requester: UUID, _ target: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        return try await connection.returnsRow(
            """
            INSERT INTO follow_requests (requester_id, target_id) VALUES (\(requester), \(target))
            ON CONFLICT DO NOTHING RETURNING true
            """, logger: logger)
    }

    /// Removes a pending request; true when there was one.
    func removeRequest(_ requester: UUID, _ target: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        return try await connection.returnsRow(
            "DELETE FROM follow_requests WHERE requester_id = \(requester) AND target_id = \(target) RETURNING true", logger: logger)
    }

    /// Whether moderators hid `user`'s profile.
    func isHidden(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM profiles WHERE user_id = \(user) AND hidden_at IS NOT NULL", logger: logger)
    }

    /// Turns every pending request to `target` into a follow (the profile went public); returns the
    /// requesters that now follow. A request from a profile moderators hid is dropped, not approved:
    /// its owner never saw it among their requests.
    func approveAll(to target: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [UUID] {
        let rows = try await connection.checkedQuery(
            """
            WITH moved AS (DELETE FROM follow_requests WHERE target_id = \(target) RETURNING requester_id)
            INSERT INTO follows (follower_id, followee_id)
            SELECT requester_id, \(target) FROM moved
            WHERE NOT EXISTS (SELECT 1 FROM blocks WHERE (blocker_id, blocked_id) IN ((requester_id, \(target)), (\(target), requester_id)))
              AND NOT EXISTS (SELECT 1 FROM profiles p WHERE p.user_id = requester_id AND p.hidden_at IS NOT NULL)
            ON CONFLICT DO NOTHING RETURNING follower_id
            """, logger: logger)
        var followers: [UUID] = []
        for try await id in rows.decode(UUID.self) { followers.append(id) }
        guard !followers.isEmpty else { return [] }
        try await connection.checkedRun(
            """
            UPDATE profiles SET
                followers_count = followers_count + CASE WHEN user_id = \(target) THEN \(Int32(followers.count)) ELSE 0 END,
                following_count = following_count + CASE WHEN user_id = \(target) THEN 0 ELSE 1 END
            WHERE user_id = ANY(\(followers + [target]))
            """, logger: logger)
        return followers
    }

    /// Ends follows and requests both ways between two people (a block); returns the follows removed
    /// as (follower, followee).
    func separate(_ a: UUID, _ b: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [(UUID, UUID)] {
        var removed: [(UUID, UUID)] = []
        if try await unfollow(a, b, on: connection, logger: logger) { removed.append((a, b)) }
        if try await unfollow(b, a, on: connection, logger: logger) { removed.append((b, a)) }
        try await connection.checkedRun(
            """
            DELETE FROM follow_requests WHERE (requester_id = \(a) AND target_id = \(b)) OR (requester_id = \(b) AND target_id = \(a))
            """, logger: logger)
        return removed
    }

    enum Direction {
        /// People who follow the profile.
        case followers
        /// People the profile follows.
        case following
    }

    /// One page of a profile's followers or following, newest first, leaving out hidden profiles and
    /// people who block the viewer.
    func list(_ direction: Direction, of profile: UUID, viewer: UUID, viewerIsStaff: Bool, limit: Int, after: TimeCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [(
        ListedProfile, TimeCursor
    )] {
        let (micros, tie) = TimeCursor.bounds(after)
        let rows =
            switch direction {
            case .followers:
                try await connection.checkedExecute(FollowersPage(profile: profile, viewer: viewer, viewerIsStaff: viewerIsStaff, micros: micros, tie: tie, limit: limit + 1), logger: logger)
            case .following:
                try await connection.checkedExecute(FollowingPage(profile: profile, viewer: viewer, viewerIsStaff: viewerIsStaff, micros: micros, tie: tie, limit: limit + 1), logger: logger)
            }
        var result: [(ListedProfile, TimeCursor)] = []
        for try await row in rows { result.append(row) }
        return result
    }

    /// Requests waiting for `target`'s answer, newest first.
    func incomingRequests(to target: UUID, limit: Int, after: TimeCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [(ListedProfile, TimeCursor)] {
        let (micros, tie) = TimeCursor.bounds(after)
        let rows = try await connection.checkedQuery(
            """
            SELECT \(unescaped: ProfileSummary.columns), r.created_at, \(unescaped: TimeCursor.micros("r.created_at"))
            FROM follow_requests r JOIN profiles p ON p.user_id = r.requester_id
            WHERE r.target_id = \(target) AND p.hidden_at IS NULL
              AND (r.created_at, r.requester_id) < ('epoch'::timestamptz + \(micros) * interval '1 microsecond', \(tie))
            ORDER BY r.created_at DESC, r.requester_id DESC LIMIT \(limit + 1)
            """, logger: logger)
        return try await Self.listed(rows) { $0.requestedAt = $1 }
    }

    /// Rows of `ProfileSummary.columns, <time>, <time in µs>` as list items and their cursors; `stamp`
    /// puts the time in the item's field.
    static func listed(_ rows: PostgresRowSequence, stamp: (inout ListedProfile, Date) -> Void) async throws -> [(ListedProfile, TimeCursor)] {
        var result: [(ListedProfile, TimeCursor)] = []
        for try await row in rows { result.append(try listed(row, stamp: stamp)) }
        return result
    }

    /// One such row (`FollowListPage` reads its rows with it too).
    static func listed(_ row: PostgresRow, stamp: (inout ListedProfile, Date) -> Void) throws -> (ListedProfile, TimeCursor) {
        let (id, username, name, etag, verified, since, micros) = try row.decode((UUID, String?, String?, String?, Bool, Date, Int64).self)
        var item = ListedProfile(ProfileSummary((id, username, name, etag, verified)))
        stamp(&item, since)
        return (item, TimeCursor(micros: micros, id: id))
    }
}

/// A page of followers or following (`FollowStore.list`), prepared: a profile screen reads them,
/// and PostgreSQL spent twice as long planning the unnamed join as running it. `$1` is whose list
/// it is, `$2` the viewer, `$3` whether the viewer is staff, `$4` and `$5` the cursor's bounds,
/// `$6` the number of rows. What `FollowersPage` and `FollowingPage` share.
protocol FollowListPage: PostgresPreparedStatement where Row == (ListedProfile, TimeCursor) {
    var profile: UUID { get }
    var viewer: UUID { get }
    var viewerIsStaff: Bool { get }
    var micros: Int64 { get }
    var tie: UUID { get }
    var limit: Int { get }
}

extension FollowListPage {
    static var bindingDataTypes: [PostgresDataType] { [.uuid, .uuid, .bool, .int8, .uuid, .int8] }

    /// The page where `key` is the profile's column and `other` the listed people's.
    static func page(key: String, other: String) -> String {
        """
        SELECT \(ProfileSummary.columns), f.created_at, \(TimeCursor.micros("f.created_at"))
        FROM follows f JOIN profiles p ON p.user_id = f.\(other)
        WHERE f.\(key) = $1
          AND ($3 OR (p.hidden_at IS NULL AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = p.user_id AND b.blocked_id = $2)))
          AND (f.created_at, f.\(other)) < ('epoch'::timestamptz + $4 * interval '1 microsecond', $5)
        ORDER BY f.created_at DESC, f.\(other) DESC LIMIT $6
        """
    }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 6)
        bindings.append(profile)
        bindings.append(viewer)
        bindings.append(viewerIsStaff)
        bindings.append(micros)
        bindings.append(tie)
        bindings.append(Int64(limit))
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try FollowStore.listed(row) { $0.followedAt = $1 }
    }
}

struct FollowersPage: FollowListPage {
    static let name = "social.followers_page"
    static let sql = page(key: "followee_id", other: "follower_id")
    let profile: UUID, viewer: UUID, viewerIsStaff: Bool, micros: Int64, tie: UUID, limit: Int
}

struct FollowingPage: FollowListPage {
    static let name = "social.following_page"
    static let sql = page(key: "follower_id", other: "followee_id")
    let profile: UUID, viewer: UUID, viewerIsStaff: Bool, micros: Int64, tie: UUID, limit: Int
}

extension Relationship {
    /// From `FollowStore.relationshipFlags`' bits.
    init(flags: Int32) {
        (following, followedBy, requested, blocking, blockedBy, muting) =
            (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0, flags & 8 != 0, flags & 16 != 0, flags & 32 != 0)
    }
}

/// A change to `follows` and, only if it touched a row, the counts on both profiles by `delta`, in
/// one statement that returns rows only then: what `AddFollow` and `RemoveFollow` share.
protocol FollowCountChange: PostgresPreparedStatement where Row == Void {
    static var delta: Int32 { get }
    var follower: UUID { get }
    var followee: UUID { get }
}

extension FollowCountChange {
    static var bindingDataTypes: [PostgresDataType] { [.uuid, .uuid, .int4] }

    /// `change` (on `follows`, with $1 the follower and $2 the followee), then the counts by $3. The
    /// counts move in one UPDATE for both rows: it locks them in key order, so two follows in
    /// opposite directions cannot deadlock.
    static func adjustingCounts(after change: String) -> String {
        """
        WITH changed AS (\(change))
        UPDATE profiles SET
            followers_count = followers_count + CASE WHEN user_id = $2 THEN $3 ELSE 0 END,
            following_count = following_count + CASE WHEN user_id = $1 THEN $3 ELSE 0 END
        WHERE user_id = ANY(ARRAY[$1, $2]::uuid[]) AND EXISTS (SELECT 1 FROM changed)
        RETURNING true
        """
    }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(follower)
        bindings.append(followee)
        bindings.append(Self.delta)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws {}
}
