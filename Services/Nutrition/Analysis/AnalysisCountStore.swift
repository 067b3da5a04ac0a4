import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Analyses that succeeded, per user and local day: what the daily allowance counts.
struct AnalysisCountStore: Sendable {
    func used(_ user: UUID, on day: LocalDay, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let rows = try await connection.checkedQuery(
            "SELECT analyses FROM meal_analysis_days WHERE user_id = \(user) AND local_date = \(day.description)::date", logger: logger)
        for try await value in rows.decode(Int.self) { return value }
        return 0
    }

    /// Counts one analysis on `day` unless that would pass `cap` (nil: no cap); false when it would.
    /// Run in the transaction that stores the meal: two analyses finishing at once cannot both take
    /// the last one.
    func count(_ user: UUID, on day: LocalDay, cap: Int?, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            """
            INSERT INTO meal_analysis_days AS d (user_id, local_date, analyses)
            SELECT \(user), \(day.description)::date, 1 WHERE \(cap)::int IS NULL OR \(cap)::int >= 1
            ON CONFLICT (user_id, local_date) DO UPDATE SET analyses = d.analyses + 1
            WHERE \(cap)::int IS NULL OR d.analyses < \(cap)::int
            RETURNING 1
            """, logger: logger)
    }

    func forget(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM meal_analysis_days WHERE user_id = \(user)", logger: logger)
    }
}
