import Foundation
import Images
import Logging
import NIOCore
import PostgresNIO
import ServiceKit

/// A meal's stored photo: its bytes, type and ETag (the hex SHA-256 of the bytes), and whether the
/// reader is the meal's owner (else a coach of theirs).
struct StoredPhoto: Sendable {
    var data: ByteBuffer
    var contentType: String
    var etag: String
    var readByOwner = true
}

/// The queries on `meal_photos`. The meal's `photo_url` is the photo's API path while it has one.
/// That path is served to be checked again each time (`no-cache`, its ETag), so a replaced photo is
/// never shown from a cache; the same path with the photo's version (`?v=` and the start of its
/// ETag) may be kept for good by its owner. A meal's `photo_url` may name either, and both are
/// taken back as the meal's own photo; it is written as the path alone, which every build of the
/// service serving beside this one takes (docs/DEPLOY.md).
struct MealPhotoStore: Sendable {
    static func path(of meal: UUID) -> String { "/v1/meals/\(meal.uuidString.lowercased())/photo" }

    /// How much of the ETag (hex SHA-256) the URL carries: enough that two photos of a meal never
    /// share it.
    static let versionLength = 16

    /// Whether `url` is the meal's own photo's path, with a version or without (as a meal whose photo
    /// was kept before versions has it).
    static func isOwnPhoto(_ url: String, of meal: UUID) -> Bool {
        let path = path(of: meal)
        return url == path || url.hasPrefix(path + "?v=")
    }

    /// Keeps `image` as the meal's photo (replacing one it had) and points the meal's `photo_url` at
    /// it; a new version of the meal.
    func put(_ image: CleanImage, meal: UUID, user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO meal_photos (meal_id, user_id, content_type, data, etag, width, height)
            VALUES (\(meal), \(user), \(image.format.rawValue), \(image.bytes), encode(sha256(\(image.bytes)::bytea), 'hex'), \(image.width), \(image.height))
            ON CONFLICT (meal_id) DO UPDATE SET content_type = EXCLUDED.content_type, data = EXCLUDED.data, etag = EXCLUDED.etag,
              width = EXCLUDED.width, height = EXCLUDED.height, created_at = now()
            """, logger: logger)
        try await connection.checkedRun(
            "UPDATE meals SET photo_url = \(Self.path(of: meal)), version = version + 1, updated_at = now() WHERE id = \(meal)", logger: logger)
    }

    /// Removes the meal's photo and its `photo_url`; false when it had none.
    func delete(meal: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        guard try await connection.returnsRow("DELETE FROM meal_photos WHERE meal_id = \(meal) RETURNING 1", logger: logger) else { return false }
        try await connection.checkedRun(
            "UPDATE meals SET photo_url = NULL, version = version + 1, updated_at = now() WHERE id = \(meal) AND split_part(photo_url, '?', 1) = \(Self.path(of: meal))",
            logger: logger)
        return true
    }

    /// The photo of a meal `reader` may see: their own, or a client's they coach. Anyone else's, or
    /// none, is nil.
    func find(meal: UUID, reader: UUID, on connection: PostgresConnection, logger: Logger) async throws -> StoredPhoto? {
        let rows = try await connection.checkedQuery(
            """
            SELECT p.data, p.content_type, p.etag, p.user_id = \(reader) FROM meal_photos p
            WHERE p.meal_id = \(meal)
              AND (p.user_id = \(reader) OR EXISTS (SELECT 1 FROM coach_links l WHERE l.coach_id = \(reader) AND l.client_id = p.user_id))
            """, logger: logger)
        for try await (data, type, etag, owner) in rows.decode((ByteBuffer, String, String, Bool).self) {
            return StoredPhoto(data: data, contentType: type, etag: etag, readByOwner: owner)
        }
        return nil
    }
}
