import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Analyses per user and local day: what the daily allowance counts. An analysis is counted when
/// it starts, and given back when it fails on the server's or the provider's side.
struct AnalysisCountStore: Sendable {
    /// Counts one analysis on `day` unless that would pass `cap` (nil: no cap); false when it would.
    /// One conditional statement: two analyses started at once cannot both take the last one.
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

    /// Gives back one analysis counted on `day` whose call gave nothing (`AnalyzeRoutes.givesBack`).
    func giveBack(_ user: UUID, on day: LocalDay, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE meal_analysis_days SET analyses = analyses - 1 WHERE user_id = \(user) AND local_date = \(day.description)::date AND analyses > 0",
            logger: logger)
    }

    func forget(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM meal_analysis_days WHERE user_id = \(user)", logger: logger)
    }
}
