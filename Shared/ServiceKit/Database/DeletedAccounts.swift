import Foundation
import Logging
import PostgresNIO

// Every service that keeps rows of a user keeps a tombstone for each account auth deleted, in its own
// schema's `deleted_accounts (user_hash bytea PRIMARY KEY)`: the SHA-256 of the id's lower-case
// text, so that no row names a deleted account. A deleted account's access token outlives it by up
// to 15 minutes, and a late event about it must not make its rows again; both ask this table.

extension PostgresConnection {
    /// Whether auth deleted `user`'s account.
    public func isDeletedAccount(_ user: UUID, logger: Logger) async throws -> Bool {
        try await returnsRow(DeletedAccountCheck(parameter: user.uuidString.lowercased()), logger: logger)
    }

    /// Leaves the tombstone of `user`'s account; once is enough.
    public func recordDeletedAccount(_ user: UUID, logger: Logger) async throws {
        try await checkedRun(
            "INSERT INTO deleted_accounts (user_hash) VALUES (sha256(convert_to(\(user.uuidString.lowercased()), 'UTF8'))) ON CONFLICT DO NOTHING",
            logger: logger)
    }
}

/// The check runs before a user's first row is made (a request, an event about them): prepared once
/// per connection, as PostgreSQL otherwise parses and plans it each time.
public struct DeletedAccountCheck: OneParameterStatement {
    public static let name = "deleted_accounts.check"
    public static let sql = "SELECT 1 FROM deleted_accounts WHERE user_hash = sha256(convert_to($1, 'UTF8'))"
    public static let bindingDataTypes: [PostgresDataType] = [.text]
    public typealias Row = Void

    public let parameter: String

    public func decodeRow(_ row: PostgresRow) throws {}
}
