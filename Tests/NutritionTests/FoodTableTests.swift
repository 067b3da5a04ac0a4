import Foundation
import Testing
import TestSupport

@testable import Nutrition

/// The food composition table (USDA SR24) through HTTP: search with plurals and typos, one food,
/// and meals whose items name a food and grams.
@Suite(.serialized) struct FoodTableTests {
    typealias Env = NutritionTestEnvironment

    @Test func searchFindsWhatAPersonMeansWithPluralsAndTypos() async throws {
        try await Env.run { env in
            let user = try await env.user()
            func first(_ query: String) async throws -> [String: Any]? {
                let reply = try await env.call(.get, "/v1/foods?q=\(query.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&limit=5", as: user)
                #expect(reply.status == .ok, "\(query)")
                return (reply.json["items"] as? [[String: Any]])?.first
            }
            let rice = try #require(try await first("brown rice"))
            #expect((rice["description"] as? String)?.hasPrefix("Rice, brown") == true)
            #expect(rice["source"] as? String == "USDA SR24")
            let bananas = try #require(try await first("bananas"))
            #expect(bananas["description"] as? String == "Bananas, raw" && bananas["ndb_number"] as? String == "09040")
            #expect(bananas[path: "per_100g.calories"] as? Double == 89 && bananas[path: "per_100g.carbs_g"] as? Double == 22.84)
            #expect((bananas["tags"] as? [String]) == ["fruit"])
            #expect((bananas["portions"] as? [[String: Any]])?.contains { $0["unit"] as? String == "cup, sliced" && $0["grams"] as? Double == 150 } == true)
            #expect(try await first("banana")?["ndb_number"] as? String == "09040", "the singular finds the plural")
            // "Chicken breast" means the bird's breast, not the deli slices USDA names "Chicken breast, …":
            // the kind the query names ("Chicken") counts, and broilers are chicken's usual form.
            for query in ["chicken breast", "chiken breast"] {
                let chicken = try #require(try await first(query))
                #expect((chicken["description"] as? String)?.hasPrefix("Chicken, broilers or fryers, breast") == true, "\(chicken["description"] ?? "")")
                #expect(chicken["tags"] as? [String] == ["poultry"])
            }
            // A query naming only a kind lists its usual form, not a rare one with a short name.
            #expect((try await first("chicken")?["description"] as? String)?.hasPrefix("Chicken, broilers or fryers") == true)
            #expect((try await first("rice")?["description"] as? String)?.hasPrefix("Rice, white, long-grain") == true)
            let beef = try #require(try await first("beef")?["description"] as? String)
            #expect(beef.hasPrefix("Beef, ") && !beef.contains("bologna") && !beef.contains("cured"), "\(beef)")
            #expect(try await first("strawberies")?["description"] as? String == "Strawberries, raw")
            // A stand-in named as its kind ranks after the food itself, unless asked for.
            let plainChicken = try #require(try await first("chicken"))
            #expect((plainChicken["tags"] as? [String])?.contains("poultry") == true, "\(plainChicken["description"] ?? "")")
            #expect((try await first("sausage")?["description"] as? String).map { !$0.contains("meatless") } == true)
            #expect(try await first("chicken meatless")?["description"] as? String == "Chicken, meatless")
            #expect((try await first("sour cream")?["description"] as? String).map { !$0.contains("imitation") } == true)
            #expect(try await first("olive oil")?["tags"] as? [String] == ["olive_oil"])
            #expect(try await first("whole milk")?["ndb_number"] as? String == "01077")
            // No food is Greek yogurt, and "greek" is corrected to "green": yogurts, which hold the word as
            // typed, come before green peppers, which hold only the guess.
            let yogurt = try #require(try await first("greek yogurt")?["description"] as? String)
            #expect(yogurt.hasPrefix("Yogurt"), "\(yogurt)")
            // Foods holding every word only by a guess ("greek salad" read as "green salad") do not hide
            // those whose kind holds a word as typed ("Salad dressing, …"), which follow.
            let salads = try await env.call(.get, "/v1/foods?q=greek%20salad&limit=6", as: user).json["items"] as? [[String: Any]] ?? []
            let saladNames = salads.compactMap { $0["description"] as? String }
            #expect(saladNames.first == "Salad dressing, green goddess, regular", "\(saladNames)")
            #expect(saladNames.dropFirst().allSatisfy { $0.lowercased().contains("salad") && !$0.lowercased().contains("green") } && saladNames.count == 6, "\(saladNames)")
            // A word corrected to another form of itself ("chickens": no food says it) is no guess.
            func page(_ query: String) async throws -> [String] {
                let reply = try await env.call(.get, "/v1/foods?q=\(query.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&limit=6", as: user)
                return (reply.json["items"] as? [[String: Any]])?.compactMap { $0["ndb_number"] as? String } ?? []
            }
            let chickenKale = try await page("chicken kale")
            let chickensKale = try await page("chickens kale")
            #expect(chickenKale.count == 6 && chickensKale == chickenKale)
            #expect(try await first("xyzzyq") == nil)
            // Stop words are not corrected into food words ("how" is not "hot", "it" not "item").
            #expect(try await first("how is it") == nil)
            #expect(try await first("the bananas")?["ndb_number"] as? String == "09040")
            // A form nobody eats as it is (powder, condensed, a dry mix) comes after the ready one unless
            // the query names it: a cup of coffee is not 240 g of instant powder.
            #expect(try await first("coffee")?["description"] as? String == "Coffee, instant, decaffeinated, powder, prepared with water")
            #expect((try await first("tomato soup")?["description"] as? String).map { !$0.contains("condensed") } == true)
            #expect((try await first("condensed tomato soup")?["description"] as? String).map { $0.contains("condensed") } == true)
            #expect(try await first("cocoa")?["description"] as? String == "Cocoa, dry powder, unsweetened", "when all of a kind are so, they still lead")
            #expect(try await first("orange juice")?["description"] as? String == "Orange juice, chilled, includes from concentrate", "from concentrate is ready")
            // A letter with a mark is the letter: USDA writes "jalapeno".
            #expect((try await first("jalapeño")?["description"] as? String)?.contains("jalapeno") == true)
            // Where USDA names a food by its class first, the part after it is the food's kind:
            // "cod" is the fish, not "Fish oil, cod liver"; "salmon" is the fish as sold, with no food
            // of USDA's Alaska Native group among the first five; a query naming the class and the
            // kind's words still names the kind; a kind named first comes before the same kind read
            // after a class.
            func firstNames(_ query: String, _ limit: Int) async throws -> [String] {
                let reply = try await env.call(.get, "/v1/foods?q=\(query.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&limit=\(limit)", as: user)
                return (reply.json["items"] as? [[String: Any]])?.compactMap { $0["description"] as? String } ?? []
            }
            #expect((try await first("cod")?["description"] as? String)?.hasPrefix("Fish, cod, ") == true)
            let salmon = try await firstNames("salmon", 5)
            #expect(salmon.first?.hasPrefix("Fish, salmon, ") == true && salmon.count == 5 && !salmon.contains { $0.contains("Alaska Native") }, "\(salmon)")
            #expect((try await first("beer")?["description"] as? String)?.hasPrefix("Alcoholic beverage, beer, ") == true)
            #expect((try await first("vodka")?["description"] as? String)?.hasPrefix("Alcoholic beverage, distilled, vodka") == true)
            #expect(try await first("cinnamon")?["description"] as? String == "Spices, cinnamon, ground")
            #expect(try await first("basil")?["description"] as? String == "Basil, fresh")
            #expect((try await first("pumpkin seeds")?["description"] as? String)?.hasPrefix("Seeds, pumpkin and squash seed") == true)
            #expect((try await first("scallops")?["description"] as? String)?.hasPrefix("Mollusks, scallop") == true)
            #expect((try await first("fish oil")?["description"] as? String)?.hasPrefix("Fish oil, ") == true)
            #expect((try await first("chocolate milk")?["description"] as? String)?.hasPrefix("Milk, chocolate") == true)
            // Two words that foods write as one are that word, unless more foods hold them apart.
            #expect((try await first("soy milk")?["description"] as? String)?.hasPrefix("Soymilk") == true)
            #expect(try await first("flax seed")?["description"] as? String == "Seeds, flaxseed")
            #expect((try await first("pea nut butter")?["description"] as? String)?.hasPrefix("Peanut butter") == true, "a word after a joined pair counts")
            #expect(Set(try await firstNames("corn bread fruit cake", 2).map { $0.components(separatedBy: ", ")[1] }) == ["cornbread", "fruitcake"])
            #expect((try await first("low fat yogurt")?["description"] as? String)?.contains("low fat") == true)
            #expect((try await first("milk shake")?["description"] as? String)?.hasPrefix("Milk shakes") == true)
            #expect((try await first("meat loaf")?["description"] as? String)?.hasPrefix("Beef, ground") == true)
            #expect(try await first("poppy seed")?["description"] as? String == "Spices, poppy seed", "two oils beside one spice join nothing")
            // A query names a class food's kind only when it names the class too, or the whole kind:
            // "pita" is the bread, not "Snacks, pita chips".
            #expect((try await first("pita")?["description"] as? String)?.hasPrefix("Bread, pita") == true)
            // A food is found by what people call it, and such a name names its kind; a query naming
            // another kind too still finds that kind.
            #expect((try await first("oatmeal")?["description"] as? String)?.hasPrefix("Cereals, oats, ") == true)
            #expect((try await first("oatmeal cookies")?["description"] as? String)?.hasPrefix("Cookies, oatmeal") == true)
            #expect((try await first("bacon")?["description"] as? String)?.hasPrefix("Pork, cured, bacon") == true)
            #expect(try await first("turkey bacon")?["description"] as? String == "Turkey bacon, cooked")
            #expect((try await first("fries")?["description"] as? String)?.hasPrefix("Potatoes, french fried") == true)
            #expect((try await first("donuts")?["description"] as? String)?.hasPrefix("Doughnuts") == true)
            #expect((try await first("diet coke")?["description"] as? String)?.hasPrefix("Carbonated beverage, low calorie, cola") == true)
            for query in ["coke", "soda"] {
                #expect((try await first(query)?["description"] as? String)?.hasPrefix("Carbonated beverage, cola") == true, "\(query): not the diet cola")
            }
            #expect((try await first("hot dog")?["description"] as? String)?.hasPrefix("Frankfurter") == true)
            // A query naming more than a common name does not take its kind: hot wings are no hot dogs.
            #expect((try await first("hot wings")?["description"] as? String).map { !$0.hasPrefix("Frankfurter") } == true)
            // Fast foods and restaurant dishes are named by their class first: a hamburger is the
            // burger, not "Rolls, hamburger or hotdog"; a kind's generic foods still come first; and
            // what a counter adds to its croissants does not change which croissant is usual.
            #expect((try await first("hamburger")?["description"] as? String)?.hasPrefix("Fast foods, hamburger") == true)
            #expect(try await first("fried rice")?["description"] as? String == "Restaurant, Chinese, fried rice")
            #expect((try await first("onion rings")?["description"] as? String)?.hasPrefix("Onion rings, breaded") == true)
            #expect(try await first("croissant")?["description"] as? String == "Croissants, butter")
        }
    }

    @Test func searchPagesAndRefusesBadQueries() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let firstPage = try await env.call(.get, "/v1/foods?q=rice&limit=3", as: user)
            let cursor = try #require(firstPage.json["next_cursor"] as? String)
            let secondPage = try await env.call(.get, "/v1/foods?q=rice&limit=3&cursor=\(cursor)", as: user)
            let seen = ((firstPage.json["items"] as? [[String: Any]]) ?? []) + ((secondPage.json["items"] as? [[String: Any]]) ?? [])
            #expect(Set(seen.compactMap { $0["ndb_number"] as? String }).count == 6, "no food twice across pages")
            #expect(try await env.call(.get, "/v1/foods", as: user).fieldErrors == ["q"])
            #expect(try await env.call(.get, "/v1/foods?q=%20%20", as: user).fieldErrors == ["q"])
            #expect(try await env.call(.get, "/v1/foods?q=\(String(repeating: "a", count: 101))", as: user).fieldErrors == ["q"])
            #expect(try await env.call(.get, "/v1/foods?q=a%00b", as: user).fieldErrors == ["q"])
            #expect(try await env.call(.get, "/v1/foods?q=rice&limit=0", as: user).fieldErrors == ["limit"])
            #expect(try await env.call(.get, "/v1/foods?q=rice&cursor=nope", as: user).status == .badRequest)
            // A cursor is its search's: a rank means nothing for another query.
            let elsewhere = try await env.call(.get, "/v1/foods?q=banana&limit=3&cursor=\(cursor)", as: user)
            #expect(elsewhere.status == .badRequest && elsewhere.code == "invalid_cursor", "\(elsewhere.text)")
            #expect(try await env.call(.get, "/v1/foods?q=RICE&limit=3&cursor=\(cursor)", as: user).status == .ok, "the same words in another case")
            #expect(try await env.call(.get, "/v1/foods?q=rice").status == .unauthorized)
            // Words the text search treats as its own syntax are only words here.
            #expect(try await env.call(.get, "/v1/foods?q=%27%20OR%201%3D1%20--%20%21%26%7C", as: user).status == .ok)
        }
    }

    /// A search answered once is answered again from memory (the table changes only with a
    /// migration): with the table renamed away the same query, in another case and spacing, still
    /// gets the same answer; with the cache off it is searched again.
    @Test(arguments: [true, false])
    func aSearchIsKeptForTheLifeOfTheProcess(_ kept: Bool) async throws {
        try await Env.run(kept ? [:] : ["FOOD_SEARCH_CACHE_SIZE": "0"]) { env in
            let user = try await env.user()
            let first = try await env.call(.get, "/v1/foods?q=brown%20rice&limit=3", as: user)
            #expect(first.status == .ok)
            try await env.execute("ALTER TABLE foods RENAME TO foods_away")
            let again = try await env.call(.get, "/v1/foods?q=Brown%20%20Rice&limit=3", as: user)
            try await env.execute("ALTER TABLE foods_away RENAME TO foods")
            if kept {
                #expect(again.status == .ok && again.text == first.text)
            } else {
                #expect(again.status == .internalServerError || again.status == .serviceUnavailable, "\(again.status)")
            }
            // The same foods once the table is back (a cursor made anew may differ in its bytes: its
            // keys' order).
            func numbers(_ reply: APIReply) -> [String] { (reply.json["items"] as? [[String: Any]] ?? []).compactMap { $0["ndb_number"] as? String } }
            let after = try await env.call(.get, "/v1/foods?q=Brown%20%20Rice&limit=3", as: user)
            #expect(numbers(after) == numbers(first) && numbers(first).count == 3)
        }
    }

    @Test func oneFoodByItsNumber() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let rice = try await env.call(.get, "/v1/foods/20037", as: user)
            #expect(rice.status == .ok)
            #expect(rice.json["description"] as? String == "Rice, brown, long-grain, cooked")
            #expect(rice.json[path: "per_100g.calories"] as? Double == 111 && rice.json[path: "per_100g.fiber_g"] as? Double == 1.8)
            #expect(Set(rice.json["tags"] as? [String] ?? []) == ["grain", "whole_grain"])
            #expect(try await env.call(.get, "/v1/foods/99999", as: user).status == .notFound)
            #expect(try await env.call(.get, "/v1/foods/abc", as: user).status == .notFound)
            #expect(try await env.call(.get, "/v1/foods/20037").status == .unauthorized)
        }
    }

    /// A food's tags come from USDA's food group (its number's first two digits) and its name's kind,
    /// by the rules docs/API.md lists.
    @Test func tagsComeFromUSDAsGroupsAndNames() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let expected: [String: Set<String>] = [
                "01009": ["cheese"], "01123": ["egg"], "05062": ["poultry"], "07022": ["processed_meat"], "10123": ["processed_meat", "red_meat"],
                "12061": ["nuts"], "13047": ["red_meat"], "14003": ["alcohol"], "15076": ["fish"], "15149": ["seafood"], "16057": ["legume"],
                "19296": ["honey"],
            ]
            for (number, tags) in expected {
                let food = try await env.call(.get, "/v1/foods/\(number)", as: user)
                #expect(Set(food.json["tags"] as? [String] ?? ["missing"]) == tags, "\(number) \(food.json["description"] ?? "")")
            }
        }
    }

    /// An item may name a food and grams: the table's amounts are filled in, scored as typed items
    /// are, and the number kept with it; an unknown number names the item.
    @Test func aMealItemNamingAFoodTakesTheTablesAmounts() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let posted = try await env.call(
                .post, "/v1/meals", as: user,
                json: ["name": "Lunch", "eaten_at": "\(Env.year)-06-01T12:00:00Z", "items": [["ndb_number": "20037", "grams": 195], Env.item()]])
            #expect(posted.status == .created)
            let rice = try #require((posted.json["items"] as? [[String: Any]])?.first)
            #expect(rice["name"] as? String == "Rice, brown, long-grain, cooked" && rice["ndb_number"] as? String == "20037")
            #expect(rice["calories"] as? Double == 216.45, "111 kcal in 100 g × 1.95")
            #expect(Set(rice["tags"] as? [String] ?? []) == ["grain", "whole_grain"])
            let id = try #require(posted.json["id"] as? String)

            // Corrected to another food and portion by number, with the user's own name for it.
            let put = try await env.call(
                .put, "/v1/meals/\(id)", as: user,
                json: ["name": "Lunch", "eaten_at": "\(Env.year)-06-01T12:00:00Z", "items": [["ndb_number": "09040", "grams": 118, "name": "Banana"]]])
            #expect(put.status == .ok)
            let banana = try #require((put.json["items"] as? [[String: Any]])?.first)
            #expect(banana["name"] as? String == "Banana" && banana["ndb_number"] as? String == "09040")
            #expect(abs((banana["calories"] as? Double ?? 0) - 105.02) < 0.001)
            #expect(put.json["edited"] as? Bool == true)

            // A number with amounts keeps the amounts given.
            var given = Env.item()
            given["ndb_number"] = "09040"
            let kept = try await env.call(.post, "/v1/meals", as: user, json: ["name": "x", "eaten_at": "\(Env.year)-06-01T12:00:00Z", "items": [given]])
            #expect(kept.status == .created && (kept.json["items"] as? [[String: Any]])?.first?["calories"] as? Double == given["calories"] as? Double)

            func post(_ items: [[String: Any]]) async throws -> APIReply {
                try await env.call(.post, "/v1/meals", as: user, json: ["name": "x", "eaten_at": "\(Env.year)-06-01T12:00:00Z", "items": items])
            }
            #expect(try await post([Env.item(), ["ndb_number": "99999", "grams": 100]]).fieldErrors == ["items[1].ndb_number"])
            #expect(try await post([["ndb_number": "20037", "grams": 0]]).fieldErrors == ["items[0].grams"])
            #expect(try await post([["ndb_number": "20037", "grams": 1e300]]).fieldErrors == ["items[0].grams"], "named as itself, not as its amounts")
            #expect(try await post([["ndb_number": "20037", "grams": 100, "protein_g": 10]]).status == .badRequest, "amounts without calories")
            #expect(try await post(Array(repeating: ["ndb_number": "20037", "grams": 100], count: 51)).fieldErrors == ["items"])
            #expect(try await post([["ndb_number": "20037"]]).status == .badRequest, "grams missing")
            #expect(try await post([["ndb_number": 20037, "grams": 100]]).status == .badRequest, "a number where text belongs")
            #expect(try await post([["ndb_number": String(repeating: "1", count: 5000), "grams": 100]]).fieldErrors == ["items[0].ndb_number"])
            // The table's own measurements: bearded seal oil's protein and fat come to 100.16 g in 100 g,
            // cold-pressed flaxseed oil's to 100.09 g. Every food of the table can be logged.
            let oils = try await post([["ndb_number": "35057", "grams": 100], ["ndb_number": "42231", "grams": 15]])
            #expect(oils.status == .created, "\(oils.text)")
            // Olive oil is all fat: a tablespoon's fat is its grams, though 100 × 14 / 100 in floating
            // point is a rounding above 14.
            let oil = try await post([["ndb_number": "04053", "grams": 14], ["ndb_number": "04053", "grams": 28]])
            #expect(oil.status == .created, "\(oil.text)")
            #expect((oil.json["items"] as? [[String: Any]])?.map { $0["fat_g"] as? Double } == [14, 28])
            #expect(try await env.count("SELECT count(*) FROM meals WHERE user_id = '\(user.id)'") == 4, "no refused meal was kept")
        }
    }

    /// The loader refuses a file that would close its quote.
    @Test func theTableFileCannotCloseItsQuote() {
        #expect(throws: FoodTable.Unusable.self) { try FoodTable.migration(json: "[{\"description\": \"$foods$\"}]") }
    }
}
