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

    /// Holds `user`'s account until the transaction ends: shared by what makes rows of it (which asks
    /// `isDeletedAccount` after), exclusive by what deletes them. A deletion then waits for the rows
    /// being made to commit, and its statements find them; what makes rows after it waits for it, and
    /// finds its tombstone. Otherwise rows committed while a deletion ran fall between its
    /// statements' snapshots and outlive the account. A transaction that may delete takes it
    /// exclusive first, never shared then exclusive (two such would wait on each other). The key is
    /// the schema's and the account's: services sharing a database do not wait on each other.
    /// (44224, 0xACC0: the accounts' own space of advisory locks, apart from any other's.)
    public func holdAccount(_ user: UUID, exclusive: Bool = false, logger: Logger) async throws {
        let key = user.uuidString.lowercased()
        if exclusive {
            try await checkedRun("SELECT pg_advisory_xact_lock(44224, hashtext(current_schema() || ':' || \(key)))", logger: logger)
        } else {
            try await checkedRun("SELECT pg_advisory_xact_lock_shared(44224, hashtext(current_schema() || ':' || \(key)))", logger: logger)
        }
    }

    /// Leaves the tombstone of `user`'s account; once is enough. The answers kept for the account's
    /// retries (`idempotency_keys`, in every service's schema) go with it: they hold what it wrote.
    public func recordDeletedAccount(_ user: UUID, logger: Logger) async throws {
        try await checkedRun("DELETE FROM idempotency_keys WHERE user_id = \(user)", logger: logger)
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
