import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// The queries on `profiles`, `avatars` and `deleted_accounts`. Every function runs on the caller's
/// connection, so a route composes them in one transaction with the events they cause.
struct ProfileStore: Sendable {
    static let columns = """
        user_id, username, display_name, bio, avatar_etag, is_verified, is_private, hidden_at, dietary_preferences, allergies::text, \
        favorite_cuisines, cooking_preferences::text, dietary_visibility, onboarding_answered, onboarding_skipped, followers_count, \
        following_count, created_at, updated_at
        """

    static func decode(_ rows: PostgresRowSequence) async throws -> [ProfileRecord] {
        var profiles: [ProfileRecord] = []
        for try await row in rows.decode(ProfileRecord.Columns.self) {
            profiles.append(try ProfileRecord(row))
        }
        return profiles
    }

    func find(id: UUID, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> ProfileRecord? {
        guard forUpdate else {
            for try await profile in try await connection.checkedExecute(ProfileByID(id: id), logger: logger) { return profile }
            return nil
        }
        return try await Self.decode(connection.checkedQuery("SELECT \(unescaped: Self.columns) FROM profiles WHERE user_id = \(id) FOR UPDATE", logger: logger)).first
    }

    /// Creates the profile if it does not exist, from `user.registered` or on a first request that came
    /// before the event. The primary key makes it once; a later event only fills what is still empty.
    /// `verified` is the badge of a new row; with `overwriteVerified` it also replaces an existing
    /// row's (from `user.roles_changed`, never from a token's possibly older roles).
    /// Returns false when the account was deleted (nothing is created).
    @discardableResult
    func ensure(id: UUID, displayName: String?, verified: Bool, overwriteVerified: Bool, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let name = displayName.map { String($0.trimmingCharacters(in: .whitespacesAndNewlines).prefix(50)) }.flatMap { $0.isEmpty ? nil : $0 }
        return try await connection.returnsRow(
            """
            INSERT INTO profiles (user_id, display_name, is_verified)
            SELECT \(id), \(name), \(verified)
            WHERE hold_live_account(\(id))
            ON CONFLICT (user_id) DO UPDATE SET
                display_name = coalesce(profiles.display_name, excluded.display_name),
                is_verified = CASE WHEN \(overwriteVerified) THEN excluded.is_verified ELSE profiles.is_verified END
            RETURNING true
            """, logger: logger)
    }

    /// Applies a checked edit; a taken username is `username_taken`.
    func update(_ id: UUID, with edit: ProfileEdit, on connection: PostgresConnection, logger: Logger) async throws -> ProfileRecord {
        var sets: [String] = []
        var bindings = PostgresBindings()
        func set(_ column: String, _ value: some PostgresEncodable & Sendable, cast: String = "") throws {
            try bindings.append(value)
            sets.append("\(column) = $\(bindings.count)\(cast)")
        }
        func setOptional(_ column: String, _ value: String?) {
            bindings.append(value)
            sets.append("\(column) = $\(bindings.count)")
        }
        var answered: [String] = []
        if let username = edit.username { try set("username", username) }
        if let displayName = edit.displayName { setOptional("display_name", displayName) }
        if let bio = edit.bio { setOptional("bio", bio) }
        if let isPrivate = edit.isPrivate { try set("is_private", isPrivate) }
        if let visibility = edit.dietaryVisibility { try set("dietary_visibility", visibility.rawValue) }
        if let diets = edit.dietaryPreferences { try set("dietary_preferences", diets); answered.append(OnboardingStep.dietaryPreferences.rawValue) }
        if let allergies = edit.allergies { try set("allergies", try Self.json(allergies), cast: "::jsonb"); answered.append(OnboardingStep.allergies.rawValue) }
        if let cuisines = edit.favoriteCuisines { try set("favorite_cuisines", cuisines); if !cuisines.isEmpty { answered.append(OnboardingStep.cuisines.rawValue) } }
        if let cooking = edit.cookingPreferences { try set("cooking_preferences", try Self.json(cooking), cast: "::jsonb") }
        if !answered.isEmpty {
            try bindings.append(answered)
            sets.append("onboarding_answered = ARRAY(SELECT DISTINCT unnest(onboarding_answered || $\(bindings.count)::text[]))")
        }
        bindings.append(id)
        let sql = "UPDATE profiles SET \(sets.joined(separator: ", ")), updated_at = now() WHERE user_id = $\(bindings.count) RETURNING \(Self.columns)"
        do {
            guard let profile = try await Self.decode(connection.checkedQuery(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger)).first else {
                throw APIError.notFound("No such profile.")
            }
            return profile
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            throw APIError(.conflict, code: "username_taken", detail: "The username \(edit.username ?? "") is taken.", errors: [.init(field: "username", message: "is taken")])
        }
    }

    func markSkipped(_ id: UUID, step: OnboardingStep, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            UPDATE profiles SET onboarding_skipped = ARRAY(SELECT DISTINCT unnest(onboarding_skipped || \([step.rawValue])::text[])), updated_at = now()
            WHERE user_id = \(id)
            """, logger: logger)
    }

    func setVerified(_ id: UUID, _ verified: Bool, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE profiles SET is_verified = \(verified), updated_at = now() WHERE user_id = \(id) AND is_verified <> \(verified)", logger: logger)
    }

    /// Hides or shows a profile; false when there is no such profile.
    func setHidden(_ id: UUID, _ hidden: Bool, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        return try await connection.returnsRow(
            """
            UPDATE profiles SET hidden_at = CASE WHEN \(hidden) THEN coalesce(hidden_at, now()) END, updated_at = now()
            WHERE user_id = \(id) RETURNING true
            """, logger: logger)
    }

    /// Profiles whose username or display name starts with `prefix`, leaving out hidden ones and
    /// people who block the caller; ordered by username.
    /// An unnamed statement, unlike the other busy reads: only a plan made for the pattern's value can
    /// use the prefix indexes.
    func search(prefix: String, viewer: UUID, viewerIsStaff: Bool, limit: Int, after: SearchCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [(ProfileSummary, String)] {
        let pattern = Self.likePrefix(prefix.lowercased())
        let afterKey = after?.key ?? ""
        let afterID = after?.id ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        let rows = try await connection.checkedQuery(
            """
            SELECT \(unescaped: ProfileSummary.columns), lower(coalesce(p.username, p.display_name, '') COLLATE "und-x-icu") AS sort_key
            FROM profiles p
            WHERE (lower(p.username) LIKE \(pattern) OR lower(p.display_name COLLATE "und-x-icu") LIKE \(pattern))
              AND (\(viewerIsStaff) OR (p.hidden_at IS NULL
                   AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = p.user_id AND b.blocked_id = \(viewer))))
              AND (lower(coalesce(p.username, p.display_name, '') COLLATE "und-x-icu"), p.user_id) > (\(afterKey), \(afterID))
            ORDER BY sort_key, p.user_id
            LIMIT \(limit + 1)
            """, logger: logger)
        var results: [(ProfileSummary, String)] = []
        for try await (id, username, name, etag, verified, key) in rows.decode((UUID, String?, String?, String?, Bool, String).self) {
            results.append((ProfileSummary((id, username, name, etag, verified)), key))
        }
        return results
    }

    /// `LIKE` pattern for a literal prefix (its `%`, `_` and `\` escaped).
    static func likePrefix(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_") + "%"
    }

    static func json(_ value: some Encodable) throws -> String {
        String(decoding: try APIJSON.encode(value), as: UTF8.self)
    }

    // MARK: avatars

    /// Stores the image; its ETag is the first half of its MD5 (a cache key, not a security check).
    func setAvatar(_ id: UUID, contentType: String, data: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            WITH stored AS (
                INSERT INTO avatars (user_id, content_type, data, etag)
                SELECT \(id), \(contentType), image, left(md5(image), 16) FROM (SELECT \(data)::bytea AS image) upload
                ON CONFLICT (user_id) DO UPDATE SET content_type = excluded.content_type, data = excluded.data, etag = excluded.etag, updated_at = now()
                RETURNING etag
            )
            UPDATE profiles SET avatar_etag = (SELECT etag FROM stored), updated_at = now() WHERE user_id = \(id)
            """, logger: logger)
    }

    func deleteAvatar(_ id: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM avatars WHERE user_id = \(id)", logger: logger)
        try await connection.checkedRun("UPDATE profiles SET avatar_etag = NULL, updated_at = now() WHERE user_id = \(id) AND avatar_etag IS NOT NULL", logger: logger)
    }

    func avatar(_ id: UUID, on connection: PostgresConnection, logger: Logger) async throws -> (contentType: String, data: ByteBuffer, etag: String)? {
        let rows = try await connection.checkedQuery("SELECT content_type, data, etag FROM avatars WHERE user_id = \(id)", logger: logger)
        for try await (type, data, etag) in rows.decode((String, ByteBuffer, String).self) { return (type, data, etag) }
        return nil
    }
}

/// Position in a search result list.
struct SearchCursor: Codable, Sendable {
    var key: String
    var id: UUID
}
