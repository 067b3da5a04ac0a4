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
/// those whose entitlement now differs from what was announced. The setting swept for is the one
/// the process that started last has (`sandbox_setting`): replicas with the other one, which a
/// rolling restart is replacing, leave those users alone.
struct ExpiryAnnouncer: Service {
    let entitlements: Entitlements
    let interval: Duration
    let logger: Logger

    static let batchSize = 100

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var started = false
            while !Task.isCancelled {
                do {
                    if !started {
                        try await recordStart()
                        started = true
                    }
                    while try await sweep() == Self.batchSize {}
                } catch {
                    logger.warning("announcing changed entitlements failed; trying again", metadata: ["error": "\(String(reflecting: error))"])
                }
                try? await Task.sleep(for: interval)
            }
        }
    }

    /// Makes this process's `APPLE_ACCEPT_SANDBOX` the one swept for, as the latest to start.
    func recordStart() async throws {
        try await entitlements.postgres.checkedQuery(
            """
            INSERT INTO sandbox_setting (accepts) VALUES (\(entitlements.settings.acceptsSandbox))
            ON CONFLICT (only_row) DO UPDATE SET accepts = EXCLUDED.accepts, started_at = now()
            """, logger: logger)
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
        // Announced under the other setting, while this process's is the latest to start. Asked here
        // to leave the users alone otherwise, and again as each is locked: in the same snapshot as
        // the user's row, so a row the latest process has just announced is never taken back.
        let mine = entitlements.settings.acceptsSandbox
        let latest = try await entitlements.postgres.checkedQuery("SELECT accepts FROM sandbox_setting", decoding: Bool.self, logger: logger).first
        let due = try await entitlements.postgres.checkedQuery(
            latest == mine
                ? """
                SELECT user_id FROM entitlement_announcements WHERE next_change_at <= \(now) OR sandbox_counted = \(!mine)
                ORDER BY next_change_at LIMIT \(Self.batchSize)
                """
                : "SELECT user_id FROM entitlement_announcements WHERE next_change_at <= \(now) ORDER BY next_change_at LIMIT \(Self.batchSize)",
            decoding: UUID.self, logger: logger)
        var looked = 0
        for user in due {
            do {
                let held = try await entitlements.postgres.transaction(logger: logger) { connection -> Bool in
                    guard
                        try await connection.returnsRow(
                            """
                            SELECT 1 FROM entitlement_announcements
                            WHERE user_id = \(user)
                              AND (next_change_at <= \(now) OR (sandbox_counted = \(!mine) AND EXISTS (SELECT 1 FROM sandbox_setting WHERE accepts = \(mine))))
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
