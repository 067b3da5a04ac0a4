import Foundation
import Logging
import PostgresNIO
import ServiceKitDatabase

/// Trends from eaten meals: one round trip, prepared once per connection, over `meal_days` (the
/// meals summed by local day, with each day's best and worst meal and the run of logged days it
/// ends, kept by a trigger), so a month reads 30 rows and a streak one, whatever the diary holds.
struct TrendStore: Sendable {
    struct Day: Sendable {
        var date: String
        var calories: Double?
        var proteinG: Double?
        var carbsG: Double?
        var fatG: Double?
        var averageScore: Double?
        var calorieGoal: Int?
    }

    struct MealRef: Sendable, Codable {
        var id: UUID
        var name: String
        var dietScore: Int
        var localDate: String
        enum CodingKeys: String, CodingKey { case id, name, dietScore = "diet_score", localDate = "local_date" }
    }

    struct Trend: Sendable {
        var days: [Day]
        var best: MealRef?
        var worst: MealRef?
        /// Consecutive logged days ending on the last day, or the day before while the last day has
        /// nothing yet (a streak is not broken before the day is over).
        var streak: Int
    }

    /// The period's days, oldest first, each with what was eaten and the goal it had; on the first
    /// row, the best and worst meals and the streak.
    struct PeriodQuery: PostgresPreparedStatement {
        static let name = "nutrition.trend_period"
        static let sql = """
            WITH span AS (SELECT generate_series($2::date, $3::date, interval '1 day')::date AS day)
            SELECT span.day::text, d.calories, d.protein_g, d.carbs_g, d.fat_g, d.score_sum::float8 / nullif(d.meals, 0),
                   (SELECT g.daily_calories FROM calorie_goals g WHERE g.user_id = $1 AND g.effective_from <= span.day ORDER BY g.effective_from DESC LIMIT 1),
                   CASE WHEN span.day = $2::date THEN json_build_object(
                     'best', (SELECT json_build_object('id', m.id, 'name', m.name, 'diet_score', m.diet_score, 'local_date', m.local_date::text)
                              FROM (SELECT best_meal FROM meal_days WHERE user_id = $1 AND local_date BETWEEN $2::date AND $3::date
                                    ORDER BY best_score DESC NULLS LAST, best_eaten_at DESC, best_meal DESC LIMIT 1) b JOIN meals m ON m.id = b.best_meal),
                     'worst', (SELECT json_build_object('id', m.id, 'name', m.name, 'diet_score', m.diet_score, 'local_date', m.local_date::text)
                               FROM (SELECT worst_meal FROM meal_days WHERE user_id = $1 AND local_date BETWEEN $2::date AND $3::date
                                     ORDER BY worst_score ASC NULLS LAST, worst_eaten_at DESC, worst_meal DESC LIMIT 1) w JOIN meals m ON m.id = w.worst_meal),
                     'streak', coalesce((SELECT run FROM meal_days WHERE user_id = $1 AND local_date = $3::date),
                                        (SELECT run FROM meal_days WHERE user_id = $1 AND local_date = $3::date - 1), 0))::text
                   END
            FROM span LEFT JOIN meal_days d ON d.user_id = $1 AND d.local_date = span.day AND d.local_date BETWEEN $2::date AND $3::date
            ORDER BY span.day
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .text]
        typealias Row = (Day, String?)

        var user: UUID
        var from: LocalDay
        var to: LocalDay

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(user)
            bindings.append(from.description)
            bindings.append(to.description)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> (Day, String?) {
            let (day, calories, protein, carbs, fat, score, goal, extra) = try row.decode((String, Double?, Double?, Double?, Double?, Double?, Int?, String?).self)
            return (Day(date: day, calories: calories, proteinG: protein, carbsG: carbs, fatG: fat, averageScore: score, calorieGoal: goal), extra)
        }
    }

    func trend(_ user: UUID, from: LocalDay, to: LocalDay, on connection: PostgresConnection, logger: Logger) async throws -> Trend {
        var days: [Day] = []
        var extra: String?
        for try await (day, json) in try await connection.checkedExecute(PeriodQuery(user: user, from: from, to: to), logger: logger) {
            days.append(day)
            if let json { extra = json }
        }
        struct Extra: Decodable {
            var best: MealRef?
            var worst: MealRef?
            var streak: Int
        }
        let parsed = try extra.map { try JSONDecoder().decode(Extra.self, from: Data($0.utf8)) }
        return Trend(days: days, best: parsed?.best, worst: parsed?.worst, streak: parsed?.streak ?? 0)
    }
}
