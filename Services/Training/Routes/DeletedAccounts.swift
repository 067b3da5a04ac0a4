import Foundation
import Logging
import PostgresNIO
import ServiceKit

extension Training {
    /// A deleted account's access token outlives it by up to 15 minutes, and a row made for it after
    /// `user.deleted` (settings, an exercise, a workout, a comment) would never be removed: `401
    /// account_deleted`, as social and nutrition answer it. Inside the transaction that makes the
    /// row: the account is held until it commits, so a deletion running meanwhile finds the row.
    static func holdLiveAccount(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        guard try await connection.holdLiveAccount(user, logger: logger) else {
            throw APIError.unauthorized("This account has been deleted.", code: "account_deleted")
        }
    }
}
