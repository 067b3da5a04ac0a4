import Foundation
import Logging
import PostgresNIO
import ServiceKitDatabase

/// Trends from consumed meals, computed by PostgreSQL over the stored local days (the index on
/// `(user_id, local_date) WHERE consumed` covers the sums), one round trip for the days, the goal
/// each day had, the best and worst meals and the logged days behind the streak.
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
        /// Logged days up to `to`, newest first (at most a year's).
        var loggedDays: [String]
    }

    func trend(_ user: UUID, from: LocalDay, to: LocalDay, on connection: PostgresConnection, logger: Logger) async throws -> Trend {
        let rows = try await connection.checkedQuery(
            """
            WITH span AS (SELECT generate_series(\(from.description)::date, \(to.description)::date, interval '1 day')::date AS day),
            totals AS (
              SELECT local_date, sum(calories) AS calories, sum(protein_g) AS protein, sum(carbs_g) AS carbs, sum(fat_g) AS fat, avg(diet_score)::float8 AS score
              FROM meals WHERE user_id = \(user) AND consumed AND local_date BETWEEN \(from.description)::date AND \(to.description)::date
              GROUP BY local_date)
            SELECT span.day::text, t.calories, t.protein, t.carbs, t.fat, t.score,
                   (SELECT g.daily_calories FROM calorie_goals g WHERE g.user_id = \(user) AND g.effective_from <= span.day ORDER BY g.effective_from DESC LIMIT 1),
                   CASE WHEN span.day = \(from.description)::date THEN (
                     SELECT json_build_object('best', (SELECT json_build_object('id', id, 'name', name, 'diet_score', diet_score, 'local_date', local_date::text)
                                                       FROM meals WHERE user_id = \(user) AND consumed AND local_date BETWEEN \(from.description)::date AND \(to.description)::date
                                                       ORDER BY diet_score DESC, eaten_at DESC LIMIT 1),
                                              'worst', (SELECT json_build_object('id', id, 'name', name, 'diet_score', diet_score, 'local_date', local_date::text)
                                                        FROM meals WHERE user_id = \(user) AND consumed AND local_date BETWEEN \(from.description)::date AND \(to.description)::date
                                                        ORDER BY diet_score ASC, eaten_at DESC LIMIT 1),
                                              'logged', (SELECT coalesce(json_agg(d ORDER BY d DESC), '[]') FROM (
                                                           SELECT DISTINCT local_date::text AS d FROM meals
                                                           WHERE user_id = \(user) AND consumed AND local_date <= \(to.description)::date
                                                             AND local_date > \(to.description)::date - 366) logged))::text)
                   END
            FROM span LEFT JOIN totals t ON t.local_date = span.day
            ORDER BY span.day
            """, logger: logger)
        var days: [Day] = []
        var extra: String?
        for try await (day, calories, protein, carbs, fat, score, goal, json) in rows.decode((String, Double?, Double?, Double?, Double?, Double?, Int?, String?).self) {
            days.append(Day(date: day, calories: calories, proteinG: protein, carbsG: carbs, fatG: fat, averageScore: score, calorieGoal: goal))
            if let json { extra = json }
        }
        struct Extra: Decodable {
            var best: MealRef?
            var worst: MealRef?
            var logged: [String]
        }
        let parsed = try extra.map { try JSONDecoder().decode(Extra.self, from: Data($0.utf8)) }
        return Trend(days: days, best: parsed?.best, worst: parsed?.worst, loggedDays: parsed?.logged ?? [])
    }
}
