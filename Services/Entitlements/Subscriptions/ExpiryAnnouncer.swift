import Foundation
import Logging
import PostgresNIO
import ServiceKit
import ServiceLifecycle

/// Announces the entitlements that change with no request: by the clock (a subscription's end or the
/// end of its grace period, a grant's end), or by a start with the other `APPLE_ACCEPT_SANDBOX` (a
/// sandbox purchase that counted no longer does, or the reverse). Apple's notification of an end
/// (EXPIRED, GRACE_PERIOD_EXPIRED) comes after it, when the entitlement already reads as ended: the
/// other services (nutrition's daily allowances) would keep the paid caps. Every `interval` it takes
/// the users whose recorded next change has come or who were announced under the other setting
/// (`entitlement_announcements`), a batch at a time, skipping rows a replica holds, and announces
/// those whose entitlement now differs from what was announced.
struct ExpiryAnnouncer: Service {
    let entitlements: Entitlements
    let interval: Duration
    let logger: Logger

    static let batchSize = 100

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    while try await sweep() == Self.batchSize {}
                } catch {
                    logger.warning("announcing changed entitlements failed; trying again", metadata: ["error": "\(String(reflecting: error))"])
                }
                try? await Task.sleep(for: interval)
            }
        }
    }

    /// One batch of the users whose next change has come, each in a transaction of its own: one that
    /// fails is put off an hour rather than hold back every user after it. A user whose row a request
    /// or a replica holds is skipped (that one announces them). Returns how many were announced or
    /// found unchanged.
    @discardableResult
    func sweep() async throws -> Int {
        let entitlements = self.entitlements
        let logger = self.logger
        let now = entitlements.clock()
        // Announced under the other setting: equality, so that the partial index finds them.
        let otherSetting = !entitlements.settings.acceptsSandbox
        let due = try await entitlements.postgres.checkedQuery(
            """
            SELECT user_id FROM entitlement_announcements WHERE next_change_at <= \(now) OR sandbox_counted = \(otherSetting)
            ORDER BY next_change_at LIMIT \(Self.batchSize)
            """,
            decoding: UUID.self, logger: logger)
        var looked = 0
        for user in due {
            do {
                let held = try await entitlements.postgres.transaction(logger: logger) { connection -> Bool in
                    guard
                        try await connection.returnsRow(
                            """
                            SELECT 1 FROM entitlement_announcements WHERE user_id = \(user) AND (next_change_at <= \(now) OR sandbox_counted = \(otherSetting))
                            FOR UPDATE SKIP LOCKED
                            """, logger: logger)
                    else { return false }
                    try await entitlements.announcingChanges(for: [user], on: connection, logger: logger) {}
                    return true
                }
                if held { looked += 1 }
            } catch {
                logger.warning(
                    "announcing a changed entitlement failed; trying again in an hour", metadata: ["user_id": "\(user)", "error": "\(String(reflecting: error))"])
                // Put off by the clock alone: a setting left unmatched would bring the user back at once.
                try? await entitlements.postgres.checkedQuery(
                    "UPDATE entitlement_announcements SET next_change_at = \(now.addingTimeInterval(3_600)), sandbox_counted = NULL WHERE user_id = \(user)",
                    logger: logger)
            }
        }
        return looked
    }
}
