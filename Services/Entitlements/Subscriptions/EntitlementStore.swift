import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Everything one user's entitlement is derived from, read in one round trip: the customer's
/// token, their subscriptions, their grants and their usage.
struct EntitlementInputs: Sendable {
    var appAccountToken: UUID
    var subscriptions: [SubscriptionRecord]
    var grants: [GrantRecord]
    var used: [String: Int]
}

/// The reads behind `/me` and every check, and the customer rows they start from.
struct EntitlementStore: Sendable {
    /// Subscriptions and grants as JSON arrays beside the customer row: one query, however many
    /// a user has. Dates travel as epoch seconds.
    static let inputsQuery = """
        SELECT c.app_account_token,
          (SELECT coalesce(json_agg(json_build_object(
              'originalTransactionID', s.original_transaction_id, 'productID', s.product_id, 'environment', s.environment,
              'purchasedAt', extract(epoch FROM s.purchased_at), 'expiresAt', extract(epoch FROM s.expires_at),
              'revokedAt', extract(epoch FROM s.revoked_at), 'willRenew', s.will_renew, 'renewalProductID', s.renewal_product_id,
              'billingRetry', s.billing_retry, 'gracePeriodEndsAt', extract(epoch FROM s.grace_period_ends_at),
              'signedAt', extract(epoch FROM s.signed_at))), '[]')::text
           FROM subscriptions s WHERE s.user_id = c.user_id),
          (SELECT coalesce(json_agg(json_build_object(
              'id', g.id, 'tier', g.tier, 'until', extract(epoch FROM g.until), 'reason', g.reason, 'grantedBy', g.granted_by,
              'createdAt', extract(epoch FROM g.created_at), 'revokedAt', extract(epoch FROM g.revoked_at))), '[]')::text
           FROM grants g WHERE g.user_id = c.user_id AND g.revoked_at IS NULL),
          (SELECT coalesce(json_object_agg(u.counter, u.used), '{}')::text FROM usage_counters u WHERE u.user_id = c.user_id)
        FROM customers c
        """

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }()

    /// The user's inputs; the customer row (and its `appAccountToken`) is made on first sight.
    func inputs(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> EntitlementInputs {
        if let found = try await read(user, on: connection, logger: logger) { return found }
        try await ensureLiveCustomer(user, on: connection, logger: logger)
        return try await read(user, on: connection, logger: logger)!
    }

    /// `ensureCustomer` for a request of the user's own. A deleted account's token outlives it by up
    /// to 15 minutes, and a row made for it after `user.deleted` would never be removed: `401
    /// account_deleted`, as social and nutrition answer it. The statement holds the account
    /// (`hold_live_account`) until the transaction it runs in commits: a deletion running meanwhile
    /// waits, and then finds what the transaction wrote (a purchase's subscription).
    func ensureLiveCustomer(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        guard try await ensureCustomer(user, holdingLiveAccount: true, on: connection, logger: logger) else { throw APIError.accountDeleted }
    }

    private func read(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> EntitlementInputs? {
        for try await inputs in try await connection.checkedExecute(InputsByUser(user: user), logger: logger) { return inputs }
        return nil
    }

    /// `inputsQuery` prepared once per connection: every `/me` and check runs it, and as an unnamed
    /// statement PostgreSQL parsed and planned its three subqueries on each call.
    struct InputsByUser: OneParameterStatement {
        static let name = "entitlements.inputs_by_user"
        static let sql = EntitlementStore.inputsQuery + " WHERE c.user_id = $1"
        static let bindingDataTypes: [PostgresDataType] = [.uuid]
        typealias Row = EntitlementInputs

        var user: UUID
        var parameter: UUID { user }

        func decodeRow(_ row: PostgresRow) throws -> EntitlementInputs {
            let (token, subscriptions, grants, used) = try row.decode((UUID, String, String, String).self)
            return EntitlementInputs(
                appAccountToken: token,
                subscriptions: try EntitlementStore.decoder.decode([SubscriptionRecord].self, from: Data(subscriptions.utf8)),
                grants: try EntitlementStore.decoder.decode([GrantRecord].self, from: Data(grants.utf8)),
                used: try JSONDecoder().decode([String: Int].self, from: Data(used.utf8)))
        }
    }

    /// The version of the user's inputs (`entitlement_versions`), nil before their first change.
    func version(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Int64? {
        for try await version in try await connection.checkedExecute(VersionByUser(user: user), logger: logger) { return version }
        return nil
    }

    struct VersionByUser: OneParameterStatement {
        static let name = "entitlements.version_by_user"
        static let sql = "SELECT version FROM entitlement_versions WHERE user_id = $1"
        static let bindingDataTypes: [PostgresDataType] = [.uuid]
        typealias Row = Int64

        var user: UUID
        var parameter: UUID { user }

        func decodeRow(_ row: PostgresRow) throws -> Int64 { try row.decode(Int64.self) }
    }

    /// The customer row, made on first sight; an address given replaces the one known, and is proven
    /// when `verified` (a proven address stays proven until it changes).
    /// With `holdingLiveAccount`, only for an account not deleted, held until the transaction ends
    /// (`hold_live_account`); false when it was deleted.
    @discardableResult
    func ensureCustomer(
        _ user: UUID, email: String? = nil, verified: Bool = false, holdingLiveAccount: Bool = false, on connection: PostgresConnection, logger: Logger
    ) async throws -> Bool {
        try await connection.returnsRow(
            """
            INSERT INTO customers (user_id, app_account_token, email_normalized, email_verified)
            SELECT \(user), \(UUID()), \(email), \(verified && email != nil) WHERE CASE WHEN \(holdingLiveAccount) THEN hold_live_account(\(user)) ELSE true END
            ON CONFLICT (user_id) DO UPDATE SET
              email_verified = CASE WHEN EXCLUDED.email_normalized IS NULL THEN customers.email_verified
                                    WHEN EXCLUDED.email_normalized IS DISTINCT FROM customers.email_normalized THEN EXCLUDED.email_verified
                                    ELSE customers.email_verified OR EXCLUDED.email_verified END,
              email_normalized = coalesce(EXCLUDED.email_normalized, customers.email_normalized)
            RETURNING 1
            """, logger: logger)
    }

    /// Whether the account is known here: auth's `user.registered` (or the account's own first call)
    /// made its customer row. An id that names no account is not one to grant to or explain.
    func isCustomer(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM customers WHERE user_id = \(user)", logger: logger)
    }

    /// Whose `appAccountToken` this is, held until the transaction ends (`holdLiveAccount`), if
    /// anyone's: what the transaction then writes names them, and a deletion of their account
    /// running meanwhile waits for it and finds it. An account deleted meanwhile is no one's.
    func liveCustomer(withToken token: UUID, on connection: PostgresConnection, logger: Logger) async throws -> UUID? {
        guard let user = try await customer(withToken: token, on: connection, logger: logger),
            try await connection.holdLiveAccount(user, logger: logger)
        else { return nil }
        return user
    }

    /// Whose `appAccountToken` this is, if anyone's.
    func customer(withToken token: UUID, on connection: PostgresConnection, logger: Logger) async throws -> UUID? {
        let rows = try await connection.checkedQuery("SELECT user_id FROM customers WHERE app_account_token = \(token)", logger: logger)
        for try await user in rows.decode(UUID.self) { return user }
        return nil
    }

    /// The address's owner proved it for the first time: every purchase the account holds was made
    /// while its maker held it, and is paid by the maker's Apple ID, not the address. It goes back to
    /// nobody (kept for accounting), to be claimed by whoever restores it; and the account gets a new
    /// `appAccountToken`, so the maker's purchases, which carry the old one, no longer point here.
    func releasePurchases(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE subscriptions SET user_id = NULL, updated_at = now() WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("UPDATE transactions SET user_id = NULL WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("UPDATE customers SET app_account_token = \(UUID()) WHERE user_id = \(user)", logger: logger)
    }

    /// The usage the account's maker counted, once the address's owner has proven it: it counted
    /// things the maker made, which the owner cannot release (the acquisitions' ids are the maker's).
    /// The counters first: deleting one waits for an acquisition that holds its row, and the
    /// acquisitions' statement after it then sees that one's row too. The other way round, an
    /// acquisition committed meanwhile would outlive its counter, and releasing it later would
    /// take its amount from a count that never held it.
    func forgetUsage(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM usage_counters WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM usage_acquisitions WHERE user_id = \(user)", logger: logger)
    }

    func forget(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await forgetUsage(of: user, on: connection, logger: logger)
        try await connection.checkedRun("DELETE FROM grants WHERE user_id = \(user)", logger: logger)
        // Purchases stay for accounting, without the person: no user, no token.
        try await connection.checkedRun("UPDATE subscriptions SET user_id = NULL, app_account_token = NULL WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("UPDATE transactions SET user_id = NULL WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM customers WHERE user_id = \(user)", logger: logger)
        // Again: a grant made while this waited for the customer row (the grant route holds it) was
        // committed after the first delete read the table.
        try await connection.checkedRun("DELETE FROM grants WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM account_standing WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM entitlement_announcements WHERE user_id = \(user)", logger: logger)
        // Also left out at the commit by the triggers of the changes above, which find no customer.
        try await connection.checkedRun("DELETE FROM entitlement_versions WHERE user_id = \(user)", logger: logger)
        try await connection.recordDeletedAccount(user, logger: logger)
    }
}
