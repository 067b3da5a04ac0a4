import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// One row per user per local day: the day's weight, kept in kilograms exactly (a pound is
/// 0.45359237 kg by definition, multiplied in PostgreSQL's exact `numeric`), and its ketone level.
struct BodyMetricStore: Sendable {
    func setWeight(_ user: UUID, day: LocalDay, value: Double, unit: WeightUnit, notes: String?, on connection: PostgresConnection, logger: Logger) async throws {
        let factor = unit == .lbs ? WeightUnit.kilogramsPerPound : "1"
        guard try await connection.returnsRow(SetWeight(user: user, day: day.description, value: String(value), factor: factor, notes: notes), logger: logger) else {
            throw APIError.accountDeleted
        }
    }

    // A weight is logged and its chart read every day by many users: both statements are prepared
    // once per connection, as PostgreSQL otherwise parses and plans them each time. Numbers travel
    // as text into `numeric`, so that a weight in pounds is converted exactly. A day's row is made
    // holding the account (`hold_live_account`), as a meal is.

    struct SetWeight: PostgresPreparedStatement {
        static let name = "nutrition.set_weight"
        static let sql = """
            INSERT INTO body_metrics (user_id, local_date, weight_kg, weight_notes)
            SELECT $1, $2::date, $3::numeric * $4::numeric, $5
            WHERE hold_live_account($1)
            ON CONFLICT (user_id, local_date) DO UPDATE SET weight_kg = EXCLUDED.weight_kg, weight_notes = EXCLUDED.weight_notes, updated_at = now()
            RETURNING 1
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .text, .text, .text]
        typealias Row = Void
        var user: UUID
        var day: String
        var value: String
        var factor: String
        var notes: String?
        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(user)
            bindings.append(day)
            bindings.append(value)
            bindings.append(factor)
            bindings.append(notes)
            return bindings
        }
        func decodeRow(_ row: PostgresRow) throws {}
    }

    func setKetones(_ user: UUID, day: LocalDay, value: Double, notes: String?, on connection: PostgresConnection, logger: Logger) async throws {
        let stored = try await connection.returnsRow(
            """
            INSERT INTO body_metrics (user_id, local_date, ketones_mmol, ketone_notes)
            SELECT \(user), \(day.description)::date, \(String(value))::numeric, \(notes)
            WHERE hold_live_account(\(user))
            ON CONFLICT (user_id, local_date) DO UPDATE SET ketones_mmol = EXCLUDED.ketones_mmol, ketone_notes = EXCLUDED.ketone_notes, updated_at = now()
            RETURNING 1
            """, logger: logger)
        guard stored else { throw APIError.accountDeleted }
    }

    struct WeightDay: Sendable {
        var date: String
        var value: Double
        var notes: String?
    }

    /// Logged weights from `from` to `to`, oldest first, in `unit` (rounded to a thousandth).
    func weights(_ user: UUID, from: LocalDay, to: LocalDay, unit: WeightUnit, on connection: PostgresConnection, logger: Logger) async throws -> [WeightDay] {
        let factor = unit == .lbs ? WeightUnit.kilogramsPerPound : "1"
        var days: [WeightDay] = []
        for try await day in try await connection.checkedExecute(Weights(user: user, from: from.description, to: to.description, factor: factor), logger: logger) {
            days.append(day)
        }
        return days
    }

    struct Weights: PostgresPreparedStatement {
        static let name = "nutrition.weights"
        static let sql = """
            SELECT local_date::text, round(weight_kg / $4::numeric, 3)::float8, weight_notes FROM body_metrics
            WHERE user_id = $1 AND local_date BETWEEN $2::date AND $3::date AND weight_kg IS NOT NULL
            ORDER BY local_date
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .text, .text]
        typealias Row = WeightDay
        var user: UUID
        var from: String
        var to: String
        var factor: String
        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 4)
            bindings.append(user)
            bindings.append(from)
            bindings.append(to)
            bindings.append(factor)
            return bindings
        }
        func decodeRow(_ row: PostgresRow) throws -> WeightDay {
            let (date, value, notes) = try row.decode((String, Double, String?).self)
            return WeightDay(date: date, value: value, notes: notes)
        }
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
