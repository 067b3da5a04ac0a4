import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Trends from eaten meals: one round trip, prepared once per connection, over `meal_days` (the
/// meals summed by local day, with each day's best and worst meal and the run of logged days it
/// ends, kept by a trigger), so a month reads at most 30 rows and two meals, whatever the diary
/// holds.
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

    struct MealRef: Sendable, Encodable {
        var dietScore: Int
        var id: UUID
        var localDate: String
        var name: String
        enum CodingKeys: String, CodingKey { case dietScore = "diet_score", id, localDate = "local_date", name }
    }

    struct Trend: Sendable {
        var days: [Day]
        var best: MealRef?
        var worst: MealRef?
        /// Consecutive logged days ending on the last day, or the day before while the last day has
        /// nothing yet (a streak is not broken before the day is over).
        var streak: Int
    }

    /// One row per logged day of the period (kind 0, with its run), then the period's best meal
    /// (kind 1) and worst (kind 2). The days left out are the ones with nothing eaten; the goals
    /// come with the profile, which the caller has read to know what today is.
    struct PeriodQuery: PostgresPreparedStatement {
        static let name = "nutrition.trend_days"
        static let sql = """
            WITH d AS MATERIALIZED (
              SELECT local_date, calories, protein_g, carbs_g, fat_g, score_sum, meals, run,
                     best_meal, best_score, best_eaten_at, worst_meal, worst_score, worst_eaten_at
              FROM meal_days WHERE user_id = $1 AND local_date BETWEEN $2::date AND $3::date)
            SELECT 0, d.local_date - $2::date, NULL::text, d.calories, d.protein_g, d.carbs_g, d.fat_g, d.score_sum::float8 / nullif(d.meals, 0), d.run, NULL::uuid, NULL::text
            FROM d
            UNION ALL
            SELECT 1, NULL, m.local_date::text, NULL, NULL, NULL, NULL, NULL, m.diet_score, m.id, m.name
            FROM (SELECT best_meal FROM d ORDER BY best_score DESC NULLS LAST, best_eaten_at DESC, best_meal DESC LIMIT 1) b
            JOIN meals m ON m.id = b.best_meal
            UNION ALL
            SELECT 2, NULL, m.local_date::text, NULL, NULL, NULL, NULL, NULL, m.diet_score, m.id, m.name
            FROM (SELECT worst_meal FROM d ORDER BY worst_score ASC NULLS LAST, worst_eaten_at DESC, worst_meal DESC LIMIT 1) w
            JOIN meals m ON m.id = w.worst_meal
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .text]
        /// The kind; a day's place in the period, or a meal's day; the day's sums and average score;
        /// and either the day's run or the meal's score, with the meal's id and name.
        typealias Row = (Int, Int?, String?, Double?, Double?, Double?, Double?, Double?, Int, UUID?, String?)

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

        func decodeRow(_ row: PostgresRow) throws -> Row {
            try row.decode(Row.self)
        }
    }

    func trend(_ user: UUID, from: LocalDay, to: LocalDay, goals: CalorieGoals, on connection: PostgresConnection, logger: Logger) async throws -> Trend {
        var days = (0...from.distance(to: to)).map { offset in
            let day = from.adding(days: offset)
            return Day(date: day.description, calorieGoal: goals.goal(on: day))
        }
        var runs = [Int?](repeating: nil, count: days.count)
        var best: MealRef?
        var worst: MealRef?
        for try await (kind, offset, mealDay, calories, protein, carbs, fat, score, number, meal, name) in try await connection.checkedExecute(
            PeriodQuery(user: user, from: from, to: to), logger: logger)
        {
            if kind == 0, let offset, days.indices.contains(offset) {
                (days[offset].calories, days[offset].proteinG, days[offset].carbsG, days[offset].fatG) = (calories, protein, carbs, fat)
                days[offset].averageScore = score
                runs[offset] = number
            } else if let meal, let name, let mealDay {
                let ref = MealRef(dietScore: number, id: meal, localDate: mealDay, name: name)
                if kind == 1 { best = ref } else { worst = ref }
            }
        }
        // Today's run, or yesterday's while today has nothing yet.
        let streak = runs[runs.count - 1] ?? (runs.count > 1 ? runs[runs.count - 2] : nil) ?? 0
        return Trend(days: days, best: best, worst: worst, streak: streak)
    }
}
