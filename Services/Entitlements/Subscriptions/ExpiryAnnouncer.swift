import Foundation
import Logging
import PostgresNIO
import ServiceKit
import ServiceLifecycle

/// Announces the entitlements that change by the clock alone: a subscription's end or the end of its
/// grace period, a grant's end. No request makes that change, and Apple's notification of an end
/// (EXPIRED, GRACE_PERIOD_EXPIRED) comes after it, when the entitlement already reads as ended: the
/// other services (nutrition's daily allowances) would keep the paid caps. Every `interval` it takes
/// the users whose recorded next change has come (`entitlement_announcements`), a batch at a time,
/// skipping rows a replica holds, and announces those whose entitlement now differs from what was
/// announced.
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
                    logger.warning("announcing ended entitlements failed; trying again", metadata: ["error": "\(String(reflecting: error))"])
                }
                try? await Task.sleep(for: interval)
            }
        }
    }

    /// One batch of the users whose next change has come; returns how many were looked at.
    @discardableResult
    func sweep() async throws -> Int {
        let entitlements = self.entitlements
        let logger = self.logger
        let now = entitlements.clock()
        return try await entitlements.postgres.transaction(logger: logger) { connection in
            var due: [UUID] = []
            for try await user in try await connection.checkedQuery(
                """
                SELECT user_id FROM entitlement_announcements WHERE next_change_at <= \(now)
                ORDER BY next_change_at LIMIT \(Self.batchSize) FOR UPDATE SKIP LOCKED
                """, logger: logger
            ).decode(UUID.self) {
                due.append(user)
            }
            if !due.isEmpty { try await entitlements.announcingChanges(for: due, on: connection, logger: logger) {} }
            return due.count
        }
    }
}
