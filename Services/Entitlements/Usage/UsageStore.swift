import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Counted usage against a tier's limits. The total is one row per user and counter, changed by
/// one conditional `UPDATE`: its row lock makes parallel acquisitions take turns, so at 49 of 50
/// exactly one of a hundred gets the last unit.
struct UsageStore: Sendable {
    /// Adds `amount` if it stays within `cap` (nil: no cap); the new total, or nil when refused.
    func acquire(_ amount: Int, of counter: String, by user: UUID, cap: Int?, on connection: PostgresConnection, logger: Logger) async throws -> (UUID, Int)? {
        try await connection.checkedRun(
            "INSERT INTO usage_counters (user_id, counter) VALUES (\(user), \(counter)) ON CONFLICT DO NOTHING", logger: logger)
        let rows = try await connection.checkedQuery(
            """
            UPDATE usage_counters SET used = used + \(amount)
            WHERE user_id = \(user) AND counter = \(counter) AND (\(cap)::integer IS NULL OR used + \(amount) <= \(cap)::integer)
            RETURNING used
            """, logger: logger)
        var used: Int?
        for try await value in rows.decode(Int.self) { used = value }
        guard let used else { return nil }
        let id = UUID()
        try await connection.checkedRun(
            "INSERT INTO usage_acquisitions (id, user_id, counter, amount) VALUES (\(id), \(user), \(counter), \(amount))", logger: logger)
        return (id, used)
    }

    /// Releases those of `ids` that are the caller's, on this counter and not yet released; the
    /// ids released and the new total.
    func release(_ ids: [UUID], of counter: String, by user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> (released: [UUID], used: Int) {
        let rows = try await connection.checkedQuery(
            """
            UPDATE usage_acquisitions SET released_at = now()
            WHERE id = ANY(\(ids)) AND user_id = \(user) AND counter = \(counter) AND released_at IS NULL
            RETURNING id, amount
            """, logger: logger)
        var released: [UUID] = []
        var total = 0
        for try await (id, amount) in rows.decode((UUID, Int).self) {
            released.append(id)
            total += amount
        }
        // Nothing released changes no counter (nor the user's inputs' version).
        let used =
            total == 0
            ? try await connection.checkedQuery("SELECT used FROM usage_counters WHERE user_id = \(user) AND counter = \(counter)", logger: logger)
            : try await connection.checkedQuery(
                "UPDATE usage_counters SET used = used - \(total) WHERE user_id = \(user) AND counter = \(counter) RETURNING used", logger: logger)
        var now = 0
        for try await value in used.decode(Int.self) { now = value }
        return (released, now)
    }
}
