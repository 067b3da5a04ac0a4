import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// One row per user per local day: the day's weight, kept in kilograms exactly (a pound is
/// 0.45359237 kg by definition, multiplied in PostgreSQL's exact `numeric`), and its ketone level.
struct BodyMetricStore: Sendable {
    func setWeight(_ user: UUID, day: LocalDay, value: Double, unit: WeightUnit, notes: String?, on connection: PostgresConnection, logger: Logger) async throws {
        let factor = unit == .lbs ? WeightUnit.kilogramsPerPound : "1"
        try await connection.checkedRun(
            """
            INSERT INTO body_metrics (user_id, local_date, weight_kg, weight_notes)
            VALUES (\(user), \(day.description)::date, \(String(value))::numeric * \(factor)::numeric, \(notes))
            ON CONFLICT (user_id, local_date) DO UPDATE SET weight_kg = EXCLUDED.weight_kg, weight_notes = EXCLUDED.weight_notes, updated_at = now()
            """, logger: logger)
    }

    func setKetones(_ user: UUID, day: LocalDay, value: Double, notes: String?, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO body_metrics (user_id, local_date, ketones_mmol, ketone_notes)
            VALUES (\(user), \(day.description)::date, \(String(value))::numeric, \(notes))
            ON CONFLICT (user_id, local_date) DO UPDATE SET ketones_mmol = EXCLUDED.ketones_mmol, ketone_notes = EXCLUDED.ketone_notes, updated_at = now()
            """, logger: logger)
    }

    struct WeightDay: Sendable {
        var date: String
        var value: Double
        var notes: String?
    }

    /// Logged weights from `from` to `to`, oldest first, in `unit` (rounded to a thousandth).
    func weights(_ user: UUID, from: LocalDay, to: LocalDay, unit: WeightUnit, on connection: PostgresConnection, logger: Logger) async throws -> [WeightDay] {
        let factor = unit == .lbs ? WeightUnit.kilogramsPerPound : "1"
        let rows = try await connection.checkedQuery(
            """
            SELECT local_date::text, round(weight_kg / \(factor)::numeric, 3)::float8, weight_notes FROM body_metrics
            WHERE user_id = \(user) AND local_date BETWEEN \(from.description)::date AND \(to.description)::date AND weight_kg IS NOT NULL
            ORDER BY local_date
            """, logger: logger)
        var days: [WeightDay] = []
        for try await (date, value, notes) in rows.decode((String, Double, String?).self) { days.append(WeightDay(date: date, value: value, notes: notes)) }
        return days
    }

    struct KetoneDay: Sendable {
        var date: String
        var mmolPerL: Double
        var notes: String?
    }

    func ketones(_ user: UUID, from: LocalDay, to: LocalDay, on connection: PostgresConnection, logger: Logger) async throws -> [KetoneDay] {
        let rows = try await connection.checkedQuery(
            """
            SELECT local_date::text, ketones_mmol::float8, ketone_notes FROM body_metrics
            WHERE user_id = \(user) AND local_date BETWEEN \(from.description)::date AND \(to.description)::date AND ketones_mmol IS NOT NULL
            ORDER BY local_date
            """, logger: logger)
        var days: [KetoneDay] = []
        for try await (date, value, notes) in rows.decode((String, Double, String?).self) { days.append(KetoneDay(date: date, mmolPerL: value, notes: notes)) }
        return days
    }

    /// Clears a day; false when nothing was logged on it.
    func clear(_ user: UUID, day: LocalDay, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            "DELETE FROM body_metrics WHERE user_id = \(user) AND local_date = \(day.description)::date RETURNING 1", logger: logger)
    }
}
