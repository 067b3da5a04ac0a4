import Foundation
import Logging
import PostgresNIO
import ServiceKitDatabase
import ServiceKitTokens

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
    func create(for meal: MealRecord, ttlDays: Int, on connection: PostgresConnection, logger: Logger) async throws -> (OpaqueToken, Date) {
        let token = OpaqueToken()
        let snapshot = ShareSnapshot(
            name: meal.name, localDate: meal.localDate, totals: meal.totals.rounded, dietScore: meal.score.score, scoreBand: meal.score.band, photoURL: meal.photoURL)
        let rows = try await connection.checkedQuery(
            """
            INSERT INTO shares (token_hash, meal_id, user_id, snapshot, expires_at)
            VALUES (\(token.hash), \(meal.id), \(meal.userID), \(try MealStore.json(snapshot))::jsonb, now() + \(ttlDays) * interval '1 day')
            RETURNING expires_at
            """, logger: logger)
        var expires = Date()
        for try await value in rows.decode(Date.self) { expires = value }
        return (token, expires)
    }

    /// Ends every live link of the meal; false when it had none.
    func revoke(meal: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            "UPDATE shares SET revoked_at = now() WHERE meal_id = \(meal) AND revoked_at IS NULL AND expires_at > now() RETURNING 1", logger: logger)
    }

    /// A deleted meal's links keep answering `410`, without their snapshot.
    func forgetMeal(_ meal: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE shares SET snapshot = '{}', revoked_at = coalesce(revoked_at, now()) WHERE meal_id = \(meal)", logger: logger)
    }

    func forgetUser(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE shares SET snapshot = '{}', user_id = NULL, revoked_at = coalesce(revoked_at, now()) WHERE user_id = \(user)", logger: logger)
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
            SELECT meal_id, snapshot::text, expires_at, revoked_at IS NULL AND expires_at > now() FROM shares WHERE token_hash = \(OpaqueToken.hash(token))
            """, logger: logger)
        var found: (UUID, String, Date, Bool)?
        for try await row in rows.decode((UUID, String, Date, Bool).self) { found = row }
        guard let (meal, snapshot, expires, live) = found else { return .unknown }
        guard live, let decoded = try? JSONDecoder().decode(ShareSnapshot.self, from: Data(snapshot.utf8)) else { return .gone }
        if counting { try await connection.checkedRun("UPDATE meals SET view_count = view_count + 1 WHERE id = \(meal)", logger: logger) }
        return .live(decoded, expiresAt: expires)
    }
}
