import Foundation
import Logging
import PostgresNIO
import ServiceKitDatabase

extension APIError {
    /// A deleted account's access token outlives it by up to 15 minutes: what it asks for meanwhile
    /// is refused with this, by every service alike.
    public static let accountDeleted = APIError.unauthorized("This account has been deleted.", code: "account_deleted")
}

extension PostgresConnection {
    /// For a request's transaction that makes rows of `user`'s account: the account is held until the
    /// transaction commits (`holdLiveAccount`), so a deletion running meanwhile waits and then finds
    /// the rows, or the request is refused with `401 account_deleted`.
    public func requireLiveAccount(_ user: UUID, logger: Logger) async throws {
        guard try await holdLiveAccount(user, logger: logger) else { throw APIError.accountDeleted }
    }
}
