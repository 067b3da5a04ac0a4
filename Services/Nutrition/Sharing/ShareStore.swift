import Foundation
import Logging
import NIOCore
import PostgresNIO
import ServiceKit

/// What a share link shows: taken when the link was made, without the user, their notes or ids.
struct ShareSnapshot: Codable, Sendable {
    var name: String
    var localDate: String
    var totals: NutrientTotals
    var dietScore: Int
    var scoreBand: String
    var photoURL: String?

    enum CodingKeys: String, CodingKey {
        case name, localDate = "local_date", totals, dietScore = "diet_score", scoreBand = "score_band", photoURL = "photo_url"
    }
}

/// Share links: tokens stored as their SHA-256 only.
struct ShareStore: Sendable {
    /// Live links one meal may have at once: each keeps a copy of the photo.
    static let maxLiveLinks = 10
    static let limitReached = APIError.conflict(
        "This meal has \(maxLiveLinks) live share links; revoke them (DELETE /v1/meals/{id}/share) to make another.", code: "share_limit")

    /// The snapshot keeps a copy of the meal's stored photo, served at `/v1/shared/{token}/photo`
    /// while the link lives (the owner's own photo path is not for anyone else); a photo URL the app
    /// set elsewhere is kept as it was.
    /// At most `maxLiveLinks` at once (`409 share_limit`); the copies its expired links kept go
    /// first. The caller holds the meal's row, so two links made at once count each other.
    func create(for meal: MealRecord, ttlDays: Int, on connection: PostgresConnection, logger: Logger) async throws -> (OpaqueToken, Date) {
        try await dropExpiredCopies(of: meal.id, on: connection, logger: logger)
        let live = try await connection.checkedQuery(
            "SELECT count(*) FROM shares WHERE meal_id = \(meal.id) AND revoked_at IS NULL AND expires_at > now()", logger: logger)
        for try await count in live.decode(Int.self) where count >= Self.maxLiveLinks { throw Self.limitReached }
        let token = OpaqueToken()
        let hasPhoto = try await connection.returnsRow("SELECT 1 FROM meal_photos WHERE meal_id = \(meal.id)", logger: logger)
        // A photo kept with the link is named when the link is opened, from its token: the token is
        // kept nowhere but as its hash.
        let photoURL = hasPhoto ? nil : meal.photoURL.flatMap { $0.hasPrefix("/v1/meals/") ? nil : $0 }
        let snapshot = ShareSnapshot(
            name: meal.name, localDate: meal.localDate, totals: meal.totals.rounded, dietScore: meal.score.score, scoreBand: meal.score.band, photoURL: photoURL)
        let rows = try await connection.checkedQuery(
            """
            INSERT INTO shares (token_hash, meal_id, user_id, snapshot, expires_at, photo, photo_type, photo_etag)
            SELECT \(token.hash), \(meal.id), \(meal.userID), \(try MealStore.json(snapshot))::jsonb, now() + \(ttlDays) * interval '1 day',
                   p.data, p.content_type, p.etag
            FROM (SELECT 1) one LEFT JOIN meal_photos p ON p.meal_id = \(meal.id)
            RETURNING expires_at
            """, logger: logger)
        var expires = Date()
        for try await value in rows.decode(Date.self) { expires = value }
        return (token, expires)
    }

    /// An expired link serves nothing: the photo and card it kept go (when the meal's links are
    /// next made or revoked), so that they neither pile up nor outlive what the owner can remove.
    func dropExpiredCopies(of meal: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            UPDATE shares SET card_png = NULL, card_etag = NULL, photo = NULL, photo_type = NULL, photo_etag = NULL
            WHERE meal_id = \(meal) AND expires_at <= now() AND (photo IS NOT NULL OR card_png IS NOT NULL)
            """, logger: logger)
    }

    /// Ends every live link of the meal (and lets its kept card and photo go, the expired links'
    /// too); false when it had no live one.
    func revoke(meal: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await dropExpiredCopies(of: meal, on: connection, logger: logger)
        return try await connection.returnsRow(
            """
            UPDATE shares SET revoked_at = now(), card_png = NULL, card_etag = NULL, photo = NULL, photo_type = NULL, photo_etag = NULL
            WHERE meal_id = \(meal) AND revoked_at IS NULL AND expires_at > now() RETURNING 1
            """, logger: logger)
    }

    /// A deleted meal's links keep answering `410`, without their snapshot or card.
    func forgetMeal(_ meal: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE shares SET snapshot = '{}', card_png = NULL, card_etag = NULL, photo = NULL, photo_type = NULL, photo_etag = NULL, revoked_at = coalesce(revoked_at, now()) WHERE meal_id = \(meal)",
            logger: logger)
    }

    func forgetUser(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            UPDATE shares SET snapshot = '{}', card_png = NULL, card_etag = NULL, photo = NULL, photo_type = NULL, photo_etag = NULL, user_id = NULL, revoked_at = coalesce(revoked_at, now())
            WHERE user_id = \(user)
            """, logger: logger)
    }

    /// A link's card as kept: the PNG and its ETag (the hex SHA-256 of its bytes).
    struct KeptCard: Sendable {
        var png: ByteBuffer
        var etag: String
    }

    enum CardLookup: Sendable {
        case live(ShareSnapshot, card: KeptCard?, photo: ByteBuffer?, expiresAt: Date)
        case gone
        case unknown
    }

    /// The snapshot behind a live link and its card if one was kept; an ended link is `gone`
    /// whatever was kept, so a card is never served past its link.
    func card(_ token: String, on connection: PostgresConnection, logger: Logger) async throws -> CardLookup {
        guard token.utf8.count <= 128 else { return .unknown }
        let rows = try await connection.checkedQuery(
            """
            SELECT snapshot::text, expires_at, revoked_at IS NULL AND expires_at > now(), card_png, card_etag, CASE WHEN card_png IS NULL THEN photo END
            FROM shares WHERE token_hash = \(OpaqueToken.hash(token))
            """, logger: logger)
        var found: (String, Date, Bool, ByteBuffer?, String?, ByteBuffer?)?
        for try await row in rows.decode((String, Date, Bool, ByteBuffer?, String?, ByteBuffer?).self) { found = row }
        guard let (snapshot, expires, live, png, etag, photo) = found else { return .unknown }
        guard live, let decoded = try? JSONDecoder().decode(ShareSnapshot.self, from: Data(snapshot.utf8)) else { return .gone }
        let kept = png.flatMap { png in etag.map { KeptCard(png: png, etag: $0) } }
        return .live(decoded, card: kept, photo: photo, expiresAt: expires)
    }

    /// Keeps a card drawn for a live link that has none yet, and gives its ETag. Two first requests
    /// at once both draw; the first to get here is kept (cards of one snapshot are the same bytes).
    func keepCard(_ token: String, png: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws -> KeptCard {
        let rows = try await connection.checkedQuery(
            """
            WITH drawn AS (SELECT image, encode(sha256(image), 'hex') AS etag FROM (SELECT \(png)::bytea AS image) upload),
            kept AS (
                UPDATE shares SET card_png = drawn.image, card_etag = drawn.etag FROM drawn
                WHERE token_hash = \(OpaqueToken.hash(token)) AND card_png IS NULL AND revoked_at IS NULL AND expires_at > now()
                RETURNING 1
            )
            SELECT etag FROM drawn
            """, logger: logger)
        var etag = ""
        for try await value in rows.decode(String.self) { etag = value }
        return KeptCard(png: png, etag: etag)
    }

    /// A live link's copy of its meal's photo: its bytes, type and ETag.
    struct SharedPhoto: Sendable {
        var data: ByteBuffer
        var contentType: String
        var etag: String
    }

    enum PhotoLookup: Sendable {
        case live(SharedPhoto?, expiresAt: Date)
        case gone
        case unknown
    }

    /// The photo kept with a link; an ended link is `gone` whatever was kept.
    func photo(_ token: String, on connection: PostgresConnection, logger: Logger) async throws -> PhotoLookup {
        guard token.utf8.count <= 128 else { return .unknown }
        let rows = try await connection.checkedQuery(
            """
            SELECT expires_at, revoked_at IS NULL AND expires_at > now() AND snapshot <> '{}', photo, photo_type, photo_etag
            FROM shares WHERE token_hash = \(OpaqueToken.hash(token))
            """, logger: logger)
        var found: (Date, Bool, ByteBuffer?, String?, String?)?
        for try await row in rows.decode((Date, Bool, ByteBuffer?, String?, String?).self) { found = row }
        guard let (expires, live, data, type, etag) = found else { return .unknown }
        guard live else { return .gone }
        guard let data, let type, let etag else { return .live(nil, expiresAt: expires) }
        return .live(SharedPhoto(data: data, contentType: type, etag: etag), expiresAt: expires)
    }

    enum Lookup: Sendable {
        case live(ShareSnapshot, expiresAt: Date)
        case gone
        case unknown
    }

    /// The snapshot behind a token, counting the view on its meal when `counting`.
    func open(_ token: String, counting: Bool, on connection: PostgresConnection, logger: Logger) async throws -> Lookup {
        guard token.utf8.count <= 128 else { return .unknown }
        let rows = try await connection.checkedQuery(
            """
            SELECT meal_id, snapshot::text, expires_at, revoked_at IS NULL AND expires_at > now(), photo IS NOT NULL
            FROM shares WHERE token_hash = \(OpaqueToken.hash(token))
            """, logger: logger)
        var found: (UUID, String, Date, Bool, Bool)?
        for try await row in rows.decode((UUID, String, Date, Bool, Bool).self) { found = row }
        guard let (meal, snapshot, expires, live, keptPhoto) = found else { return .unknown }
        guard live, var decoded = try? JSONDecoder().decode(ShareSnapshot.self, from: Data(snapshot.utf8)) else { return .gone }
        if keptPhoto { decoded.photoURL = "/v1/shared/\(token)/photo" }
        if counting { try await connection.checkedRun("UPDATE meals SET view_count = view_count + 1 WHERE id = \(meal)", logger: logger) }
        return .live(decoded, expiresAt: expires)
    }
}
