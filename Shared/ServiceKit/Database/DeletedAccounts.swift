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

    /// Holds `user`'s account until the transaction ends and says whether it is live, in one
    /// statement (`hold_live_account`, below): for a transaction that makes rows of the account, before
    /// it makes them. A deletion waits for the rows being made to commit, and its statements find
    /// them; what makes rows after it waits for it, and finds its tombstone. Otherwise rows committed
    /// while a deletion ran fall between its statements' snapshots and outlive the account.
    public func holdLiveAccount(_ user: UUID, logger: Logger) async throws -> Bool {
        var live = false
        for try await held in try await checkedExecute(AccountHold(parameter: user), logger: logger) { live = held }
        return live
    }

    /// Holds `user`'s account exclusively until the transaction ends: for what deletes its rows, which
    /// then waits for every transaction holding it live (`holdLiveAccount`) to commit. A transaction
    /// that may delete takes this first, never a live hold then this (two such would wait on each
    /// other). The key is the schema's and the account's, as `hold_live_account` makes it: services
    /// sharing a database do not wait on each other. (44224, 0xACC0: the accounts' own space of
    /// advisory locks, apart from any other's.)
    public func holdAccountForDeletion(_ user: UUID, logger: Logger) async throws {
        let key = user.uuidString.lowercased()
        try await checkedRun("SELECT pg_advisory_xact_lock(44224, hashtext(current_schema() || ':' || \(key)))", logger: logger)
    }

    /// Leaves the tombstone of `user`'s account; once is enough. The answers kept for the account's
    /// retries go with it (`forgetKeptAnswers`); so do the marks of the latest events applied about
    /// it (`event_latest`), which name it. Answers kept for other accounts' retries that name it (a
    /// coach's comment in a client's logged session) are withheld (`withholdKeptAnswers`).
    public func recordDeletedAccount(_ user: UUID, logger: Logger) async throws {
        try await forgetKeptAnswers(of: user, logger: logger)
        try await withholdKeptAnswers(naming: user, logger: logger)
        try await checkedRun("DELETE FROM event_latest WHERE subject = \(user)", logger: logger)
        try await checkedRun(
            "INSERT INTO deleted_accounts (user_hash) VALUES (sha256(convert_to(\(user.uuidString.lowercased()), 'UTF8'))) ON CONFLICT DO NOTHING",
            logger: logger)
    }
}

extension PostgresConnection {
    /// Forgets the answers kept for `user`'s retried requests (`idempotency_keys`, in every
    /// service's schema): they hold what the account wrote, which goes when the account does, or
    /// when the address's owner drops what its maker made (`maker_dropped`); they would otherwise
    /// stay until a later request's sweep reached them. With `madeBefore` (the account lives on, and
    /// changed hands then), every answered key goes, as the rows it answered for went with the
    /// purge (a retry makes them again), and so does a key still running that was claimed before
    /// then: the maker's. One claimed since is the new owner's request, still running: it stays, or
    /// a retry would run it again beside it.
    public func forgetKeptAnswers(of user: UUID, madeBefore: Date? = nil, logger: Logger) async throws {
        if let madeBefore {
            try await checkedRun(
                "DELETE FROM idempotency_keys WHERE user_id = \(user) AND (status IS NOT NULL OR created_at < \(madeBefore))", logger: logger)
        } else {
            try await checkedRun("DELETE FROM idempotency_keys WHERE user_id = \(user)", logger: logger)
        }
    }

    /// Withholds the answers kept for other accounts' retries that name `user` (its id, as every
    /// body writes ids: lowercase): only their status stays, as for an answer that held a secret, so
    /// a retry with the key is `409 idempotency_answer_withheld`, neither shown what went with the
    /// account nor run again (a second comment, a second log). A request still running (its route
    /// may have read the account before the deletion) keeps only its status when it ends: there is
    /// no telling yet what its answer will name, and few run at any one moment. Answers are kept for
    /// a day, and an account is deleted once: the table is read through, there being no index on
    /// what a body says.
    public func withholdKeptAnswers(naming user: UUID, logger: Logger) async throws {
        try await checkedRun(
            """
            UPDATE idempotency_keys SET headers = '', body = NULL, withheld = true
            WHERE status IS NULL OR (body IS NOT NULL AND position(convert_to(\(user.uuidString.lowercased()), 'UTF8') IN body) > 0)
            """, logger: logger)
    }
}

/// `holdLiveAccount`, before most writes of a user's rows: prepared once per connection.
public struct AccountHold: OneParameterStatement {
    public static let name = "deleted_accounts.hold"
    public static let sql = "SELECT hold_live_account($1)"
    public static let bindingDataTypes: [PostgresDataType] = [.uuid]
    public typealias Row = Bool

    public let parameter: UUID

    public func decodeRow(_ row: PostgresRow) throws -> Bool { try row.decode(Bool.self) }
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

/// The kit's function for `holdLiveAccount`, in every service's schema. A statement that makes a row
/// of an account without a transaction around it calls it in its own condition (`INSERT … SELECT …
/// WHERE hold_live_account($1)`): the hold lasts until that statement commits. It is volatile, so the
/// tombstone check inside it reads with a snapshot of its own, taken after the lock is granted; the
/// calling statement's snapshot, taken before a deletion it waited for committed, would miss the
/// tombstone. It runs with the schema it was made in, whoever calls it.
package enum DeletedAccountsSchema {
    package static let migrations = [
        Migration(
            name: "0000_account_hold",
            sql: """
                CREATE FUNCTION hold_live_account(account uuid) RETURNS boolean
                    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
                BEGIN
                    PERFORM pg_advisory_xact_lock_shared(44224, hashtext(current_schema() || ':' || account::text));
                    RETURN NOT EXISTS (SELECT 1 FROM deleted_accounts WHERE user_hash = sha256(convert_to(account::text, 'UTF8')));
                END $$;
                """)
    ]
}
