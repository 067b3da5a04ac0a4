import Foundation
import HTTPTypes
import Models
@testable import Nutrition
import Testing
import TestSupport

/// The diet profile and meals through HTTP: validation, scoring fields, local days, versions, and
/// that no one reaches another user's meal.
@Suite struct MealTests {
    typealias Env = NutritionTestEnvironment

    @Test func theProfileHasDefaultsAndRefusesWhatIsNotADiet() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let profile = try await env.call(.get, "/v1/nutrition/profile", as: user)
            #expect(profile.json["diet"] as? String == "balanced" && profile.json["daily_calorie_goal"] as? Int == 2000)
            #expect(profile.json["time_zone"] as? String == "UTC" && profile.json["day_starts_at"] as? Int == 0 && profile.json["custom_macros"] is NSNull)
            let keto = try await env.setProfile(user, diet: "keto", zone: "Europe/Paris", goal: 1800, unit: "lbs", dayStartsAt: 2)
            #expect(keto.json["diet"] as? String == "keto" && keto.json["weight_unit"] as? String == "lbs" && keto.json["day_starts_at"] as? Int == 2)
            func put(_ body: [String: Any]) async throws -> APIReply {
                try await env.call(
                    .put, "/v1/nutrition/profile", as: user,
                    json: ["diet": "balanced", "daily_calorie_goal": 2000, "weight_unit": "kg", "time_zone": "UTC"].merging(body) { $1 })
            }
            // A goal set in a zone a day ahead, then another after a move a day behind: the later one
            // holds from today on, and the first does not take over again when its date comes
            // (Kiritimati, +14, is always a calendar day or two ahead of Pago Pago, -11).
            _ = try await env.setProfile(user, zone: "Pacific/Kiritimati", goal: 1800)
            _ = try await env.setProfile(user, zone: "Pacific/Pago_Pago", goal: 2200)
            #expect(try await env.count("SELECT count(*) FROM calorie_goals WHERE user_id = '\(user.id)' AND daily_calories = 1800") == 0)
            #expect(try await env.call(.get, "/v1/nutrition/profile", as: user).json["daily_calorie_goal"] as? Int == 2200)
            #expect(try await put(["diet": "carnivore"]).fieldErrors == ["diet"])
            #expect(try await put(["diet": "custom", "custom_macros": ["protein": 30, "carbs": 40, "fat": 29]]).fieldErrors == ["custom_macros"])
            #expect(try await put(["diet": "custom"]).fieldErrors == ["custom_macros"])
            let fibre = try await put(["diet": "custom", "custom_macros": ["protein": 30, "carbs": 40, "fat": 30, "fibre": 5]])
            #expect(fibre.status == .badRequest && fibre.fieldErrors == ["custom_macros.fibre"], "\(fibre.text)")
            #expect(try await put(["diet": "custom", "custom_macros": ["protein": 30, "carbs": 40, "fat": 30]]).status == .ok)
            #expect(try await put(["time_zone": "Mars/Olympus"]).code == "invalid_time_zone")
            #expect(try await put(["daily_calorie_goal": 799]).fieldErrors == ["daily_calorie_goal"])
            #expect(try await put(["day_starts_at": 7]).fieldErrors == ["day_starts_at"])
            #expect(try await put(["weight_unit": "stone"]).fieldErrors == ["weight_unit"])
            #expect(try await put(["diet": 7]).status == .badRequest)
            #expect(try await put(["favourite": "cake"]).status == .badRequest)
            #expect(try await env.call(.get, "/v1/nutrition/profile").status == .unauthorized)
        }
    }

    @Test func aMealIsTotalledScoredAndExplained() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let meal = try await env.meal(
                user,
                items: [
                    Env.item(), Env.item("Broccoli", grams: 100, calories: 34, protein: 2.8, carbs: 7, fat: 0.4, fiber: 2.6, sugar: 1.7, sodium: 33, tags: ["vegetable"]),
                ])
            #expect(meal[path: "totals.calories"] as? Double == 314)
            #expect(meal[path: "totals.protein_g"] as? Double == 32.8)
            #expect((meal["items"] as? [[String: Any]])?.last?[path: "totals.fiber_g"] as? Double == 2.6)
            let score = try #require(meal["diet_score"] as? Int)
            #expect((0...100).contains(score))
            #expect(meal["score_band"] as? String == (score >= 80 ? "great" : score >= 60 ? "ok" : "poor"))
            #expect(meal["algorithm_version"] as? String == DietScore.algorithmVersion)
            let components = try #require(meal[path: "score_explanation.components"] as? [[String: Any]])
            #expect(components.contains { $0["part"] as? String == "fit" } && components.contains { $0["part"] as? String == "quality" })
            #expect(components.allSatisfy { $0["sentence"] is String && $0["max"] is Double })
            #expect(meal["consumed"] as? Bool == false && meal["edited"] as? Bool == false && meal["local_date"] as? String == "\(Env.year)-06-01")
            #expect((meal["warnings"] as? [Any])?.isEmpty == true)
        }
    }

    @Test func badMealsAreRefusedNamingTheField() async throws {
        try await Env.run { env in
            let user = try await env.user()
            func post(_ items: [[String: Any]], eatenAt: String = "\(Env.year)-06-01T12:00:00Z", extra: [String: Any] = [:]) async throws -> APIReply {
                try await env.call(.post, "/v1/meals", as: user, json: ["name": "Lunch", "eaten_at": eatenAt, "items": items].merging(extra) { $1 })
            }
            #expect(try await post([Env.item(protein: -1)]).fieldErrors == ["items[0].protein_g"])
            #expect(try await post([Env.item(grams: 20, protein: 30)]).fieldErrors.contains("items[0].protein_g"))
            #expect(try await post(Array(repeating: Env.item(), count: 51)).fieldErrors == ["items"])
            #expect(try await post([]).fieldErrors == ["items"])
            #expect(try await post([Env.item(tags: ["unicorn"])]).fieldErrors == ["items[0].tags"])
            #expect(try await post([Env.item(grams: 0)]).fieldErrors.contains("items[0].grams"))
            #expect(try await post([Env.item()], eatenAt: "\(Env.year)-06-01T12:00:00").status == .badRequest, "a time without an offset")
            // A day the month lacks is refused, not rolled over into the next month's first days.
            for eatenAt in ["\(Env.year)-02-30T12:00:00Z", "\(Env.year)-04-31T12:00:00+02:00", "\(Env.year)-06-01T24:00:00Z", "\(Env.year)-06-01T12:00:00+0200"] {
                let refused = try await post([Env.item()], eatenAt: eatenAt)
                #expect(refused.status == .badRequest && refused.fieldErrors == ["eaten_at"], "\(eatenAt): \(refused.text)")
            }
            #expect(try await post([Env.item()], extra: ["calories": 3]).status == .badRequest, "an unknown field")
            // An item's key no item takes is refused too, named: a misspelt amount or tag would
            // otherwise count as nothing, and silence an allergy warning.
            var misspelt = Env.item()
            misspelt["sodium"] = 800
            let refused = try await post([Env.item(), misspelt])
            #expect(refused.status == .badRequest && refused.code == "validation_failed" && refused.fieldErrors == ["items[1].sodium"], "\(refused.text)")
            let byFood: [String: Any] = ["ndb_number": "20045", "grams": 100, "tag": ["nuts"]]
            #expect(try await post([byFood]).fieldErrors == ["items[0].tag"])
            // A photo this API keeps is set by uploading it: a path names another meal's, or nothing.
            #expect(try await post([Env.item()], extra: ["photo_url": "/v1/meals/\(UUID())/photo"]).fieldErrors == ["photo_url"])
            #expect(try await post([Env.item()], extra: ["photo_url": "javascript:alert(1)"]).fieldErrors == ["photo_url"])
            let linked = try await post([Env.item()], extra: ["photo_url": "https://cdn.example.com/lunch.jpg"])
            #expect(linked.status == .created && linked.json["photo_url"] as? String == "https://cdn.example.com/lunch.jpg")
            let nan = try await env.call(
                .post, "/v1/meals", as: user,
                raw: .init(string: #"{"name":"x","eaten_at":"\#(Env.year)-06-01T12:00:00Z","items":[{"name":"a","grams":NaN,"calories":1,"protein_g":0,"carbs_g":0,"fat_g":0}]}"#),
                headers: [.contentType: "application/json"])
            #expect(nan.status == .badRequest)
            var wrongType = Env.item()
            wrongType["grams"] = "100"
            #expect(try await post([wrongType]).status == .badRequest)
            // Energy far from the macros is kept, with a warning: real labels round.
            let odd = try await post([Env.item(calories: 900)])
            #expect(odd.status == .created && (odd.json["warnings"] as? [[String: Any]])?.first?["code"] as? String == "nutrition_inconsistent")
            #expect(try await env.call(.post, "/v1/meals", json: ["name": "x"]).status == .unauthorized)
        }
    }

    /// A meal post scores against the profile this process keeps while the change feed vouches: with
    /// the profile table renamed away posts still succeed. A change made in SQL is announced at its
    /// commit and seen shortly after; one made through the service is seen by the next post at once,
    /// and a `TRUNCATE` of the goals makes every process forget every profile.
    @Test func aMealPostUsesTheKeptProfileUntilAChangeIsAnnounced() async throws {
        try await Env.run { env in
            let user = try await env.user()
            @Sendable func diet() async throws -> String? {
                let reply = try await env.call(.post, "/v1/meals", as: user, json: ["name": "Lunch", "eaten_at": "\(Env.year)-06-01T12:00:00Z", "items": [Env.item()]])
                return reply.status == .created ? reply.json["diet"] as? String : nil
            }
            try await env.setProfile(user, diet: "keto")
            #expect(try await diet() == "keto", "seen at once after the change")
            // Kept by one post while the table is there, then served with it gone: once the feed
            // vouches (before that, the read fails), and when no forgetting refused the keeping.
            try await waitUntil {
                try await env.execute("ALTER TABLE IF EXISTS profiles_away RENAME TO profiles")
                guard try await diet() == "keto" else { return false }
                try await env.execute("ALTER TABLE profiles RENAME TO profiles_away")
                return try await diet() == "keto"
            }
            try await env.execute("ALTER TABLE profiles_away RENAME TO profiles")

            try await env.execute("UPDATE profiles SET diet = 'vegan' WHERE user_id = '\(user.id)'")
            try await waitUntil { try await diet() == "vegan" }

            // With the announcing trigger off, a change made in SQL is not seen: the profile is kept
            // (while the feed vouches, hence the retries).
            try await waitUntil {
                try await env.execute("ALTER TABLE profiles ENABLE TRIGGER profiles_announce")
                try await env.execute("ALTER TABLE calorie_goals ENABLE TRIGGER calorie_goals_announce")
                try await env.execute("UPDATE profiles SET diet = 'vegan' WHERE user_id = '\(user.id)'")
                try await waitUntil { try await diet() == "vegan" }
                // A profile change through the service writes its goal too: both announce.
                try await env.execute("ALTER TABLE profiles DISABLE TRIGGER profiles_announce")
                try await env.execute("ALTER TABLE calorie_goals DISABLE TRIGGER calorie_goals_announce")
                try await env.execute("UPDATE profiles SET diet = 'paleo' WHERE user_id = '\(user.id)'")
                return try await diet() == "vegan"
            }
            // A change through the service is seen by the next post: forgotten as it commits.
            try await env.setProfile(user, diet: "mediterranean")
            #expect(try await diet() == "mediterranean")
            try await waitUntil {
                let saved = try await env.call(
                    .put, "/v1/nutrition/profile", as: user,
                    json: ["diet": "mediterranean", "daily_calorie_goal": 2000, "weight_unit": "kg", "time_zone": "UTC"])
                guard saved.status == .ok, try await diet() == "mediterranean" else { return false }
                try await env.execute("UPDATE profiles SET diet = 'low_carb' WHERE user_id = '\(user.id)'")
                return try await diet() == "mediterranean"
            }
            // A truncate names no one: every process forgets every profile.
            try await env.execute("TRUNCATE calorie_goals")
            try await waitUntil { try await diet() == "low_carb" }
            try await env.execute("ALTER TABLE profiles ENABLE TRIGGER profiles_announce")
            try await env.execute("ALTER TABLE calorie_goals ENABLE TRIGGER calorie_goals_announce")
        }
    }

    /// In Europe/Paris, 23:30 on the Saturday before summer time counts for the Saturday and 00:30 for
    /// the Sunday; a meal keeps its day when the profile's zone changes later; a day starting at 02:00
    /// takes a 01:30 snack into the evening before.
    @Test func mealsCountForTheLocalDayTheyWereEatenOn() async throws {
        // Paris moves to summer time at 02:00 on March's last Sunday; until then it is at +01:00.
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "Europe/Paris"))
        let lastSunday = try #require(
            (25...31).first { calendar.component(.weekday, from: calendar.date(from: DateComponents(year: Env.year, month: 3, day: $0))!) == 1 })
        let (saturday, sunday) = ("\(Env.year)-03-\(lastSunday - 1)", "\(Env.year)-03-\(lastSunday)")
        try await Env.run { env in
            let user = try await env.user()
            try await env.setProfile(user, zone: "Europe/Paris")
            #expect(try await env.meal(user, at: "\(saturday)T23:30:00+01:00")["local_date"] as? String == saturday)
            let early = try await env.meal(user, at: "\(sunday)T00:30:00+01:00")
            #expect(early["local_date"] as? String == sunday)
            #expect(try await env.meal(user, at: "\(saturday)T22:30:00Z")["local_date"] as? String == saturday)
            #expect(try await env.meal(user, at: "\(saturday)T23:30:00Z")["local_date"] as? String == sunday)
            try await env.setProfile(user, zone: "America/Los_Angeles")
            let id = try #require(early["id"] as? String)
            #expect(try await env.call(.get, "/v1/meals/\(id)", as: user).json["local_date"] as? String == sunday, "a past meal keeps its day")
            // Corrected at the same time, it keeps its day too; moved to another time, it takes that
            // time's day in the zone of now.
            let renamed = try await env.call(.put, "/v1/meals/\(id)", as: user, json: ["name": "Late snack", "eaten_at": "\(sunday)T00:30:00+01:00", "items": [Env.item()]])
            #expect(renamed.status == .ok && renamed.json["local_date"] as? String == sunday, "\(renamed.text)")
            // A time the database keeps to the microsecond (an analysed meal's) comes back cut to the
            // millisecond: sent back as read, it is the same time.
            try await env.execute("UPDATE meals SET eaten_at = eaten_at + interval '123 microseconds' WHERE id = '\(id)'")
            let read = try await env.call(.get, "/v1/meals/\(id)", as: user)
            let asRead = try #require(read.json["eaten_at"] as? String)
            let again = try await env.call(.put, "/v1/meals/\(id)", as: user, json: ["name": "Late snack", "eaten_at": asRead, "items": [Env.item()]])
            #expect(again.json["local_date"] as? String == sunday, "\(asRead): \(again.text)")
            let moved = try await env.call(.put, "/v1/meals/\(id)", as: user, json: ["name": "Late snack", "eaten_at": "\(sunday)T00:45:00+01:00", "items": [Env.item()]])
            #expect(moved.json["local_date"] as? String == saturday, "\(moved.text)")
            #expect(try await env.meal(user, at: "\(sunday)T00:30:00+01:00")["local_date"] as? String == saturday)
            try await env.setProfile(user, zone: "Europe/Paris", dayStartsAt: 2)
            #expect(try await env.meal(user, at: "\(Env.year)-06-02T01:30:00+02:00")["local_date"] as? String == "\(Env.year)-06-01")
        }
    }

    /// The daylight-saving day in Paris has 23 hours.
    @Test func theDaylightSavingDayHasTwentyThreeHours() throws {
        let paris = try #require(TimeZone(identifier: "Europe/Paris"))
        func day(_ iso: String) -> String { LocalDay(ISO8601DateFormatter().date(from: iso)!, in: paris, dayStartsAt: 0).description }
        #expect(day("2025-03-29T22:59:59Z") == "2025-03-29")
        #expect(day("2025-03-29T23:00:00Z") == "2025-03-30")
        #expect(day("2025-03-30T21:59:59Z") == "2025-03-30")
        #expect(day("2025-03-30T22:00:00Z") == "2025-03-31")
        // From 23:00Z on the 29th to 22:00Z on the 30th: 23 hours.
    }

    /// A day PostgreSQL's `date` cannot hold is the client's mistake, answered as the document says,
    /// not a `500` from the database.
    @Test func aDayBeforeAnyDiaryIsRefusedAsTheDocumentSays() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let weight = try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 80, "unit": "kg", "date": "0000-01-01"])
            #expect(weight.status == .badRequest && weight.fieldErrors == ["date"], "\(weight.text)")
            #expect(try await env.call(.delete, "/v1/metrics/0000-01-01", as: user).status == .notFound)
            let meals = try await env.call(.get, "/v1/meals?from=0000-01-01", as: user)
            #expect(meals.status == .badRequest, "\(meals.text)")
        }
    }

    @Test func aRepeatedIdempotencyKeyLogsOneMeal() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let key: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "meal-\(UUID())"]
            let body: [String: Any] = ["name": "Breakfast", "eaten_at": "\(Env.year)-06-01T08:00:00Z", "items": [Env.item()]]
            let first = try await env.call(.post, "/v1/meals", as: user, json: body, headers: key)
            let second = try await env.call(.post, "/v1/meals", as: user, json: body, headers: key)
            #expect(first.status == .created && second.status == .created, "\(second.status) \(second.text)")
            #expect(first.json["id"] as? String == second.json["id"] as? String)
            #expect(try await env.count("SELECT count(*) FROM meals WHERE user_id = '\(user.id)'") == 1)
        }
    }

    @Test func aStaleIfMatchIs412AndAnEditIsRescored() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let meal = try await env.meal(user)
            let id = try #require(meal["id"] as? String)
            let read = try await env.call(.get, "/v1/meals/\(id)", as: user)
            let tag = try #require(read.headers[.eTag])
            let body: [String: Any] = ["name": "Dinner, corrected", "eaten_at": "\(Env.year)-06-01T19:30:00+02:00", "items": [Env.item(grams: 200, calories: 373, protein: 40, fat: 24)]]
            let edited = try await env.call(.put, "/v1/meals/\(id)", as: user, json: body, headers: [.ifMatch: tag])
            #expect(edited.status == .ok && edited.json["edited"] as? Bool == true && edited.json["name"] as? String == "Dinner, corrected")
            #expect(edited.json[path: "totals.calories"] as? Double == 373)
            let stale = try await env.call(.put, "/v1/meals/\(id)", as: user, json: body, headers: [.ifMatch: tag])
            #expect(stale.status == .preconditionFailed && stale.code == "precondition_failed")
        }
    }

    /// Another user's meal is 404 on every route, as an unknown id is.
    @Test func noOneReachesAnotherUsersMeal() async throws {
        try await Env.run { env in
            let owner = try await env.user()
            let other = try await env.user()
            let id = try #require(try await env.meal(owner)["id"] as? String)
            let body: [String: Any] = ["name": "Mine now", "eaten_at": "\(Env.year)-06-01T12:00:00Z", "items": [Env.item()]]
            for (method, path, json) in [
                (HTTPRequest.Method.get, "/v1/meals/\(id)", nil), (.put, "/v1/meals/\(id)", body), (.delete, "/v1/meals/\(id)", nil),
                (.post, "/v1/meals/\(id)/consume", nil), (.delete, "/v1/meals/\(id)/consume", nil), (.post, "/v1/meals/\(id)/share", nil),
                (.delete, "/v1/meals/\(id)/share", nil),
            ] as [(HTTPRequest.Method, String, [String: Any]?)] {
                let reply = try await env.call(method, path, as: other, json: json)
                #expect(reply.status == .notFound && reply.code == "meal_not_found", "\(method) \(path): \(reply.text)")
            }
            #expect(try await env.call(.get, "/v1/meals/not-a-uuid", as: owner).status == .notFound)
            #expect(try await env.call(.get, "/v1/meals", as: other).items.isEmpty)
            #expect(try await env.call(.get, "/v1/meals/\(id)", as: owner).status == .ok)
        }
    }

    /// A range of days finds the meals of those days at the zones' extremes: a meal's day is its
    /// moment in the owner's zone less the day's start hour, within a day either side of its UTC
    /// date, and the list bounds its scan by the moments a range can hold.
    @Test func aRangeOfDaysFindsItsMealsAtTheZonesExtremes() async throws {
        try await Env.run { env in
            for (zone, offset) in [("Pacific/Kiritimati", "+14:00"), ("Etc/GMT+12", "-12:00")] {
                let user = try await env.user()
                try await env.setProfile(user, zone: zone, dayStartsAt: 6)
                // The first and the last minute of 1 June there, with days starting at 06:00.
                _ = try await env.meal(user, name: "First", at: "\(Env.year)-06-01T06:00:00\(offset)")
                _ = try await env.meal(user, name: "Last", at: "\(Env.year)-06-02T05:59:00\(offset)")
                _ = try await env.meal(user, name: "Next day", at: "\(Env.year)-06-02T06:00:00\(offset)")
                let day = try await env.call(.get, "/v1/meals?from=\(Env.year)-06-01&to=\(Env.year)-06-01", as: user)
                #expect(day.items.compactMap { $0["name"] as? String } == ["Last", "First"], "\(zone): \(day.text)")
                let next = try await env.call(.get, "/v1/meals?from=\(Env.year)-06-02&to=\(Env.year)-06-02", as: user)
                #expect(next.items.compactMap { $0["name"] as? String } == ["Next day"], "\(zone): \(next.text)")
                let paged = try await env.call(.get, "/v1/meals?from=\(Env.year)-06-01&to=\(Env.year)-06-01&limit=1", as: user)
                let cursor = try #require(paged.json["next_cursor"] as? String)
                let rest = try await env.call(.get, "/v1/meals?from=\(Env.year)-06-01&to=\(Env.year)-06-01&limit=1&cursor=\(cursor)", as: user)
                #expect(rest.items.compactMap { $0["name"] as? String } == ["First"], "\(zone): \(rest.text)")
            }
        }
    }

    /// The first page of a list, the app's commonest read, keeps one plan for every user and range,
    /// rather than PostgreSQL planning it again on every request: beside a user with years of meals
    /// too.
    @Test func theListsFirstPageIsPlannedOnce() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let meal = try #require(try await env.meal(user, at: "\(Env.year)-06-01T12:00:00Z")["id"] as? String)
            // The planner weighs its plans by the table's statistics: another user's three years, analysed.
            let columns = "name, items, calories, protein_g, carbs_g, fat_g, fiber_g, sugar_g, saturated_fat_g, sodium_mg, diet, diet_score, score_band, score, algorithm_version"
            try await env.execute(
                """
                INSERT INTO meals (id, user_id, eaten_at, local_date, \(columns))
                SELECT gen_random_uuid(), '\(UUID())', now() - make_interval(hours => i * 8), (now() - make_interval(hours => i * 8))::date, \(columns)
                FROM meals, generate_series(1, 3000) AS i WHERE id = '\(meal)'
                """)
            try await env.execute("ANALYZE meals")
            let plans = try await env.plans(of: MealStore.ListPage.name) { connection in
                for n in 0..<10 {
                    let range = n % 2 == 0 ? (LocalDay("\(Env.year)-06-01"), LocalDay("\(Env.year)-06-07")) : (nil, nil)
                    let meals = try await MealStore().list(
                        user.id, .init(consumed: nil, from: range.0, to: range.1, limit: 50, after: nil), on: connection, logger: TestEnvironment.logger)
                    #expect(meals.count == 1)
                }
            }
            #expect(plans.generic >= 5, "\(plans)")
        }
    }

    /// Opening a meal and eating it are prepared statements that keep one plan; eating changes and
    /// returns the meal in one statement, and another user's meal is not found by either.
    @Test func readingAndEatingAMealArePlannedOnce() async throws {
        try await Env.run { env in
            let (owner, stranger) = (try await env.user(), try await env.user())
            var made: [UUID] = []
            for hour in 10..<15 {
                let id = try await env.meal(owner, at: "\(Env.year)-06-01T\(hour):00:00Z")["id"] as? String
                made.append(try #require(id.flatMap(UUID.init(uuidString:))))
            }
            let meals = made
            try await env.execute("ANALYZE meals")
            let store = MealStore()
            let logger = TestEnvironment.logger
            let eaten = try await env.plans(of: MealStore.SetConsumed.name) { connection in
                for n in 0..<10 {
                    let meal = try #require(try await store.setConsumed(meals[n % 5], of: owner.id, n < 5, notes: n < 5 ? "all of it" : nil, on: connection, logger: logger))
                    #expect(meal.consumed == (n < 5) && meal.consumedNotes == (n < 5 ? "all of it" : nil) && meal.version == Int64(2 + n / 5))
                }
                let strangers = try await store.setConsumed(meals[0], of: stranger.id, true, notes: nil, on: connection, logger: logger)
                #expect(strangers == nil)
            }
            #expect(eaten.generic >= 5, "\(eaten)")
            for (name, forUpdate) in [(MealStore.Find.name, false), (MealStore.FindForUpdate.name, true)] {
                let read = try await env.plans(of: name) { connection in
                    for n in 0..<10 {
                        let found = try await store.find(meals[n % 5], of: owner.id, forUpdate: forUpdate, on: connection, logger: logger)
                        #expect(found?.id == meals[n % 5])
                    }
                    let strangers = try await store.find(meals[0], of: stranger.id, forUpdate: forUpdate, on: connection, logger: logger)
                    #expect(strangers == nil)
                }
                #expect(read.generic >= 5, "\(name): \(read)")
            }
            // Through HTTP: eaten, then not, then another user's.
            let path = "/v1/meals/\(meals[1].uuidString.lowercased())"
            let markedEaten = try await env.call(.post, path + "/consume", as: owner, json: ["notes": "half"])
            #expect(markedEaten.json["consumed"] as? Bool == true)
            // Its answer names the meal's new version, as a read of it does.
            let readAfterEaten = try await env.call(.get, path, as: owner)
            #expect(markedEaten.headers[.eTag] != nil && markedEaten.headers[.eTag] == readAfterEaten.headers[.eTag])
            // Marked eaten again without notes (a double tap): the notes and the time stay.
            let again = try await env.call(.post, path + "/consume", as: owner)
            #expect(again.json["consumed_notes"] as? String == "half" && again.json["consumed_at"] as? String == readAfterEaten.json["consumed_at"] as? String, "\(again.text)")
            let uneaten = try await env.call(.delete, path + "/consume", as: owner)
            #expect(uneaten.json["consumed"] as? Bool == false)
            let readAfterUneaten = try await env.call(.get, path, as: owner)
            #expect(uneaten.headers[.eTag] != markedEaten.headers[.eTag] && uneaten.headers[.eTag] == readAfterUneaten.headers[.eTag])
            #expect(try await env.call(.post, path + "/consume", as: stranger).status == .notFound)
        }
    }

    @Test func theListFiltersAndPages() async throws {
        try await Env.run { env in
            let user = try await env.user()
            for day in 1...5 { _ = try await env.meal(user, at: "\(Env.year)-06-0\(day)T12:00:00Z", consume: day % 2 == 1) }
            let consumed = try await env.call(.get, "/v1/meals?consumed=true", as: user)
            #expect(consumed.items.count == 3)
            let window = try await env.call(.get, "/v1/meals?from=\(Env.year)-06-02&to=\(Env.year)-06-04&limit=2", as: user)
            #expect(window.items.compactMap { $0["local_date"] as? String } == ["\(Env.year)-06-04", "\(Env.year)-06-03"])
            let next = try #require(window.json["next_cursor"] as? String)
            let rest = try await env.call(.get, "/v1/meals?from=\(Env.year)-06-02&to=\(Env.year)-06-04&limit=2&cursor=\(next)", as: user)
            #expect(rest.items.compactMap { $0["local_date"] as? String } == ["\(Env.year)-06-02"])
            #expect(try await env.call(.get, "/v1/meals?from=June", as: user).fieldErrors == ["from"])
            #expect(try await env.call(.get, "/v1/meals?consumed=maybe", as: user).fieldErrors == ["consumed"])
            #expect(try await env.call(.get, "/v1/meals?cursor=nonsense", as: user).code == "invalid_cursor")
        }
    }

    /// Allergies come from social's `profile.updated`; a matching item is warned about with its severity.
    @Test func allergiesFromTheProfileWarnOnMatchingItems() async throws {
        try await Env.run { env in
            let user = try await env.user()
            try await env.publish(
                ProfileUpdated(userID: user.id, dietaryPreferences: [], allergies: [.init(name: "Peanut", severity: .lifeThreatening)], displayName: nil, avatarURL: nil),
                userID: user.id, producer: "social")
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(user.id)' AND allergies <> '[]'") == 1 }
            let meal = try await env.meal(user, items: [Env.item("Peanut butter toast", grams: 60, calories: 250, protein: 9, carbs: 20, fat: 15, tags: ["nuts", "grain"])])
            let warning = try #require((meal["allergy_warnings"] as? [[String: Any]])?.first)
            #expect(warning["allergy"] as? String == "Peanut" && warning["severity"] as? String == "life_threatening")
        }
    }

    /// An allergy as people write it, in either number, warns of an item named, or tagged, in the other.
    @Test func allergiesWarnWhateverTheNumberTheyAreWrittenIn() {
        let allergies: [Allergy] = [
            .init(name: "Peanuts", severity: .lifeThreatening), .init(name: "Strawberry", severity: .mild), .init(name: "Eggs", severity: .moderate),
            .init(name: "Tomatoes", severity: .mild), .init(name: "Hummus", severity: .mild), .init(name: "Cookies", severity: .mild),
            .init(name: "Nut", severity: .severe),
        ]
        func item(_ name: String, tags: [String]? = nil) -> MealItem {
            MealItem(
                name: name, grams: 100, calories: 100, proteinG: 5, carbsG: 10, fatG: 4, fiberG: nil, sugarG: nil, saturatedFatG: nil, sodiumMg: nil, alcoholG: nil,
                tags: tags)
        }
        let items = [
            item("Peanut butter toast"), item("Strawberries and cream"), item("Scrambled egg"), item("Tomato soup"), item("Hummus wrap"),
            item("Oatmeal cookie"), item("Trail mix", tags: ["nuts", "snack"]), item("Rice, white", tags: ["grain"]), item("Pea soup"), item("Oat porridge"),
        ]
        let warned = MealDraft.allergyWarnings(items, allergies: allergies).map { "\($0.item): \($0.allergy)" }
        #expect(
            warned == [
                // "Nut" within "peanut": the text as written, a warning in doubt.
                "Peanut butter toast: Peanuts", "Peanut butter toast: Nut", "Strawberries and cream: Strawberry", "Scrambled egg: Eggs", "Tomato soup: Tomatoes", "Hummus wrap: Hummus",
                "Oatmeal cookie: Cookies", "Trail mix: Nut",
            ])
        #expect(MealDraft.wordForms("berries couscous")[0].contains("berry") && MealDraft.wordForms("berries couscous")[1] == ["couscous"])
    }
}
