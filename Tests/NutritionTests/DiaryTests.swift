import Foundation
import HTTPTypes
import Models
import PostgresNIO
@testable import Nutrition
@testable import ServiceKitEvents
import Testing
import TestSupport

/// Weight, ketones, trends, share links and the coach's view through HTTP.
@Suite struct DiaryTests {
    typealias Env = NutritionTestEnvironment

    /// Now minus `days` days, as RFC 3339 in UTC: today's meals for the trend.
    static func daysAgo(_ days: Int, hour: Int = 12) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let day = calendar.date(byAdding: .day, value: -days, to: calendar.startOfDay(for: Date()))!
        return ISO8601DateFormatter().string(from: day.addingTimeInterval(Double(hour) * 3600))
    }

    static func date(_ daysAgo: Int) -> String { String(Self.daysAgo(daysAgo).prefix(10)) }

    @Test func weightIsStoredExactlyAndReadBackInEitherUnit() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let logged = try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 180, "unit": "lbs", "date": Self.date(2)])
            #expect(logged.status == .created && logged.json["date"] as? String == Self.date(2))
            let lbs = try await env.call(.get, "/v1/metrics/weight?days=30&unit=lbs", as: user)
            #expect((lbs.json["days"] as? [[String: Any]])?.first?["value"] as? Double == 180)
            let kg = try await env.call(.get, "/v1/metrics/weight?unit=kg", as: user)
            #expect((kg.json["days"] as? [[String: Any]])?.first?["value"] as? Double == 81.647)
            #expect(try await env.count("SELECT count(*) FROM body_metrics WHERE weight_kg = 81.64662660") == 1)
            // The same day again replaces it; two more days give an average and a slope.
            _ = try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 80, "unit": "kg", "date": Self.date(2)])
            _ = try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 79.5, "unit": "kg", "date": Self.date(1)])
            _ = try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 79, "unit": "kg"])
            let series = try await env.call(.get, "/v1/metrics/weight?days=7&unit=kg", as: user)
            #expect((series.json["days"] as? [Any])?.count == 3)
            #expect(series.json["moving_average_7d"] as? Double == 79.5)
            #expect(series.json["slope_per_week"] as? Double == -3.5)
            #expect(try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 19, "unit": "kg"]).fieldErrors == ["value"])
            #expect(try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 80, "unit": "stone"]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 80, "unit": "kg", "date": "yesterday"]).fieldErrors == ["date"])
            #expect(try await env.call(.delete, "/v1/metrics/\(Self.date(1))", as: user).status == .noContent)
            #expect(try await env.call(.delete, "/v1/metrics/\(Self.date(1))", as: user).status == .notFound)
        }
    }

    /// A weight logged and the chart read every day: prepared statements that keep one plan, and a
    /// weight in pounds still converted exactly.
    @Test func loggingAndReadingWeightsArePlannedOnce() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let store = BodyMetricStore()
            let logger = TestEnvironment.logger
            let days = (0..<10).map { LocalDay(Self.date($0))! }
            let logged = try await env.plans(of: BodyMetricStore.SetWeight.name) { connection in
                for (n, day) in days.enumerated() {
                    try await store.setWeight(user.id, day: day, value: 180 + Double(n), unit: n % 2 == 0 ? .lbs : .kg, notes: nil, on: connection, logger: logger)
                }
            }
            #expect(logged.generic >= 5, "\(logged)")
            #expect(try await env.count("SELECT count(*) FROM body_metrics WHERE weight_kg = 81.64662660") == 1)
            let read = try await env.plans(of: BodyMetricStore.Weights.name) { connection in
                for n in 0..<10 {
                    let weights = try await store.weights(user.id, from: days[9], to: days[n], unit: n % 2 == 0 ? .lbs : .kg, on: connection, logger: logger)
                    #expect(weights.count == 10 - n)
                    // Today's, logged as 180 lbs, read back in pounds.
                    if n == 0 { #expect(weights.last?.value == 180) }
                }
            }
            #expect(read.generic >= 5, "\(read)")
        }
    }

    /// Every coach's read of a client's diary asks whether they are linked: one prepared statement.
    @Test func aCoachsLinkIsCheckedByOnePlan() async throws {
        try await Env.run { env in
            let (coach, client, stranger) = (UUID(), UUID(), UUID())
            try await env.execute("INSERT INTO coach_links (coach_id, client_id, linked_at) VALUES ('\(coach)', '\(client)', now())")
            try await env.execute("INSERT INTO coach_links (coach_id, client_id, linked_at) SELECT gen_random_uuid(), gen_random_uuid(), now() FROM generate_series(1, 5000)")
            try await env.execute("ANALYZE coach_links")
            let plans = try await env.plans(of: CoachLinkStore.LinkCheck.name) { connection in
                for n in 0..<10 {
                    let linked = try await CoachLinkStore().isLinked(coach: coach, client: n % 2 == 0 ? client : stranger, on: connection, logger: TestEnvironment.logger)
                    #expect(linked == (n % 2 == 0))
                }
            }
            #expect(plans.generic >= 5, "\(plans)")
        }
    }

    @Test func ketonesAreFlaggedByLevel() async throws {
        try await Env.run { env in
            let user = try await env.user()
            for (ago, level) in [(2, 0.4), (1, 1.2), (0, 3.1)] {
                #expect(try await env.call(.post, "/v1/metrics/ketones", as: user, json: ["mmol_per_l": level, "date": Self.date(ago)]).status == .created)
            }
            let days = try #require(try await env.call(.get, "/v1/metrics/ketones?days=7", as: user).json["days"] as? [[String: Any]])
            #expect(days.map { $0["in_ketosis"] as? Bool } == [false, true, true])
            #expect(days.map { $0["high"] as? Bool } == [false, false, true])
            #expect(days.last?["message"] is String && days.first?["message"] is NSNull)
            #expect(try await env.call(.post, "/v1/metrics/ketones", as: user, json: ["mmol_per_l": -1]).fieldErrors == ["mmol_per_l"])
        }
    }

    /// Trends count consumed meals only, leave empty days null, average over logged days, and judge
    /// each day by the goal it had.
    @Test func trendsComeFromConsumedMealsByLocalDay() async throws {
        try await Env.run { env in
            let user = try await env.user()
            _ = try await env.meal(user, name: "Today", at: Self.daysAgo(0), items: [Env.item(calories: 300)], consume: true)
            _ = try await env.meal(user, name: "Yesterday", at: Self.daysAgo(1), items: [Env.item(calories: 500)], consume: true)
            _ = try await env.meal(user, name: "Not eaten", at: Self.daysAgo(1), items: [Env.item(calories: 900)])
            _ = try await env.meal(
                user, name: "Long ago", at: Self.daysAgo(4), items: [Env.item("Cake", grams: 100, calories: 400, protein: 5, carbs: 50, fat: 20, sugar: 35, saturated: 10, tags: ["processed_sugar"])],
                consume: true)
            // An earlier goal for days before today.
            try await env.execute("INSERT INTO calorie_goals (user_id, effective_from, daily_calories) VALUES ('\(user.id)', '\(Self.date(3))', 1500)")
            try await env.setProfile(user, goal: 2200)
            let trend = try await env.call(.get, "/v1/trends?period=7d", as: user)
            #expect(trend.status == .ok, "\(trend.text)")
            let days = try #require(trend.json["days"] as? [[String: Any]])
            #expect(days.count == 7 && days.last?["date"] as? String == Self.date(0))
            #expect(days.last?["calories"] as? Double == 300 && days[5]["calories"] as? Double == 500)
            #expect(days[4]["calories"] is NSNull, "a day with nothing logged is null")
            #expect(days.last?["calorie_goal"] as? Int == 2200 && days[5]["calorie_goal"] as? Int == 1500 && days[0]["calorie_goal"] as? Int == 2000)
            #expect(trend.json["days_logged"] as? Int == 3)
            #expect(trend.json[path: "averages.calories"] as? Double == 400)
            #expect(trend.json["streak"] as? Int == 2)
            let scores = try await env.call(.get, "/v1/meals?consumed=true", as: user).items.compactMap { $0["diet_score"] as? Int }
            #expect(trend.json[path: "worst_meal.diet_score"] as? Int == scores.min() && trend.json[path: "best_meal.diet_score"] as? Int == scores.max())
            #expect(try await env.call(.get, "/v1/trends?period=1y", as: user).fieldErrors == ["period"])
        }
    }

    /// A trend is computed once per diary version and kept. Every change it shows makes a new
    /// version, whether it comes through the API or from elsewhere (another replica, SQL), and the
    /// next read shows it; what it does not show (a meal not yet eaten, a shared page's views)
    /// leaves the version alone.
    @Test func aKeptTrendFollowsEveryChangeItShows() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let meal = try #require(
                try await env.meal(user, name: "Porridge", at: Self.daysAgo(0, hour: 8), items: [Env.item(calories: 300)], consume: true)["id"] as? String)
            func trend() async throws -> [String: Any] { try await env.call(.get, "/v1/trends?period=7d", as: user).json }
            func today() async throws -> [String: Any] { try #require((try await trend()["days"] as? [[String: Any]])?.last) }
            func version() async throws -> Int { try await env.count("SELECT version FROM diary_versions WHERE user_id = '\(user.id)'") }
            #expect(try await trend()[path: "best_meal.name"] as? String == "Porridge")
            // Kept: a change made behind the triggers' back (to the day row itself) is not seen until
            // the version moves.
            try await env.execute("UPDATE meal_days SET calories = calories + 1000 WHERE user_id = '\(user.id)'")
            #expect(try await today()["calories"] as? Double == 300, "served as kept")
            try await env.execute("SELECT diary_changed('\(user.id)')")
            #expect(try await today()["calories"] as? Double == 1300, "computed again for the new version")
            try await env.execute("UPDATE meal_days SET calories = calories - 1000 WHERE user_id = '\(user.id)'")
            try await env.execute("SELECT diary_changed('\(user.id)')")

            let before = try await version()
            _ = try await env.meal(user, name: "Not eaten", at: Self.daysAgo(0, hour: 9))
            try await env.execute("UPDATE meals SET view_count = view_count + 1 WHERE id = '\(meal)'")
            #expect(try await version() == before, "nothing a trend shows changed")

            try await env.execute("UPDATE meals SET name = 'Oats' WHERE id = '\(meal)'")
            #expect(try await trend()[path: "best_meal.name"] as? String == "Oats", "renamed")
            try await env.execute("UPDATE meals SET calories = 350 WHERE id = '\(meal)'")
            #expect(try await today()["calories"] as? Double == 350, "corrected")
            try await env.execute("UPDATE meals SET diet_score = 7 WHERE id = '\(meal)'")
            #expect(try await trend()[path: "best_meal.diet_score"] as? Int == 7, "rescored")
            try await env.setProfile(user, goal: 2300)
            #expect(try await today()["calorie_goal"] as? Int == 2300, "a new goal")
            try await env.execute("DELETE FROM calorie_goals WHERE user_id = '\(user.id)' AND daily_calories = 2300")
            #expect(try await today()["calorie_goal"] as? Int == 2000, "the goal taken back")
            try await env.execute("UPDATE meals SET local_date = local_date - 1 WHERE id = '\(meal)'")
            #expect(try await today()["calories"] is NSNull, "moved to the day before")
            #expect(try await env.call(.delete, "/v1/meals/\(meal)/consume", as: user).status == .ok)
            #expect(try await trend()["days_logged"] as? Int == 0, "uneaten")
            #expect(try await version() != before)
        }
    }

    /// A `TRUNCATE` fires no row trigger: emptying `meals` empties the day rows made from them, and
    /// emptying `meals` or `calorie_goals` moves every diary's version, so no kept trend outlives it.
    @Test func aTruncateEmptiesTheDayRowsAndMovesEveryVersion() async throws {
        try await Env.run { env in
            let user = try await env.user()
            _ = try await env.meal(user, name: "Porridge", at: Self.daysAgo(0, hour: 8), items: [Env.item(calories: 300)], consume: true)
            func trend() async throws -> [String: Any] { try await env.call(.get, "/v1/trends?period=7d", as: user).json }
            func version() async throws -> Int { try await env.count("SELECT version FROM diary_versions WHERE user_id = '\(user.id)'") }
            try await env.setProfile(user, goal: 2300)
            #expect(try await trend()["days_logged"] as? Int == 1)
            #expect(try await (trend()["days"] as? [[String: Any]])?.last?["calorie_goal"] as? Int == 2300)
            let before = try await version()
            try await env.execute("TRUNCATE calorie_goals")
            #expect(try await version() != before, "goals emptied")
            #expect(try await (trend()["days"] as? [[String: Any]])?.last?["calorie_goal"] as? Int != 2300, "kept trend not served")
            let afterGoals = try await version()
            try await env.execute("TRUNCATE meals CASCADE")
            #expect(try await version() != afterGoals, "meals emptied")
            #expect(try await env.count("SELECT count(*) FROM meal_days") == 0)
            #expect(try await trend()["days_logged"] as? Int == 0)
        }
    }

    /// The day sums follow every change to an eaten meal: uneaten, corrected, moved, deleted.
    @Test func theDaySumsFollowEveryChange() async throws {
        try await Env.run { env in
            let user = try await env.user()
            func today() async throws -> [String: Any] {
                try #require((try await env.call(.get, "/v1/trends?period=7d", as: user).json["days"] as? [[String: Any]])?.last)
            }
            let first = try #require(try await env.meal(user, at: Self.daysAgo(0, hour: 8), items: [Env.item(calories: 300)], consume: true)["id"] as? String)
            let second = try #require(try await env.meal(user, at: Self.daysAgo(0, hour: 13), items: [Env.item(calories: 500)], consume: true)["id"] as? String)
            #expect(try await today()["calories"] as? Double == 800)
            #expect(try await env.call(.delete, "/v1/meals/\(first)/consume", as: user).status == .ok)
            #expect(try await today()["calories"] as? Double == 500)
            let corrected: [String: Any] = ["name": "Lunch", "eaten_at": Self.daysAgo(0, hour: 13), "items": [Env.item(calories: 280, fat: 18)]]
            #expect(try await env.call(.put, "/v1/meals/\(second)", as: user, json: corrected).status == .ok)
            #expect(try await today()["calories"] as? Double == 280)
            let moved: [String: Any] = ["name": "Lunch", "eaten_at": Self.daysAgo(1, hour: 13), "items": [Env.item(calories: 280, fat: 18)]]
            #expect(try await env.call(.put, "/v1/meals/\(second)", as: user, json: moved).status == .ok)
            #expect(try await today()["calories"] is NSNull)
            #expect(try await env.call(.delete, "/v1/meals/\(second)", as: user).status == .noContent)
            #expect(try await env.count("SELECT count(*) FROM meal_days WHERE user_id = '\(user.id)'") == 0)
        }
    }

    /// The period's best and worst meals (kept per day by the trigger) follow every change: a meal
    /// logged, uneaten, deleted, rescored, moved out of the period, or only moved in time on a tie.
    @Test func theBestAndWorstMealsFollowEveryChange() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let salmon = Env.item()
            let cake = Env.item("Cake", grams: 100, calories: 400, protein: 5, carbs: 50, fat: 20, sugar: 35, saturated: 10, tags: ["processed_sugar"])
            let salad = Env.item("Salad", grams: 300, calories: 150, protein: 8, carbs: 12, fat: 7, fiber: 9, sugar: 4, tags: ["vegetable"])
            var ids: [String] = []
            for (days, hour, items) in [(0, 8, [salmon]), (0, 13, [cake]), (1, 9, [salad]), (1, 19, [salmon]), (2, 12, [cake]), (3, 7, [salad, cake])] {
                ids.append(try #require(try await env.meal(user, name: "Meal \(ids.count)", at: Self.daysAgo(days, hour: hour), items: items, consume: true)["id"] as? String))
            }
            /// The trend's best and worst against its eaten meals of the last 7 days, ranked as it ranks them.
            func check(_ step: String) async throws {
                let trend = try await env.call(.get, "/v1/trends?period=7d", as: user)
                let eaten = try await env.call(.get, "/v1/meals?consumed=true&limit=100", as: user).items.filter { ($0["local_date"] as? String ?? "") >= Self.date(6) }
                func rank(_ a: [String: Any], _ b: [String: Any], scoreFirst: (Int, Int) -> Bool) -> Bool {
                    let (sa, sb) = (a["diet_score"] as? Int ?? 0, b["diet_score"] as? Int ?? 0)
                    if sa != sb { return scoreFirst(sa, sb) }
                    let (ta, tb) = (a["eaten_at"] as? String ?? "", b["eaten_at"] as? String ?? "")
                    return ta != tb ? ta > tb : (a["id"] as? String ?? "") > (b["id"] as? String ?? "")
                }
                let best = eaten.sorted { rank($0, $1, scoreFirst: >) }.first?["id"] as? String
                let worst = eaten.sorted { rank($0, $1, scoreFirst: <) }.first?["id"] as? String
                #expect(trend.json[path: "best_meal.id"] as? String == best, "\(step): best")
                #expect(trend.json[path: "worst_meal.id"] as? String == worst, "\(step): worst")
                // Every day row, in the period or not, names what its meals rank first.
                let stale = try await env.count(
                    """
                    SELECT count(*) FROM meal_days d WHERE user_id = '\(user.id)' AND (
                      best_meal IS DISTINCT FROM (SELECT id FROM meals WHERE user_id = d.user_id AND local_date = d.local_date AND consumed
                                                  ORDER BY diet_score DESC, eaten_at DESC, id DESC LIMIT 1)
                      OR worst_meal IS DISTINCT FROM (SELECT id FROM meals WHERE user_id = d.user_id AND local_date = d.local_date AND consumed
                                                      ORDER BY diet_score ASC, eaten_at DESC, id DESC LIMIT 1))
                    """)
                #expect(stale == 0, "\(step): day rows")
            }
            try await check("logged")
            let best = try #require(try await env.call(.get, "/v1/trends?period=7d", as: user).json[path: "best_meal.id"] as? String)
            #expect(try await env.call(.delete, "/v1/meals/\(best)/consume", as: user).status == .ok)
            try await check("best uneaten")
            let worst = try #require(try await env.call(.get, "/v1/trends?period=7d", as: user).json[path: "worst_meal.id"] as? String)
            #expect(try await env.call(.delete, "/v1/meals/\(worst)", as: user).status == .noContent)
            try await check("worst deleted")
            // The salad of day 1 becomes cake: rescored down.
            let rescored: [String: Any] = ["name": "Meal 2", "eaten_at": Self.daysAgo(1, hour: 9), "items": [cake, cake]]
            #expect(try await env.call(.put, "/v1/meals/\(ids[2])", as: user, json: rescored).status == .ok)
            try await check("rescored")
            // Day 3's meal leaves the period.
            let moved: [String: Any] = ["name": "Meal 5", "eaten_at": Self.daysAgo(10, hour: 7), "items": [salad, cake]]
            #expect(try await env.call(.put, "/v1/meals/\(ids[5])", as: user, json: moved).status == .ok)
            try await check("moved out")
            // Two salads on day 2 tie on score: the later eaten ranks first, until it moves before the other.
            _ = try await env.meal(user, name: "Early salad", at: Self.daysAgo(2, hour: 6), items: [salad], consume: true)
            let late = try #require(try await env.meal(user, name: "Late salad", at: Self.daysAgo(2, hour: 10), items: [salad], consume: true)["id"] as? String)
            try await check("tied")
            let earlier: [String: Any] = ["name": "Late salad", "eaten_at": Self.daysAgo(2, hour: 5), "items": [salad]]
            #expect(try await env.call(.put, "/v1/meals/\(late)", as: user, json: earlier).status == .ok)
            try await check("moved in time")
            _ = try await env.meal(user, name: "Another salad", at: Self.daysAgo(0, hour: 20), items: [salad], consume: true)
            try await check("logged again")
            // Changes made in SQL alone, column by column: a day's only meal corrected (its day row is
            // remade), and a meal moved in time only.
            let alone = try #require(try await env.meal(user, name: "Alone", at: Self.daysAgo(5, hour: 12), items: [salmon], consume: true)["id"] as? String)
            try await env.execute("UPDATE meals SET calories = calories + 1 WHERE id = '\(alone)'")
            try await check("a day's only meal corrected")
            try await env.execute("UPDATE meals SET eaten_at = eaten_at + interval '3 hours' WHERE id = '\(late)'")
            try await check("moved in time alone")
        }
    }

    /// The streak (each day's run of logged days, kept by the trigger) follows days logged in any
    /// order, runs joined and split, a day emptied, and two devices logging neighbouring days at once.
    @Test func theStreakFollowsEveryChange() async throws {
        try await Env.run { env in
            let user = try await env.user()
            var meals: [Int: String] = [:]
            func log(_ days: Int) async throws {
                meals[days] = try #require(try await env.meal(user, at: Self.daysAgo(days, hour: 6), consume: true)["id"] as? String)
            }
            func check(_ streak: Int, _ step: String) async throws {
                #expect(try await env.call(.get, "/v1/trends?period=7d", as: user).json["streak"] as? Int == streak, "\(step)")
                // Every day's run is what its island says: consecutive days share `day - rank`.
                let wrong = try await env.count(
                    """
                    SELECT count(*) FROM meal_days d JOIN (
                      SELECT local_date, row_number() OVER (PARTITION BY start ORDER BY local_date) AS run FROM (
                        SELECT local_date, local_date - (row_number() OVER (ORDER BY local_date))::integer AS start
                        FROM meal_days WHERE user_id = '\(user.id)') ranked) islands USING (local_date)
                    WHERE d.user_id = '\(user.id)' AND d.run <> islands.run
                    """)
                #expect(wrong == 0, "\(step): runs")
            }
            for days in [2, 1, 0] { try await log(days) }
            try await check(3, "three days")
            for days in [5, 4] { try await log(days) }
            try await check(3, "a run before a gap")
            try await log(3)
            try await check(6, "the gap filled")
            #expect(try await env.call(.delete, "/v1/meals/\(try #require(meals[1]))", as: user).status == .noContent)
            try await check(1, "a day emptied")
            #expect(try await env.call(.delete, "/v1/meals/\(try #require(meals[0]))/consume", as: user).status == .ok)
            try await check(0, "today uneaten and yesterday empty")
            try await log(1)
            try await check(5, "counted from yesterday while today is empty")
            // Two devices eat on neighbouring days not yet logged, the second while the first's
            // transaction is still open: it waits for it, and so counts its day.
            let first = try #require(try await env.meal(user, at: Self.daysAgo(11, hour: 6))["id"] as? String)
            let second = try #require(try await env.meal(user, at: Self.daysAgo(10, hour: 6))["id"] as? String)
            let config = env.database.config(for: env.serviceName)
            let other = try await withClient(config) { client in
                try await client.withTransaction(logger: TestEnvironment.logger) { connection in
                    _ = try await connection.query("UPDATE meals SET consumed = true, consumed_at = now() WHERE id = \(first)::uuid", logger: TestEnvironment.logger)
                    let other = Task {
                        try await withClient(config) { other in
                            _ = try await other.query("UPDATE meals SET consumed = true, consumed_at = now() WHERE id = \(second)::uuid", logger: TestEnvironment.logger)
                        }
                    }
                    try await Task.sleep(for: .milliseconds(300))
                    return other
                }
            }
            try await other.value
            try await check(5, "logged at once")
            #expect(try await env.count("SELECT run FROM meal_days WHERE user_id = '\(user.id)' AND local_date = '\(Self.date(10))'") == 2)
        }
    }

    /// The diary's version is written when the transaction commits, after every lock it took on the
    /// way: a write holds no version row while it goes on to lock a profile or goals, which other
    /// writes lock in their own order.
    @Test func theDiaryVersionIsWrittenAtTheCommit() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let meal = try #require(try await env.meal(user, at: Self.daysAgo(1, hour: 6))["id"] as? String)
            let version = "SELECT version FROM diary_versions WHERE user_id = '\(user.id)'"
            let before = try await env.count(version)
            try await withClient(env.database.config(for: env.serviceName)) { client in
                try await client.withTransaction(logger: TestEnvironment.logger) { connection in
                    _ = try await connection.query("UPDATE meals SET consumed = true, consumed_at = now() WHERE id = \(meal)::uuid", logger: TestEnvironment.logger)
                    // Another connection takes the row at once: this transaction holds no lock on it.
                    try await env.execute("SELECT 1 FROM diary_versions WHERE user_id = '\(user.id)' FOR UPDATE NOWAIT")
                    #expect(try await env.count(version) == before, "not yet")
                }
            }
            #expect(try await env.count(version) != before, "written at the commit")
        }
    }

    /// Only a write that involves an eaten meal takes the user's day-row lock (held to its commit):
    /// logging a meal not yet eaten, or correcting one, changes no day row and waits for no one.
    @Test func onlyWritesOfEatenMealsTakeTheDayRowLock() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let meal = try #require(try await env.meal(user, at: Self.daysAgo(1, hour: 6))["id"] as? String)
            let locks = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
            func held(after statements: [String]) async throws -> Int {
                try await withClient(env.database.config(for: env.serviceName)) { client in
                    try await client.withTransaction(logger: TestEnvironment.logger) { connection in
                        for sql in statements { _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger) }
                        var count = 0
                        for try await value in try await connection.query(PostgresQuery(unsafeSQL: locks), logger: TestEnvironment.logger).decode(Int64.self) {
                            count = Int(value)
                        }
                        throw Rollback(count: count)
                    }
                }
            }
            struct Rollback: Error { var count: Int }
            func locksHeld(_ statements: String...) async throws -> Int {
                do {
                    return try await held(after: statements)
                } catch let error as PostgresTransactionError {
                    guard let rollback = error.closureError as? Rollback else { throw error }
                    return rollback.count
                }
            }
            let copy = [
                "CREATE TEMP TABLE copied ON COMMIT DROP AS SELECT * FROM meals WHERE id = '\(meal)'",
                "UPDATE copied SET id = gen_random_uuid()",
            ]
            #expect(try await locksHeld(copy[0], copy[1], "INSERT INTO meals SELECT * FROM copied") == 0, "an uneaten meal logged")
            #expect(try await locksHeld("UPDATE meals SET eaten_at = eaten_at + interval '1 minute', calories = calories + 1 WHERE id = '\(meal)'") == 0, "an uneaten meal corrected")
            #expect(try await locksHeld("DELETE FROM meals WHERE id = '\(meal)'") == 0, "an uneaten meal deleted")
            #expect(try await locksHeld(copy[0], copy[1], "UPDATE copied SET consumed = true, consumed_at = now()", "INSERT INTO meals SELECT * FROM copied") == 1, "an eaten meal logged")
            #expect(try await locksHeld("UPDATE meals SET consumed = true, consumed_at = now() WHERE id = '\(meal)'") == 1, "a meal eaten")
            try #require(try await env.call(.post, "/v1/meals/\(meal)/consume", as: user).status == .ok)
            #expect(try await locksHeld("UPDATE meals SET eaten_at = eaten_at + interval '1 minute' WHERE id = '\(meal)'") == 1, "an eaten meal's time corrected")
            #expect(try await locksHeld("DELETE FROM meals WHERE id = '\(meal)'") == 1, "an eaten meal deleted")
        }
    }

    @Test func aShareLinkShowsASnapshotUntilItEnds() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let meal = try await env.meal(
                user, name: "Crème brûlée & café",
                items: [Env.item("Crème brûlée", grams: 120, calories: 330, protein: 5, carbs: 30, fat: 21, sugar: 28, saturated: 12, tags: ["dairy", "egg", "processed_sugar"])])
            let id = try #require(meal["id"] as? String)
            let share = try await env.call(.post, "/v1/meals/\(id)/share", as: user)
            #expect(share.status == .created)
            let token = try #require(share.json["token"] as? String)
            #expect(token.count >= 22 && share.json["url"] as? String == "https://api.test/shared/\(token)")
            let opened = try await env.call(.get, "/v1/shared/\(token)")
            #expect(opened.status == .ok && opened.json["name"] as? String == "Crème brûlée & café")
            #expect(opened.json[path: "totals.calories"] as? Double == 330 && opened.json["diet_score"] as? Int == meal["diet_score"] as? Int)
            #expect(!opened.text.contains(user.path) && opened.json["notes"] == nil && opened.json["user_id"] == nil)
            #expect(try await env.call(.get, "/v1/meals/\(id)", as: user).json["view_count"] as? Int == 1)
            // The snapshot does not follow later edits.
            _ = try await env.call(.put, "/v1/meals/\(id)", as: user, json: ["name": "Renamed", "eaten_at": "\(Env.year)-06-01T19:30:00Z", "items": [Env.item()]])
            #expect(try await env.call(.get, "/v1/shared/\(token)").json["name"] as? String == "Crème brûlée & café")
            let card = try await env.call(.get, "/v1/shared/\(token)/card.png")
            #expect(card.status == .ok && card.headers[.contentType] == "image/png")
            let png = Array(card.body.readableBytesView)
            #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]))
            #expect(png.count > 24 && Array(png[16..<24]) == [0, 0, 0x04, 0xB0, 0, 0, 0x02, 0x76], "1200 × 630")
            #expect(try await env.call(.delete, "/v1/meals/\(id)/share", as: user).status == .noContent)
            #expect(try await env.call(.get, "/v1/shared/\(token)").code == "share_gone")
            #expect(try await env.call(.get, "/v1/shared/\(token)/card.png").status == .gone)
            #expect(try await env.call(.get, "/v1/shared/not-a-token").status == .notFound)
            // Expiry and a deleted meal answer 410 too.
            let second = try await env.shareToken(of: id, as: user)
            try await env.execute("UPDATE shares SET expires_at = now() - interval '1 second' WHERE meal_id = '\(id)' AND revoked_at IS NULL")
            #expect(try await env.call(.get, "/v1/shared/\(second)").status == .gone)
            let third = try await env.shareToken(of: id, as: user)
            #expect(try await env.call(.get, "/v1/shared/\(third)").status == .ok)
            #expect(try await env.call(.delete, "/v1/meals/\(id)", as: user).status == .noContent)
            #expect(try await env.call(.get, "/v1/shared/\(third)").code == "share_gone")
        }
    }

    /// A linked coach reads, never writes; anyone else and the coach after unlinking get 404.
    @Test func aLinkedCoachReadsTheClientsDiaryOnly() async throws {
        try await Env.run { env in
            let client = try await env.user()
            let coach = try await env.user()
            let stranger = try await env.user()
            _ = try await env.meal(client, at: Self.daysAgo(0), consume: true)
            _ = try await env.call(.post, "/v1/metrics/weight", as: client, json: ["value": 70, "unit": "kg"])
            let base = "/v1/nutrition/clients/\(client.path)"
            #expect(try await env.call(.get, "\(base)/meals", as: coach).status == .notFound)
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id), userID: client.id, producer: "invitations")
            try await waitUntil(.seconds(15)) { try await env.call(.get, "\(base)/meals", as: coach).status == .ok }
            #expect(try await env.call(.get, "\(base)/meals", as: coach).items.count == 1)
            #expect((try await env.call(.get, "\(base)/metrics/weight", as: coach).json["days"] as? [Any])?.count == 1)
            #expect(try await env.call(.get, "\(base)/metrics/ketones", as: coach).status == .ok)
            #expect(try await env.call(.get, "\(base)/trends?period=30d", as: coach).json["days_logged"] as? Int == 1)
            #expect([.notFound, .methodNotAllowed].contains(try await env.call(.post, "\(base)/meals", as: coach, json: ["name": "x"]).status), "no writing")
            for path in ["meals", "metrics/weight", "metrics/ketones", "trends"] {
                #expect(try await env.call(.get, "\(base)/\(path)", as: stranger).status == .notFound, "\(path)")
            }
            #expect(try await env.call(.get, "/v1/nutrition/clients/not-a-uuid/meals", as: coach).status == .notFound)
            try await env.publish(ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false), userID: client.id, producer: "invitations")
            try await waitUntil(.seconds(15)) { try await env.call(.get, "\(base)/meals", as: coach).status == .notFound }
            // An acceptance older than the unlink, redelivered late, does not give the diary back.
            try await env.publish(
                InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id), userID: client.id, producer: "invitations",
                occurredAt: Date() - 3600)
            let marker = try await env.user()
            _ = marker
            #expect(try await env.call(.get, "\(base)/meals", as: coach).status == .notFound)
        }
    }

    /// A write made while the account's deletion runs waits for it, then finds the tombstone and keeps
    /// nothing, though the diet profile it reads was kept from before: without the wait, it would
    /// write after the deletion's statements read, and its row would outlive the account.
    @Test func aWriteBesideTheDeletionWaitsAndKeepsNothing() async throws {
        try await Env.run { env in
            let writes: [(name: String, write: @Sendable (Env.User) async throws -> APIReply)] = [
                ("meal", { user in try await env.call(.post, "/v1/meals", as: user, json: ["name": "Late", "eaten_at": "\(Env.year)-06-01T12:00:00Z", "items": [Env.item()]]) }),
                ("weight", { user in try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 70, "unit": "kg"]) }),
                ("ketones", { user in try await env.call(.post, "/v1/metrics/ketones", as: user, json: ["mmol_per_l": 1.2]) }),
            ]
            for (name, write) in writes {
                let user = try await env.user()
                #expect(try await env.call(.get, "/v1/nutrition/profile", as: user).status == .ok)
                let reply = try await env.whileDeleting(user.id) { try await write(user) }
                #expect(reply.status == .unauthorized && reply.code == "account_deleted", "\(name): \(reply.text)")
            }
            #expect(try await env.count("SELECT count(*) FROM meals") == 0)
            #expect(try await env.count("SELECT count(*) FROM body_metrics") == 0)
        }
    }

    @Test func aDeletedUserLeavesNothingAndTheirLinksAreGone() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let id = try #require(try await env.meal(user, consume: true)["id"] as? String)
            let token = try await env.shareToken(of: id, as: user)
            _ = try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 70, "unit": "kg"])
            try await env.publish(UserDeleted(userID: user.id), userID: user.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(user.id)'") == 0 }
            #expect(try await env.count("SELECT count(*) FROM meals WHERE user_id = '\(user.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM body_metrics WHERE user_id = '\(user.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM calorie_goals WHERE user_id = '\(user.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM diary_versions WHERE user_id = '\(user.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM meal_days WHERE user_id = '\(user.id)'") == 0)
            #expect(try await env.call(.get, "/v1/shared/\(token)").code == "share_gone")
            // Its token outlives it by a few minutes: it makes nothing again either.
            #expect(try await env.call(.get, "/v1/nutrition/profile", as: user).code == "account_deleted")
            let late = try await env.call(.post, "/v1/meals", as: user, json: ["name": "Late", "eaten_at": "\(Env.year)-06-01T12:00:00Z", "items": [Env.item()]])
            #expect(late.status == .unauthorized && late.code == "account_deleted", "\(late.text)")
            #expect(try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 70, "unit": "kg"]).code == "account_deleted")
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(user.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM meals WHERE user_id = '\(user.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM calorie_goals WHERE user_id = '\(user.id)'") == 0)
            // A profile update about the deleted account, arriving late, makes nothing again.
            try await env.publish(ProfileUpdated(userID: user.id, dietaryPreferences: [], allergies: [], displayName: nil, avatarURL: nil), userID: user.id, producer: "social")
            _ = try await env.user()
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(user.id)'") == 0)
        }
    }
}
