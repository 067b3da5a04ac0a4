import Foundation
import Logging
import PostgresNIO
import ServiceKit

extension Training {
    /// A deleted account's access token outlives it by up to 15 minutes, and a row made for it after
    /// `user.deleted` (settings, an exercise, a workout) would never be removed: `401
    /// account_deleted`, as social and nutrition answer it.
    static func refuseDeleted(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        let hashed = user.uuidString.lowercased()
        if try await connection.returnsRow("SELECT 1 FROM deleted_accounts WHERE user_hash = sha256(convert_to(\(hashed), 'UTF8'))", logger: logger) {
            throw APIError.unauthorized("This account has been deleted.", code: "account_deleted")
        }
    }
}
