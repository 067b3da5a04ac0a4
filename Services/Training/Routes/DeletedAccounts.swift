import Foundation
import Logging
import PostgresNIO
import ServiceKit

extension Training {
    /// A deleted account's access token outlives it by up to 15 minutes, and a row made for it after
    /// `user.deleted` (settings, an exercise, a workout) would never be removed: `401
    /// account_deleted`, as social and nutrition answer it.
    static func refuseDeleted(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        if try await connection.isDeletedAccount(user, logger: logger) {
            throw APIError.unauthorized("This account has been deleted.", code: "account_deleted")
        }
    }
}
