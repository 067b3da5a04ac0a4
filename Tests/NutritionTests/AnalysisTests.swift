import Foundation
import HTTPTypes
import Images
import Models
import NIOCore
@testable import Nutrition
import ServiceKit
import Testing
import TestSupport

/// `POST /v1/meals/analyze` through HTTP, against a local server that answers as each provider's
/// API is documented to.
@Suite struct AnalysisTests {
    static func settings(_ provider: String, _ standIn: VisionStandIn, _ extra: [String: String] = [:]) -> [String: String] {
        [
            "ANALYZER_PROVIDER": provider, "ANALYZER_API_KEY": "test-key", "ANALYZER_MODEL": provider == "gemini" ? "gemini-test" : "vision-test",
            "ANALYZER_URL": provider == "gemini" ? "\(standIn.baseURL)/v1beta" : "\(standIn.baseURL)/v1", "ANALYZER_TIMEOUT_MS": "5000",
        ].merging(extra) { $1 }
    }

    static func analyze(
        _ env: NutritionTestEnvironment, _ user: NutritionTestEnvironment.User, photo: String = "meals/plate.heic", fields: [(String, String)] = [],
        headers extra: HTTPFields = [:], boundary: String = Photos.boundary
    ) async throws -> APIReply {
        let (body, form) = Photos.form(photo: try Photos.fixture(photo), fields: fields, boundary: boundary)
        var headers = form
        for field in extra { headers.append(field) }
        return try await env.call(.post, "/v1/meals/analyze", as: user, raw: body, headers: headers)
    }

    /// Nothing of a failed analysis is kept: no meal, no photo, no count.
    static func nothingKept(_ env: NutritionTestEnvironment) async throws {
        #expect(try await env.count("SELECT count(*) FROM meals") == 0)
        #expect(try await env.count("SELECT count(*) FROM meal_photos") == 0)
        #expect(try await env.count("SELECT coalesce(sum(analyses), 0) FROM meal_analysis_days") == 0)
    }

    @Test(arguments: ["gemini", "openai"])
    func aPhotoBecomesAnAnalysedMeal(_ provider: String) async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings(provider, standIn)) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            try await env.setProfile(user, diet: "mediterranean", zone: "Europe/Berlin")
            try await env.publish(
                ProfileUpdated(userID: user.id, dietaryPreferences: [], allergies: [.init(name: "Sesame", severity: .severe)], displayName: "Ada Lovelace", avatarURL: nil),
                userID: user.id, producer: "social")
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM profiles WHERE allergies::text LIKE '%Sesame%'") == 1 }

            let reply = try await Self.analyze(env, user, fields: [("hint", "no dressing"), ("eaten_at", "2026-11-27T12:30:00+01:00")])
            #expect(reply.status == .created, "\(reply.text)")
            let meal = reply.json
            let id = try #require(meal["id"] as? String)
            #expect(meal["name"] as? String == "Chicken with rice and broccoli")
            #expect(meal["consumed"] as? Bool == false)
            #expect(meal["photo_url"] as? String == "/v1/meals/\(id)/photo")
            #expect(meal["local_date"] as? String == "2026-11-27")
            #expect(meal["diet"] as? String == "mediterranean")
            let analysis = try #require(meal["analysis"] as? [String: Any])
            #expect(analysis["provider"] as? String == provider)
            #expect(analysis["model"] as? String == (provider == "gemini" ? "gemini-test" : "vision-test"))
            #expect(analysis["duration_ms"] is Int)
            let items = try #require(analysis["items"] as? [[String: Any]])
            #expect(items.map { $0["name"] as? String } == ["grilled chicken breast", "white rice, cooked"])
            #expect(items.map { $0["grams"] as? Double } == [150, 200])
            #expect(items.map { $0["confidence"] as? Double } == [0.9, 0.8])
            // "white rice, cooked" names a food of the table, whose values it takes and names; no
            // food holds every word of "grilled chicken breast", which keeps the model's estimate.
            #expect((items[0]["source"] as? [String: Any])?["kind"] as? String == "model")
            let source = try #require(items[1]["source"] as? [String: Any])
            #expect(source["kind"] as? String == "usda_sr")
            let number = try #require(source["ndb_number"] as? String)
            let description = try #require(source["description"] as? String)
            #expect(description.hasPrefix("Rice, white") && description.contains("cooked"), "\(description)")
            let rice = try await env.call(.get, "/v1/foods/\(number)", as: user)
            #expect(rice.json["description"] as? String == description)
            let riceKcal = try #require(rice.json[path: "per_100g.calories"] as? Double)
            let riceProtein = try #require(rice.json[path: "per_100g.protein_g"] as? Double)
            #expect((meal["items"] as? [[String: Any]])?.last?["ndb_number"] as? String == number)
            // Per-100 g × grams, totalled as a typed meal is: 247.5 kcal of the model's chicken and
            // 200 g of the table's rice.
            let totals = try #require(meal["totals"] as? [String: Any])
            #expect(totals["calories"] as? Double == ((247.5 + 2 * riceKcal) * 10).rounded() / 10)
            #expect(totals["protein_g"] as? Double == ((46.5 + 2 * riceProtein) * 10).rounded() / 10)
            #expect(meal["diet_score"] is Int)
            #expect(reply.headers[HTTPField.Name("Server-Timing")!]?.contains("provider;dur=") == true)

            // As GET shows it, and in the analysed list only.
            let read = try await env.call(.get, "/v1/meals/\(id)", as: user)
            #expect(read.json["analysis"] != nil)
            #expect((read.json["totals"] as? [String: Any])?["calories"] as? Double == totals["calories"] as? Double)
            #expect(read.headers[.eTag] == reply.headers[.eTag])
            let typed = try #require(try await env.meal(user)["id"] as? String)
            #expect(try await env.call(.get, "/v1/meals?analyzed=true", as: user).ids == [id])
            #expect(try await env.call(.get, "/v1/meals?analyzed=false", as: user).ids == [typed])
            #expect(try await env.call(.get, "/v1/meals?analyzed=maybe", as: user).status == .badRequest)
            let photo = try await env.call(.get, "/v1/meals/\(id)/photo", as: user)
            #expect(Photos.jpegSize(Array(buffer: photo.body)).map { [$0.width, $0.height] } == [2048, 1536])

            // What the provider was sent: its key, the schema, the photo at most 1024 pixels and
            // cleaned, the diet and the hint; nothing else about the user.
            let sent = try #require(standIn.received.last)
            #expect(standIn.received.count == 1)
            if provider == "gemini" {
                #expect(sent.path == "/v1beta/models/gemini-test:generateContent")
                #expect(sent.headers[HTTPField.Name("x-goog-api-key")!] == "test-key")
                let config = try #require(sent.json["generationConfig"] as? [String: Any])
                #expect(config["responseMimeType"] as? String == "application/json")
                // A call's cost is bounded, whatever the hint asks for.
                #expect(config["maxOutputTokens"] as? Int == 8_192)
                let schema = try #require(config["responseSchema"] as? [String: Any])
                #expect(schema["type"] as? String == "OBJECT")
                #expect((schema["properties"] as? [String: Any])?["items"] != nil)
            } else {
                #expect(sent.path == "/v1/chat/completions")
                #expect(sent.headers[.authorization] == "Bearer test-key")
                #expect(sent.json["model"] as? String == "vision-test")
                #expect(sent.json["max_completion_tokens"] as? Int == 8_192)
                let format = try #require(sent.json["response_format"] as? [String: Any])
                #expect(format["type"] as? String == "json_schema")
                let schema = try #require(format["json_schema"] as? [String: Any])
                #expect(schema["strict"] as? Bool == true)
                #expect(((schema["schema"] as? [String: Any])?["required"] as? [String]) == ["meal_name", "items"])
            }
            let image = try #require(VisionStandIn.image(in: sent))
            let size = try #require(Photos.jpegSize(image))
            #expect(size.width == 1024 && size.height == 768, "downscaled: \(size)")
            #expect(Photos.jpegMetadataMarkers(image).isEmpty)
            #expect(!Photos.contains(image, "iPhone"))
            // Everything but the image's bytes, whose base64 could hold any short word by chance.
            let words = VisionStandIn.textWithoutImage(sent)
            #expect(words.contains("no dressing"))
            #expect(words.contains("mediterranean"))
            for secret in [user.id.uuidString, user.id.uuidString.lowercased(), "example.com", "Sesame", "Ada", "Lovelace", "Berlin"] {
                #expect(!words.contains(secret), "\(secret) must not leave the server")
            }

            // Corrected and eaten as any meal.
            let corrected = try await env.call(
                .put, "/v1/meals/\(id)", as: user,
                json: [
                    "name": "Chicken with brown rice", "eaten_at": "2026-11-27T12:30:00+01:00",
                    "items": [
                        NutritionTestEnvironment.item("grilled chicken breast", grams: 150, calories: 247.5, protein: 46.5, carbs: 0, fat: 5.4, tags: ["poultry"]),
                        NutritionTestEnvironment.item("brown rice, cooked", grams: 200, calories: 246, protein: 5.5, carbs: 51, fat: 2, fiber: 3.2, tags: ["whole_grain"]),
                    ],
                ])
            #expect(corrected.status == .ok, "\(corrected.text)")
            #expect(corrected.json["edited"] as? Bool == true)
            #expect(corrected.json["photo_url"] as? String == "/v1/meals/\(id)/photo")
            #expect(try await env.call(.post, "/v1/meals/\(id)/consume", as: user).json["consumed"] as? Bool == true)
        }
    }

    /// An item the model named and estimated, as its answer writes one.
    static func item(_ name: String, grams: Double, kcal: Double, protein: Double, carbs: Double, fat: Double) -> String {
        """
        {"name": "\(name)", "grams": \(grams), "confidence": 0.8, "tags": [],
         "per_100g": {"calories": \(kcal), "protein_g": \(protein), "carbs_g": \(carbs), "fat_g": \(fat), "fiber_g": null, "sugar_g": null, "saturated_fat_g": null, "sodium_mg": null}}
        """
    }

    /// Analyses a photo for which the model names `items`, then hands `check` the reply and each
    /// analysed item's `source`.
    static func analysing(
        _ items: [String],
        _ check: @Sendable (NutritionTestEnvironment, NutritionTestEnvironment.User, APIReply, [[String: Any]]) async throws -> Void
    ) async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("openai", standIn)) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            standIn.always(.answer(#"{"meal_name": "A plate", "items": [\#(items.joined(separator: ","))]}"#))
            let reply = try await Self.analyze(env, user)
            #expect(reply.status == .created, "\(reply.text)")
            let analysed = try #require(reply.json[path: "analysis.items"] as? [[String: Any]])
            try await check(env, user, reply, analysed.map { $0["source"] as? [String: Any] ?? [:] })
        }
    }

    /// A name can mean another food of the same words; the table's food is taken only when it
    /// names every word as written, its energy and the energy's shares are plausible beside the
    /// model's estimate, and it is neither a stand-in nor named by a piece of a brand; else another,
    /// else the estimate.
    @Test func aMatchMustBePlausibleBesideTheModelsEstimate() async throws {
        let items = [
            Self.item("cod", grams: 150, kcal: 82, protein: 18, carbs: 0, fat: 0.7),
            // Salted dried cod, which the model saw and named "cod".
            Self.item("cod", grams: 50, kcal: 290, protein: 62, carbs: 0, fat: 2.4),
            // Porridge: USDA's "Cereals, oats, …, cooked", not "Bread, oatmeal".
            Self.item("oatmeal", grams: 240, kcal: 71, protein: 2.5, carbs: 12, fat: 1.5),
            // No food of the table is a latte; "late" is the nearest word, a correction is no match.
            Self.item("latte", grams: 240, kcal: 56, protein: 3, carbs: 4.5, fat: 3),
            // Whole milk by the estimate, not goat's milk, a few kcal farther and ranked lower.
            Self.item("milk", grams: 200, kcal: 64, protein: 3.3, carbs: 4.8, fat: 3.5),
            // A fast-food hamburger: "Rolls, hamburger or hotdog" names it too and is near in
            // energy, but draws it from carbohydrate (a bun is not the burger).
            Self.item("hamburger", grams: 110, kcal: 254, protein: 13, carbs: 24, fat: 12),
            // Plain yoghurt by the estimate; the yoghurts the table ranks first are fruit ones,
            // their energy within a factor of two but mostly sugar.
            Self.item("yogurt", grams: 150, kcal: 61, protein: 3.5, carbs: 4.7, fat: 3.3),
            // "BURGER KING, CHICKEN TENDERS" names both words, one of them only in the brand.
            Self.item("chicken burger", grams: 180, kcal: 240, protein: 15, carbs: 20, fat: 11),
            // Among the best-ranked meatballs is "Meatballs, meatless", plausible by energy and shares.
            Self.item("meatballs", grams: 120, kcal: 197, protein: 14, carbs: 7, fat: 13),
            // A brand the name holds whole is the food's own.
            Self.item("burger king whopper", grams: 270, kcal: 233, protein: 11, carbs: 19, fat: 13),
        ]
        try await Self.analysing(items) { env, user, reply, sources in
            #expect(sources.prefix(5).map { $0["kind"] as? String } == ["usda_sr", "usda_sr", "usda_sr", "model", "usda_sr"])
            #expect(sources[0]["description"] as? String == "Fish, cod, Atlantic, raw")
            #expect(sources[1]["description"] as? String == "Fish, cod, Atlantic, dried and salted")
            let oats = try #require(sources[2]["description"] as? String)
            #expect(oats.hasPrefix("Cereals, oats, ") && (oats.contains("cooked") || oats.contains("prepared")), "\(oats)")
            let milk = try #require(sources[4]["description"] as? String)
            #expect(milk.hasPrefix("Milk, ") && !milk.contains("goat"), "\(milk)")
            #expect((sources[5]["description"] as? String)?.hasPrefix("Fast foods, hamburger") == true, "\(sources[5])")
            let whopper = try #require(sources.last?["description"] as? String)
            #expect(whopper.hasPrefix("BURGER KING, WHOPPER"), "\(whopper)")
            for (source, refused) in zip(sources.suffix(5), ["Rolls, ", "Yogurt, fruit", "BURGER KING", "Meatballs, meatless"]) {
                let description = source["description"] as? String ?? ""
                #expect(source["kind"] as? String == "model" || !description.hasPrefix(refused), "\(description)")
            }
            // Each item is the table's food × grams, the others the model's estimate.
            var expected: [Double] = []
            for (source, (grams, estimate)) in zip(sources, [(150.0, 82.0), (50, 290), (240, 71), (240, 56), (200, 64), (110, 254), (150, 61), (180, 240), (120, 197), (270, 233)]) {
                guard let number = source["ndb_number"] as? String else {
                    expected.append(estimate * grams / 100)
                    continue
                }
                let food = try await env.call(.get, "/v1/foods/\(number)", as: user)
                expected.append(try #require(food.json[path: "per_100g.calories"] as? Double) * grams / 100)
            }
            let eaten = try #require(reply.json["items"] as? [[String: Any]])
            let calories = eaten.compactMap { $0["calories"] as? Double }
            #expect(calories.count == 10 && zip(calories, expected).allSatisfy { abs($0 - $1) < 0.05 }, "\(calories) against \(expected)")
        }
    }

    /// Of the plausible foods among the best named, the one nearest the estimate stands for the
    /// item: the search ranks raw bacon, sandwich steaks and corn pasta as high as what a plate
    /// holds. When even the nearest is far, the estimate stands, as it does when the foods name the
    /// item only after "with".
    @Test func theNearestOfTheBestNamedFoodsStandsForTheItem() async throws {
        let items = [
            Self.item("bacon", grams: 30, kcal: 541, protein: 37, carbs: 1.4, fat: 42),
            Self.item("steak", grams: 200, kcal: 271, protein: 25, carbs: 0, fat: 19),
            Self.item("pasta", grams: 180, kcal: 158, protein: 5.8, carbs: 31, fat: 0.9),
            Self.item("pancakes", grams: 120, kcal: 227, protein: 6.4, carbs: 28, fat: 9.7),
            // Of the ten best-named foods, the plausible ones are taco salads, ranked far below
            // the shells: the nearest is more than 0.6 away.
            Self.item("tacos", grams: 150, kcal: 226, protein: 9, carbs: 20, fat: 12),
            // The only food naming guacamole is "Tostada with guacamole", near by energy and shares:
            // a tostada, which names it only after "with".
            Self.item("guacamole", grams: 60, kcal: 155, protein: 2, carbs: 8.5, fat: 14),
            // A name that says "with" too is that food.
            Self.item("tostada with guacamole", grams: 130, kcal: 138, protein: 4.8, carbs: 12.3, fat: 8.9),
        ]
        try await Self.analysing(items) { _, _, _, sources in
            let descriptions = sources.map { $0["description"] as? String ?? "" }
            #expect(descriptions.count == 7, "\(sources)")
            #expect(descriptions[0].hasPrefix("Pork, cured, bacon, cooked"), "\(descriptions[0])")
            #expect(descriptions[1].hasPrefix("Beef, ") && descriptions[1].contains("steak") && !descriptions[1].contains("sandwich"), "\(descriptions[1])")
            #expect(descriptions[2].hasPrefix("Pasta, ") && !descriptions[2].contains("corn"), "\(descriptions[2])")
            #expect(descriptions[3].hasPrefix("Pancakes, ") && !descriptions[3].contains("dry mix"), "\(descriptions[3])")
            #expect(sources[4]["kind"] as? String == "model", "\(sources[4])")
            #expect(sources[5]["kind"] as? String == "model", "\(sources[5])")
            #expect(descriptions[6] == "Tostada with guacamole", "\(sources[6])")
        }
    }

    /// The distance adds the energy apart (a share of the estimate's), the share difference and
    /// the rank below the best-named food.
    @Test func theDistanceWeighsEnergySharesAndRank() {
        let estimate = Self.per100g(25, 0, 19)
        #expect(FoodStore.distance(estimate, rankedBelowBestBy: 0, from: estimate) == 0)
        // A tenth of the energy off is 0.1; so is 300 rank points below the best match.
        #expect(abs(FoodStore.distance(Self.per100g(27.5, 0, 20.9), rankedBelowBestBy: 0, from: estimate) - 0.1) < 1e-9)
        #expect(abs(FoodStore.distance(estimate, rankedBelowBestBy: 300, from: estimate) - 0.1) < 1e-9)
        // Below 50 kcal, a kcal counts as a fiftieth: black coffee at 2 kcal is not twice off at 1.
        #expect(abs(FoodStore.distance(Per100g(calories: 2, proteinG: 0.1, carbsG: 0, fatG: 0), rankedBelowBestBy: 0, from: Per100g(calories: 1, proteinG: 0.1, carbsG: 0, fatG: 0)) - 0.02) < 1e-9)
        // The shares count as they are: all of the energy from fat beside all from protein is 1.
        #expect(abs(FoodStore.distance(Self.per100g(0, 0, 10), rankedBelowBestBy: 0, from: Self.per100g(22.5, 0, 0)) - 1) < 1e-9)
    }

    /// Per 100 g: protein, carbohydrate and fat in grams, and the energy they make.
    static func per100g(_ protein: Double, _ carbs: Double, _ fat: Double, alcohol: Double? = nil) -> Per100g {
        Per100g(calories: 4 * protein + 4 * carbs + 9 * fat + 7 * (alcohol ?? 0), proteinG: protein, carbsG: carbs, fatG: fat, alcoholG: alcohol)
    }

    @Test func plausibleFoodsShareTheirEnergyOutAsTheEstimateDoes() {
        let burger = Self.per100g(13, 24, 12)
        #expect(!FoodStore.isPlausible(Self.per100g(9.5, 50, 3.6), beside: burger), "a bun is not the burger")
        #expect(FoodStore.isPlausible(Self.per100g(12.4, 30, 9.8), beside: burger))
        // Half the sum of the share differences: 0.25 of the energy moved is plausible, more is not.
        #expect(FoodStore.isPlausible(Per100g(calories: 100, proteinG: 18.75, carbsG: 6.25, fatG: 0), beside: Per100g(calories: 100, proteinG: 25, carbsG: 0, fatG: 0)))
        #expect(!FoodStore.isPlausible(Per100g(calories: 100, proteinG: 18.5, carbsG: 6.5, fatG: 0), beside: Per100g(calories: 100, proteinG: 25, carbsG: 0, fatG: 0)))
        // Alcohol counts in neither: an estimate for a liqueur may leave it out.
        #expect(FoodStore.isPlausible(Self.per100g(0, 30, 0, alcohol: 12), beside: Per100g(calories: 204, proteinG: 0, carbsG: 30, fatG: 0)))
        // Too little of the three to share out: only the energy counts (black coffee beside tea).
        #expect(FoodStore.isPlausible(Per100g(calories: 1, proteinG: 0.1, carbsG: 0, fatG: 0.02), beside: Per100g(calories: 1, proteinG: 0, carbsG: 0.3, fatG: 0)))
        #expect(!FoodStore.isPlausible(Self.per100g(0, 10, 0), beside: Self.per100g(0, 0.5, 0)), "the energy still counts: a cola is not a diet cola")
    }

    @Test func plausibleEnergiesAreWithinAFactorOfTwoOrAFewCalories() {
        #expect(FoodStore.isPlausible(82, beside: 90))
        #expect(FoodStore.isPlausible(180, beside: 90) && !FoodStore.isPlausible(181, beside: 90))
        #expect(FoodStore.isPlausible(45, beside: 90) && !FoodStore.isPlausible(44, beside: 100))
        #expect(!FoodStore.isPlausible(902, beside: 90), "cod liver oil is not cod")
        #expect(FoodStore.isPlausible(2, beside: 0) && FoodStore.isPlausible(20, beside: 0) && FoodStore.isPlausible(30, beside: 15))
        #expect(!FoodStore.isPlausible(37, beside: 0) && !FoodStore.isPlausible(39, beside: 1), "a cola is not a diet cola, nor a sweet tea an unsweetened one")
    }

    /// Each failure, what the client is told, and how many calls it took: an answer the schema does
    /// not allow is asked for once more; nothing else is. And whether it keeps the day's count:
    /// kept once the model worked on the photo
    /// (no food found, declined, an answer that is no use, no answer in the whole timeout), given
    /// back when the provider gave no answer of the model's (refused, failed, the server's key
    /// refused, a proxy's page).
    static let failures: [(String, VisionStandIn.Behaviour, HTTPResponse.Status, String, String?, calls: Int, counted: Bool)] = [
        ("429 with Retry-After", .rateLimited(retryAfter: "7"), .serviceUnavailable, "analyzer_unavailable", "7", 1, false),
        ("429 without", .rateLimited(retryAfter: nil), .serviceUnavailable, "analyzer_unavailable", "5", 1, false),
        ("500", .serverError, .serviceUnavailable, "analyzer_unavailable", "5", 1, false),
        ("timeout", .slow(.seconds(20), then: VisionStandIn.plate), .serviceUnavailable, "analyzer_unavailable", "5", 1, true),
        // A refused key is the server's settings, not a wait: no Retry-After, no second call.
        ("key refused", .keyRefused, .badGateway, "analysis_failed", nil, 1, false),
        // A proxy's page in place of the provider's answer: the model did not work on the photo.
        ("not JSON", .notJSON, .badGateway, "analysis_failed", nil, 2, false),
        ("tokens spent before any text", .tokensSpent, .badGateway, "analysis_failed", nil, 2, true),
        ("model text not JSON", .answer(VisionStandIn.notJSONText), .badGateway, "analysis_failed", nil, 2, true),
        ("schema broken", .answer(VisionStandIn.schemaBreaking), .badGateway, "analysis_failed", nil, 2, true),
        ("blocked", .blocked, .unprocessableContent, "analysis_refused", nil, 1, true),
        ("answer filtered", .filteredAnswer, .unprocessableContent, "analysis_refused", nil, 1, true),
        ("no food", .answer(VisionStandIn.noFood), .unprocessableContent, "no_food_found", nil, 1, true),
    ]

    /// A failure keeps no meal. Its count is given back unless the model worked on the photo: a
    /// photo of an empty table, or a hint asking for 3,000 grams (outside the schema) or for
    /// thought past the timeout, sent again and again would otherwise cost the provider's calls
    /// and the user nothing.
    @Test(arguments: ["gemini", "openai"])
    func failuresKeepNothingAndCountOnlyWhatTheModelLookedAt(_ provider: String) async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        // Long enough that a prompt answer on a machine busy with other tests comes within half of
        // it (a second ask needs that much left), and that the stand-in's silence is the model's,
        // past the 3 s a connection is given.
        try await NutritionTestEnvironment.run(Self.settings(provider, standIn, ["ANALYZER_TIMEOUT_MS": "12000"])) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 1)
            let user = try await env.user()
            for (name, behaviour, status, code, retryAfter, expectedCalls, counted) in Self.failures {
                standIn.always(behaviour)
                let before = standIn.received.count
                let reply = try await Self.analyze(env, user)
                #expect(reply.status == status, "\(name): \(reply.text)")
                #expect(reply.code == code, "\(name)")
                #expect(reply.headers[.retryAfter] == retryAfter, "\(name)")
                let calls = standIn.received.count - before
                #expect(calls == expectedCalls, "\(name): \(calls) calls")
                #expect(try await env.count("SELECT count(*) FROM meals") == 0, "\(name)")
                #expect(try await env.count("SELECT count(*) FROM meal_photos") == 0, "\(name)")
                let used = try await env.count("SELECT coalesce(sum(analyses), 0) FROM meal_analysis_days")
                #expect(used == (counted ? 1 : 0), "\(name): \(used) counted")
                if counted {
                    // The day's one analysis is spent: the next is refused before any call.
                    let over = try await Self.analyze(env, user)
                    #expect(over.code == "limit_exceeded" && standIn.received.count == before + calls, "\(name): \(over.text)")
                    try await env.execute("DELETE FROM meal_analysis_days")
                }
            }
            // One unusable answer, then a good one: the retry makes the meal.
            standIn.next(.answer(VisionStandIn.schemaBreaking), .answer(VisionStandIn.plate))
            #expect(try await Self.analyze(env, user).status == .created)
            // The day's one analysis is that one.
            standIn.always(.answer(VisionStandIn.plate))
            let over = try await Self.analyze(env, user)
            #expect(over.status == .forbidden)
            #expect(over.code == "limit_exceeded")
        }
    }

    /// An analysed item keeps its matched food's tags beside the model's: a model that tags a
    /// cheddar with nothing must not silence a cheese allergy's warning.
    @Test func anAnalysedItemKeepsItsFoodsTagsForAllergies() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("openai", standIn)) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            try await env.publish(
                ProfileUpdated(userID: user.id, dietaryPreferences: [], allergies: [.init(name: "Cheese", severity: .severe)], displayName: nil, avatarURL: nil),
                userID: user.id, producer: "social")
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM profiles WHERE allergies::text LIKE '%Cheese%'") == 1 }
            standIn.always(
                .answer(
                    """
                    {"meal_name": "Cheddar", "items": [{"name": "cheddar", "grams": 40, "confidence": 0.9, "tags": [],
                      "per_100g": {"calories": 403, "protein_g": 25, "carbs_g": 1.3, "fat_g": 33, "fiber_g": 0, "sugar_g": 0.5, "saturated_fat_g": 19, "sodium_mg": 620}}]}
                    """))
            let reply = try await Self.analyze(env, user)
            #expect(reply.status == .created, "\(reply.text)")
            let analysed = try #require((reply.json["analysis"] as? [String: Any])?["items"] as? [[String: Any]])
            #expect((analysed.first?["source"] as? [String: Any])?["kind"] as? String == "usda_sr", "\(analysed)")
            #expect((reply.json["items"] as? [[String: Any]])?.first?["tags"] as? [String] == ["cheese"])
            #expect((reply.json["allergy_warnings"] as? [[String: Any]])?.map { $0["allergy"] as? String } == ["Cheese"])
        }
    }

    /// An oil the model weighs at a tablespoon, all fat: the item's fat is its grams, not a rounding
    /// above them that would refuse the whole meal after the call.
    @Test func aTablespoonOfOilIsAnalysed() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("openai", standIn)) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            standIn.always(.answer(#"{"meal_name": "Salad", "items": [\#(Self.item("olive oil", grams: 14, kcal: 884, protein: 0, carbs: 0, fat: 100))]}"#))
            let reply = try await Self.analyze(env, user)
            #expect(reply.status == .created, "\(reply.text)")
            #expect((reply.json["items"] as? [[String: Any]])?.first?["fat_g"] as? Double == 14, "\(reply.text)")
        }
    }

    /// A provider whose connection never completes (its TLS handshake unanswered) is out of reach,
    /// though the call's whole timeout passes: the kit gives a connection 3 s
    /// (`ServiceDependencies.connectTimeout`) of its 5, and the day's count is given back.
    @Test func aProviderThatNeverCompletesTheConnectionCostsNoAnalysis() async throws {
        // Listening, never accepting: the kernel completes TCP's handshake, nobody TLS's.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        try #require(bound)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let settings = [
            "ANALYZER_PROVIDER": "openai", "ANALYZER_API_KEY": "test-key", "ANALYZER_MODEL": "vision-test",
            "ANALYZER_URL": "https://127.0.0.1:\(port)/v1", "ANALYZER_TIMEOUT_MS": "5000",
        ]
        try await NutritionTestEnvironment.run(settings) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 1)
            let user = try await env.user()
            let reply = try await Self.analyze(env, user)
            #expect(reply.status == .serviceUnavailable && reply.code == "analyzer_unavailable", "\(reply.text)")
            #expect(try await env.count("SELECT coalesce(sum(analyses), 0) FROM meal_analysis_days") == 0)
        }
    }

    /// The two calls share the timeout: an unusable answer that came late is not asked for again
    /// in the little time left, so the client is answered within the timeout, not twice it.
    @Test func aLateUnusableAnswerIsNotAskedForAgain() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        // The answer comes with less than half the timeout left, and well within it on a loaded machine.
        try await NutritionTestEnvironment.run(Self.settings("gemini", standIn, ["ANALYZER_TIMEOUT_MS": "12000"])) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            standIn.always(.slow(.milliseconds(7_500), then: VisionStandIn.schemaBreaking))
            let reply = try await Self.analyze(env, user)
            #expect(reply.status == .badGateway && reply.code == "analysis_failed", "\(reply.text)")
            #expect(standIn.received.count == 1, "asked once: a second ask would have run past the timeout")
        }
    }

    /// A model's text is cleaned, not refused, and not blamed on the client: a NUL, which PostgreSQL
    /// does not store, would otherwise end the analysis in a `400` telling the app its request was wrong.
    @Test func aModelsStrayCharactersAreCleanedFromItsNames() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("openai", standIn)) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            standIn.always(.answer(VisionStandIn.plateWithStrayCharacters))
            let reply = try await Self.analyze(env, user)
            #expect(reply.status == .created, "\(reply.text)")
            #expect(standIn.received.count == 1)
            let items = try #require(reply.json[path: "analysis.items"] as? [[String: Any]])
            #expect(items.map { $0["name"] as? String } == ["grilled chicken breast", "white rice, cooked"])
            #expect((reply.json["items"] as? [[String: Any]])?.map { $0["name"] as? String } == ["grilled chicken breast", "white rice, cooked"])
            // The model's 300 emoji, cut to the 200 code points a meal's name holds.
            #expect(reply.json["name"] as? String == String(repeating: "🍗", count: 200))
        }
    }

    /// The account deleted while the provider answers: the analysis keeps nothing of it, and what it
    /// stores while the deletion runs is deleted with the account (`holdLiveAccount`).
    @Test func anAccountDeletedDuringTheCallKeepsNothing() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("openai", standIn, ["ANALYZER_TIMEOUT_MS": "30000"])) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            #expect(try await Self.analyze(env, user).status == .created)
            // The provider answers only once the deletion has committed.
            let deletion = VisionStandIn.Gate()
            standIn.next(.held(deletion, then: VisionStandIn.plate))
            let (body, form) = Photos.form(photo: try Photos.fixture("meals/plate.heic"))
            let headers = [("Authorization", "Bearer \(user.token)"), ("Content-Type", form[.contentType]!)]
            let port = try #require(env.client.port)
            let analysis = Task { try await ConcurrentClient.send(port: port, "POST", "/v1/meals/analyze", headers: headers, body: body) }
            try await waitUntil(.seconds(10)) { standIn.received.count == 2 }
            try await env.publish(UserDeleted(userID: user.id), userID: user.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM deleted_accounts") == 1 }
            deletion.open()
            let reply = try await analysis.value
            #expect(reply.status == 401, "\(String(buffer: reply.body))")
            #expect(reply.json["code"] as? String == "account_deleted")
            try await Self.nothingKept(env)
            // Its token still holds for a while: another analysis is refused before a count or a call.
            let calls = standIn.received.count
            let late = try await Self.analyze(env, user)
            #expect(late.status == .unauthorized && late.code == "account_deleted", "\(late.text)")
            #expect(standIn.received.count == calls)
            try await Self.nothingKept(env)

            // A meal being stored while the deletion runs is waited for, and deleted with the rest.
            let other = try await env.user()
            #expect(try await Self.analyze(env, other).status == .created)
            try await env.inOpenTransaction([
                "SELECT pg_advisory_xact_lock_shared(44224, hashtext(current_schema() || ':' || '\(other.id.uuidString.lowercased())'))",
                "INSERT INTO meal_analysis_days VALUES ('\(other.id)', current_date - 1, 1)",
            ]) {
                try await env.publish(UserDeleted(userID: other.id), userID: other.id)
                try await env.awaitLockWait()
            }
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM deleted_accounts") == 2 }
            try await Self.nothingKept(env)
        }
    }

    /// A retry with the key waits for an analysis as long as it can run (two calls, each up to the
    /// timeout) before taking the key over and running it again.
    @Test func aKeysRetryWaitsAsLongAsAnAnalysisCanRun() throws {
        for (timeout, seconds) in [(1_000, 60), (20_000, 70), (45_000, 120), (300_000, 630)] {
            let config = try ServiceConfig.load(
                name: "nutrition", defaultPort: 8080,
                environment: ["ANALYZER_PROVIDER": "openai", "ANALYZER_MODEL": "vision-test", "ANALYZER_URL": "http://127.0.0.1:9/v1", "ANALYZER_TIMEOUT_MS": "\(timeout)"])
            #expect(try NutritionService.definition.setup(config).idempotencyAbandonedAfter == .seconds(seconds), "\(timeout) ms")
        }
    }

    @Test func notConfiguredSaysWhatTurnsItOn() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let reply = try await Self.analyze(env, user)
            #expect(reply.status == .serviceUnavailable)
            #expect(reply.code == "analyzer_not_configured")
            #expect(reply.text.contains("ANALYZER_PROVIDER"))
            // Everything else works.
            #expect(try await env.call(.post, "/v1/meals", as: user, json: ["name": "Lunch", "eaten_at": "2026-11-27T12:30:00Z", "items": [NutritionTestEnvironment.item()]]).status == .created)
        }
    }

    @Test func requestsRefusedBeforeAnyCall() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("gemini", standIn, ["MEAL_PHOTO_MAX_BYTES": "65536"])) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            #expect(try await env.call(.post, "/v1/meals/analyze", raw: ByteBuffer(string: "x")).status == .unauthorized)
            let long = try await Self.analyze(env, user, fields: [("hint", String(repeating: "a", count: 501))])
            #expect(long.status == .badRequest)
            #expect(long.code == "validation_failed")
            #expect(long.fieldErrors == ["hint"])
            let noOffset = try await Self.analyze(env, user, fields: [("eaten_at", "2026-11-27T12:30:00"), ("name", "")])
            #expect(noOffset.fieldErrors.sorted() == ["eaten_at", "name"])
            // What PostgreSQL would refuse in the meal's row is refused before the call, not after it.
            let invisible = try await Self.analyze(env, user, fields: [("name", "Lunch\u{0}"), ("hint", "rice\u{202E}")])
            #expect(invisible.status == .badRequest && invisible.fieldErrors.sorted() == ["hint", "name"], "\(invisible.text)")
            #expect(try await Self.analyze(env, user, fields: [("hint", "rice,\r\nno sauce")]).status == .created)
            for table in ["meal_photos", "meals", "meal_analysis_days"] { try await env.execute("DELETE FROM \(table)") }
            // Out of the range a typed meal takes: refused as it would be, not after a call.
            for when in ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"] {
                let far = try await Self.analyze(env, user, fields: [("eaten_at", when)])
                #expect(far.status == .badRequest && far.fieldErrors == ["eaten_at"], "\(when): \(far.text)")
            }
            let raw = try await env.call(.post, "/v1/meals/analyze", as: user, raw: ByteBuffer(bytes: try Photos.fixture("meals/plate.heic")), headers: [.contentType: "image/heic"])
            #expect(raw.status == .unsupportedMediaType)
            let (gif, gifHeaders) = Photos.form(photo: Array("GIF89a-not-a-photo".utf8))
            let notAPhoto = try await env.call(.post, "/v1/meals/analyze", as: user, raw: gif, headers: gifHeaders)
            #expect(notAPhoto.status == .unsupportedMediaType)
            #expect(notAPhoto.code == "unsupported_image")
            let tall = try await Self.analyze(env, user, photo: "meals/tall.png")
            #expect(tall.status == .unprocessableContent)
            #expect(tall.code == "image_too_large")
            let (big, bigHeaders) = Photos.form(photo: [UInt8](repeating: 0xFF, count: 100_000))
            let tooBig = try await env.call(.post, "/v1/meals/analyze", as: user, raw: big, headers: bigHeaders)
            #expect(tooBig.status == .contentTooLarge)
            #expect(standIn.received.count == 1, "no call for a request refused, one for the hint's line break")
            try await Self.nothingKept(env)
        }
    }

    @Test func theAllowanceIsCountedPerLocalDayAndLiftedByAPurchase() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("openai", standIn)) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            // UTC+14: its day is not the server's.
            try await env.setProfile(user, zone: "Pacific/Kiritimati")
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = TimeZone(identifier: "Pacific/Kiritimati")!
            let today = calendar.dateComponents([.year, .month, .day], from: Date())
            let yesterday = calendar.dateComponents([.year, .month, .day], from: calendar.date(byAdding: .day, value: -1, to: Date())!)
            func day(_ c: DateComponents) -> String { String(format: "%04d-%02d-%02d", c.year!, c.month!, c.day!) }
            // Yesterday's full allowance does not reach today.
            try await env.execute("INSERT INTO meal_analysis_days VALUES ('\(user.id)', '\(day(yesterday))', 3)")
            for _ in 0..<3 { #expect(try await Self.analyze(env, user).status == .created) }
            #expect(try await env.count("SELECT analyses FROM meal_analysis_days WHERE user_id = '\(user.id)' AND local_date = '\(day(today))'") == 3)
            let over = try await Self.analyze(env, user)
            #expect(over.status == .forbidden)
            #expect(over.code == "limit_exceeded")
            #expect(over.json["detail"] as? String == "You've reached the limit of 3 meal analyses today. Upgrade to Pro for more.")
            #expect(over.json["required_tier"] as? String == "pro")
            #expect(standIn.received.count == 3, "no call over the allowance")
            #expect(try await env.count("SELECT count(*) FROM meals") == 3)

            // A purchase reaches nutrition as entitlements' event: the cap is lifted at once.
            try await env.setTier(user, tier: "pro", mealAnalysesPerDay: 100)
            #expect(try await Self.analyze(env, user).status == .created)
        }
    }

    /// One user holds at most their share of the call slots: another of theirs is refused at once,
    /// while someone else's goes ahead.
    @Test func oneUserHoldsAtMostTheirShareOfTheCalls() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("gemini", standIn, ["ANALYZER_CONCURRENCY_PER_USER": "1", "ANALYZER_TIMEOUT_MS": "30000"])) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 10)
            let user = try await env.user()
            let other = try await env.user()
            let release = VisionStandIn.Gate()
            standIn.next(.held(release, then: VisionStandIn.plate))
            let (body, form) = Photos.form(photo: try Photos.fixture("meals/plate.heic"))
            let headers = [("Authorization", "Bearer \(user.token)"), ("Content-Type", form[.contentType]!)]
            let port = try #require(env.client.port)
            let first = Task { try await ConcurrentClient.send(port: port, "POST", "/v1/meals/analyze", headers: headers, body: body) }
            try await waitUntil(.seconds(10)) { standIn.received.count == 1 }
            let second = try await ConcurrentClient.send(port: port, "POST", "/v1/meals/analyze", headers: headers, body: body)
            #expect(second.status == 429 && second.json["code"] as? String == "too_many_analyses", "\(String(buffer: second.body))")
            #expect(second.headers.first(name: "Retry-After") == "1")
            #expect(try await Self.analyze(env, other).status == .created, "another user's analysis goes ahead")
            release.open()
            #expect(try await first.value.status == 201)
            #expect(try await Self.analyze(env, user).status == .created, "their share free again")
            // The refused one took no call and no count.
            #expect(standIn.received.count == 3)
            #expect(try await env.count("SELECT analyses FROM meal_analysis_days WHERE user_id = '\(user.id)'") == 2)
        }
    }

    @Test func atMostTheConcurrencyAtOnce() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        // The first call is held long enough for the second to meet it on a loaded machine, and the
        // provider's timeout is far beyond the hold: the test is about the cap, not the timeout.
        try await NutritionTestEnvironment.run(Self.settings("gemini", standIn, ["ANALYZER_CONCURRENCY": "1", "ANALYZER_TIMEOUT_MS": "30000"])) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 10)
            let user = try await env.user()
            standIn.next(.slow(.seconds(5), then: VisionStandIn.plate))
            // Over connections of their own: the harness's client sends one request at a time.
            let (body, form) = Photos.form(photo: try Photos.fixture("meals/plate.heic"))
            let headers = [("Authorization", "Bearer \(user.token)"), ("Content-Type", form[.contentType]!)]
            let port = try #require(env.client.port)
            let first = Task {
                let reply = try await ConcurrentClient.send(port: port, "POST", "/v1/meals/analyze", headers: headers, body: body)
                return (reply, answered: ContinuousClock.now)
            }
            try await waitUntil(.seconds(10)) { standIn.received.count == 1 }
            let second = try await ConcurrentClient.send(port: port, "POST", "/v1/meals/analyze", headers: headers, body: body)
            let secondAnswered = ContinuousClock.now
            #expect(second.status == 503)
            #expect(second.json["code"] as? String == "analyzer_busy")
            #expect(second.headers.first(name: "Retry-After") == "1")
            let (firstReply, firstAnswered) = try await first.value
            // Refused while the first call was still held, not queued behind it: an order, which a
            // loaded machine cannot turn around the way it can stretch a time.
            #expect(secondAnswered < firstAnswered, "refused at once, not queued")
            #expect(firstReply.status == 201)
            #expect(try await Self.analyze(env, user).status == .created, "free again")
            #expect(standIn.received.count == 2)
        }
    }

    @Test func aRetryWithTheSameKeyIsAnsweredAsTheFirst() async throws {
        let standIn = try await VisionStandIn.start()
        defer { standIn.stop() }
        try await NutritionTestEnvironment.run(Self.settings("gemini", standIn)) { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            let key: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "analyze-1"]
            let first = try await Self.analyze(env, user, headers: key)
            #expect(first.status == .created)
            // A retry is a new body with a new boundary, as clients draw one for each request: the
            // same fields and photo are the same request.
            let again = try await Self.analyze(env, user, headers: key, boundary: "retry-\(UUID())")
            #expect(again.status == .created && again.headers[HTTPField.Name("Idempotent-Replayed")!] == "true", "\(again.text)")
            #expect(again.json["id"] as? String == first.json["id"] as? String)
            #expect(standIn.received.count == 1, "the model was asked once")
            #expect(try await env.count("SELECT count(*) FROM meals") == 1)
            #expect(try await env.count("SELECT analyses FROM meal_analysis_days") == 1)
            // The same key with another photo is another request: refused.
            let other = try await Self.analyze(env, user, photo: "meals/plate.png", headers: key)
            #expect(other.status == .unprocessableContent)
            #expect(other.code == "idempotency_key_reused")
            // No food found is counted: a retry with its key is told so again, not counted again.
            standIn.always(.answer(VisionStandIn.noFood))
            let noFoodKey: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "analyze-no-food"]
            let noFood = try await Self.analyze(env, user, headers: noFoodKey)
            #expect(noFood.status == .unprocessableContent && noFood.code == "no_food_found", "\(noFood.text)")
            let noFoodAgain = try await Self.analyze(env, user, headers: noFoodKey, boundary: "retry-\(UUID())")
            #expect(noFoodAgain.code == "no_food_found" && noFoodAgain.headers[HTTPField.Name("Idempotent-Replayed")!] == "true", "\(noFoodAgain.text)")
            #expect(standIn.received.count == 2, "the model was asked once for each photo")
            #expect(try await env.count("SELECT analyses FROM meal_analysis_days") == 2)
            // So is an answer of no use (outside the schema twice): a 502 told again, the model
            // not asked again, the day's analysis not counted again.
            standIn.always(.answer(VisionStandIn.schemaBreaking))
            let uselessKey: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "analyze-useless"]
            let useless = try await Self.analyze(env, user, headers: uselessKey)
            #expect(useless.status == .badGateway && useless.code == "analysis_failed", "\(useless.text)")
            let uselessAgain = try await Self.analyze(env, user, headers: uselessKey, boundary: "retry-\(UUID())")
            #expect(uselessAgain.code == "analysis_failed" && uselessAgain.headers[HTTPField.Name("Idempotent-Replayed")!] == "true", "\(uselessAgain.text)")
            #expect(standIn.received.count == 4, "asked twice for the one photo, and not again")
            #expect(try await env.count("SELECT analyses FROM meal_analysis_days") == 3)
            let hinted = try await Self.analyze(env, user, fields: [("hint", "no dressing")], headers: key)
            #expect(hinted.code == "idempotency_key_reused", "another field is another request")
            // A keyed body is read, to be hashed, as far as the route reads a photo
            // (`MEAL_PHOTO_MAX_BYTES` and the form): larger than a JSON body, it reaches the route,
            // which finds no image in it; past the photo's limit, it is 413 before the route runs.
            for (bytes, status, code) in [(3 << 20, HTTPResponse.Status.unsupportedMediaType, "unsupported_image"), (11 << 20, .contentTooLarge, "payload_too_large")] {
                let (body, headers) = Photos.form(photo: [UInt8](repeating: 0xFF, count: bytes))
                var keyed = headers
                keyed[HTTPField.Name("Idempotency-Key")!] = "analyze-\(bytes)"
                let response = try await env.call(.post, "/v1/meals/analyze", as: user, raw: body, headers: keyed)
                #expect(response.status == status && response.code == code, "\(bytes): \(response.text)")
            }
            #expect(standIn.received.count == 4)
        }
    }
}
