import AppStoreServer
import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// The App Store's side: subscriptions, the transactions that set them, the notifications received.
struct SubscriptionStore: Sendable {
    /// Whether sandbox payloads apply (`EntitlementsSettings.acceptsSandbox`); when not, a sandbox
    /// notification is recorded and acknowledged, and changes no subscription.
    var acceptsSandbox = true

    /// A subscription's holder and the transaction that set its state.
    struct Holder: Sendable {
        var user: UUID?
        var signedAt: Date
        var transactionID: String
        var expiresAt: Date?
    }

    /// The subscription's current holder, locked until the transaction ends: the payloads of one
    /// subscription apply one after the other.
    func holder(_ originalTransactionID: String, on connection: PostgresConnection, logger: Logger) async throws -> Holder? {
        let rows = try await connection.checkedQuery(
            "SELECT user_id, signed_at, transaction_id, expires_at FROM subscriptions WHERE original_transaction_id = \(originalTransactionID) FOR UPDATE",
            logger: logger)
        for try await (user, signedAt, transaction, expires) in rows.decode((UUID?, Date, String, Date?).self) {
            return Holder(user: user, signedAt: signedAt, transactionID: transaction, expiresAt: expires)
        }
        return nil
    }

    /// Applies a verified transaction (and the renewal info that came with it) to its subscription,
    /// unless what set the subscription was signed at or after `signedAt`: a late or repeated
    /// payload changes nothing. The transaction and the renewal info are each compared with what
    /// last set their own part: a notification about an older period, whose transaction is not
    /// taken, still brings the current renewal info, and must not make the current period's
    /// notifications signed before it look stale. Returns whether it applied. Device transactions carry no renewal
    /// info; the renewal fields then stay as they were. Another transaction of the subscription
    /// replaces the current one only if it was bought at or after it: an older period signed again
    /// later (a restore's history, a refund of a past renewal) leaves the current period alone,
    /// and an upgrade (a higher tier bought now, Apple refunding the rest of the old period) takes
    /// over however soon it ends. A transaction Apple marks as replaced by an upgrade never does.
    /// `current` is the subscription as `holder` read and locked it.
    func apply(
        _ transaction: AppStoreTransaction, renewal: AppStoreRenewalInfo?, signedAt: Date, user: UUID?, via: String, current: Holder?,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> Bool {
        guard applies(transaction.environment, transaction.originalTransactionID, logger: logger) else { return false }
        // The app's account token is kept only for a purchase of a known account: a deleted
        // account's subscription goes on renewing at Apple, and each renewal carries its token.
        let token = user == nil ? nil : transaction.appAccountToken
        try await connection.checkedRun(
            """
            INSERT INTO transactions (transaction_id, signed_at, original_transaction_id, user_id, product_id, purchased_at, expires_at, revoked_at, environment, received_via)
            VALUES (\(transaction.transactionID), \(transaction.signedDate), \(transaction.originalTransactionID), \(user), \(transaction.productID),
                    \(transaction.purchaseDate), \(transaction.expiresDate), \(transaction.revocationDate), \(transaction.environment.rawValue), \(via))
            ON CONFLICT DO NOTHING
            """, logger: logger)
        // A transaction an upgrade replaced gives nothing, even as the first payload of its
        // subscription seen here (a restore's history, a notification about the old plan): the
        // upgrade's own transaction, under the same original id, makes the subscription.
        if transaction.isUpgraded == true, current == nil {
            guard let renewal else { return false }
            return try await applyRenewal(renewal, signedAt: signedAt, on: connection, logger: logger)
        }
        let inserted = try await connection.returnsRow(
            """
            INSERT INTO subscriptions (original_transaction_id, user_id, product_id, environment, app_account_token, transaction_id, purchased_at, expires_at,
                                       revoked_at, revocation_reason, will_renew, renewal_product_id, billing_retry, grace_period_ends_at, signed_at,
                                       renewal_signed_at)
            VALUES (\(transaction.originalTransactionID), \(user), \(transaction.productID), \(transaction.environment.rawValue), \(token),
                    \(transaction.transactionID), \(transaction.purchaseDate), \(transaction.expiresDate), \(transaction.revocationDate), \(transaction.revocationReason),
                    \(renewal.map { $0.autoRenewStatus == 1 }), \(renewal?.autoRenewProductID), \(renewal?.isInBillingRetryPeriod ?? false),
                    \(renewal?.gracePeriodExpiresDate), \(signedAt), \(renewal.map { _ in signedAt }))
            ON CONFLICT (original_transaction_id) DO NOTHING
            RETURNING 1
            """, logger: logger)
        if inserted { return true }
        // Made beside this one (a first notification and a first purchase at once): read as it is
        // now, locked, so that an older period is weighed against the one it holds.
        var held = current
        if held == nil { held = try await holder(transaction.originalTransactionID, on: connection, logger: logger) }
        // Whoever claims a subscription nobody holds (one a notification made first, without a
        // token) takes it, whatever the dates.
        if let user, held?.user == nil {
            try await connection.checkedRun(
                "UPDATE subscriptions SET user_id = \(user) WHERE original_transaction_id = \(transaction.originalTransactionID) AND user_id IS NULL", logger: logger)
            try await connection.checkedRun(
                "UPDATE transactions SET user_id = \(user) WHERE original_transaction_id = \(transaction.originalTransactionID) AND user_id IS NULL", logger: logger)
        }
        var renewalApplied = false
        if let renewal { renewalApplied = try await applyRenewal(renewal, signedAt: signedAt, on: connection, logger: logger) }
        guard transaction.isUpgraded != true else { return renewalApplied }
        // The purchase dates are compared by PostgreSQL, not here: a date read back from a
        // `timestamptz` has been cut to microseconds, and can be a hair later than the same
        // millisecond read from a payload, which made a transaction of the same period look older.
        let transactionApplied = try await connection.returnsRow(
            """
            UPDATE subscriptions SET
              product_id = \(transaction.productID), environment = \(transaction.environment.rawValue),
              app_account_token = coalesce(\(token), app_account_token), transaction_id = \(transaction.transactionID),
              purchased_at = \(transaction.purchaseDate), expires_at = \(transaction.expiresDate), revoked_at = \(transaction.revocationDate),
              revocation_reason = \(transaction.revocationReason), signed_at = \(signedAt), updated_at = now()
            WHERE original_transaction_id = \(transaction.originalTransactionID) AND signed_at < \(signedAt)
              AND (transaction_id = \(transaction.transactionID) OR purchased_at <= \(transaction.purchaseDate))
            RETURNING 1
            """, logger: logger)
        return transactionApplied || renewalApplied
    }

    /// The renewal fields, unless the renewal info they hold was signed at or after `signedAt`. A
    /// subscription that holds none takes any: a transaction signed later (a purchase the app sent)
    /// says nothing of renewals.
    func applyRenewal(_ renewal: AppStoreRenewalInfo, signedAt: Date, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        guard applies(renewal.environment, renewal.originalTransactionID, logger: logger) else { return false }
        return try await connection.returnsRow(
            """
            UPDATE subscriptions SET will_renew = \(renewal.autoRenewStatus == 1), renewal_product_id = \(renewal.autoRenewProductID),
              billing_retry = \(renewal.isInBillingRetryPeriod ?? false), grace_period_ends_at = \(renewal.gracePeriodExpiresDate),
              renewal_signed_at = \(signedAt), updated_at = now()
            WHERE original_transaction_id = \(renewal.originalTransactionID) AND (renewal_signed_at IS NULL OR renewal_signed_at < \(signedAt))
            RETURNING 1
            """, logger: logger)
    }

    /// Whether a payload from `environment` may change a subscription; a sandbox one refused is logged.
    func applies(_ environment: AppStoreEnvironment, _ originalTransactionID: String, logger: Logger) -> Bool {
        guard environment == .sandbox, !acceptsSandbox else { return true }
        logger.notice(
            "sandbox payload not applied: APPLE_ACCEPT_SANDBOX is off in production", metadata: ["original_transaction_id": "\(originalTransactionID)"])
        return false
    }

    /// Moves a subscription (and its transactions) to `user`.
    func transfer(_ originalTransactionID: String, to user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE subscriptions SET user_id = \(user), updated_at = now() WHERE original_transaction_id = \(originalTransactionID)", logger: logger)
        try await connection.checkedRun("UPDATE transactions SET user_id = \(user) WHERE original_transaction_id = \(originalTransactionID)", logger: logger)
    }

    /// Records a notification by its UUID; false when it was already recorded (a redelivery).
    func record(_ notification: AppStoreNotification, originalTransactionID: String?, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            """
            INSERT INTO notifications (notification_uuid, notification_type, subtype, original_transaction_id, environment, signed_at, applied)
            VALUES (\(notification.notificationUUID), \(notification.notificationType), \(notification.subtype), \(originalTransactionID),
                    \(notification.data?.environment.rawValue), \(notification.signedDate), false)
            ON CONFLICT (notification_uuid) DO NOTHING
            RETURNING 1
            """, logger: logger)
    }

    func markApplied(_ notificationUUID: String, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE notifications SET applied = true WHERE notification_uuid = \(notificationUUID)", logger: logger)
    }

    struct HistoryEntry: Sendable, Encodable {
        var at: Date
        var kind: String
        var detail: [String: String]
    }

    /// What happened to a user's purchases, oldest first: transactions received and notifications
    /// about their subscriptions.
    func history(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [HistoryEntry] {
        var entries: [HistoryEntry] = []
        let transactions = try await connection.checkedQuery(
            """
            SELECT t.signed_at, t.transaction_id, t.original_transaction_id, t.product_id, t.expires_at, t.revoked_at, t.environment, t.received_via
            FROM transactions t WHERE t.original_transaction_id IN (SELECT original_transaction_id FROM subscriptions WHERE user_id = \(user))
            ORDER BY t.signed_at
            """, logger: logger)
        for try await (signed, id, original, product, expires, revoked, environment, via) in transactions.decode(
            (Date, String, String, String, Date?, Date?, String, String).self)
        {
            var detail = ["transaction_id": id, "original_transaction_id": original, "product_id": product, "environment": environment, "received_via": via]
            if let expires { detail["expires_at"] = ISO8601DateFormatter().string(from: expires) }
            if let revoked { detail["revoked_at"] = ISO8601DateFormatter().string(from: revoked) }
            entries.append(HistoryEntry(at: signed, kind: "transaction", detail: detail))
        }
        let notifications = try await connection.checkedQuery(
            """
            SELECT n.signed_at, n.notification_uuid, n.notification_type, n.subtype, n.original_transaction_id, n.applied
            FROM notifications n WHERE n.original_transaction_id IN (SELECT original_transaction_id FROM subscriptions WHERE user_id = \(user))
            ORDER BY n.signed_at
            """, logger: logger)
        for try await (signed, id, type, subtype, original, applied) in notifications.decode((Date, String, String, String?, String?, Bool).self) {
            var detail = ["notification_uuid": id, "type": type, "applied": applied ? "true" : "false (older than what was already applied)"]
            if let subtype { detail["subtype"] = subtype }
            if let original { detail["original_transaction_id"] = original }
            entries.append(HistoryEntry(at: signed, kind: "notification", detail: detail))
        }
        let grants = try await connection.checkedQuery(
            "SELECT id, tier, until, reason, granted_by, created_at, revoked_at, revoked_by FROM grants WHERE user_id = \(user)", logger: logger)
        for try await (id, tier, until, reason, by, created, revoked, revokedBy) in grants.decode((UUID, String, Date, String, UUID, Date, Date?, UUID?).self) {
            let grant = id.uuidString.lowercased()
            entries.append(
                HistoryEntry(
                    at: created, kind: "grant",
                    detail: ["grant_id": grant, "tier": tier, "until": ISO8601DateFormatter().string(from: until), "reason": reason, "granted_by": by.uuidString.lowercased()]))
            if let revoked {
                entries.append(
                    HistoryEntry(at: revoked, kind: "grant_revoked", detail: ["grant_id": grant, "revoked_by": revokedBy?.uuidString.lowercased() ?? "unknown"]))
            }
        }
        return entries.sorted { $0.at < $1.at }
    }
}
