import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// What the vision model said of an analysed meal, kept with it and shown as `analysis`.
struct MealAnalysis: Codable, Sendable, Equatable {
    struct Source: Codable, Sendable, Equatable {
        /// "usda_sr": the food composition table's values × grams; "model": the model's own estimate.
        var kind: String
        var ndbNumber: String?
        var description: String?
        enum CodingKeys: String, CodingKey { case description, kind, ndbNumber = "ndb_number" }
    }

    struct Item: Codable, Sendable, Equatable {
        var name: String
        var grams: Double
        var confidence: Double
        var source: Source
        enum CodingKeys: String, CodingKey { case confidence, grams, name, source }
    }

    var provider: String
    var model: String
    var items: [Item]
    /// The provider's time, retries included.
    var durationMs: Int

    /// In the order of their names, as answers are written.
    enum CodingKeys: String, CodingKey { case durationMs = "duration_ms", items, model, provider }
}

/// Energy and nutrients in 100 g of a food.
struct Per100g: Codable, Sendable, Equatable {
    var calories: Double
    var proteinG: Double
    var carbsG: Double
    var fatG: Double
    var fiberG: Double?
    var sugarG: Double?
    var saturatedFatG: Double?
    var sodiumMg: Double?
    var alcoholG: Double?

    enum CodingKeys: String, CodingKey {
        case calories, proteinG = "protein_g", carbsG = "carbs_g", fatG = "fat_g", fiberG = "fiber_g", sugarG = "sugar_g", saturatedFatG = "saturated_fat_g"
        case sodiumMg = "sodium_mg", alcoholG = "alcohol_g"
    }

    /// The item for `grams` of the food: each amount × grams / 100. Fibre and sugars are held to the
    /// carbohydrate and saturated fat to the fat they are part of, as `MealItem` requires, whatever
    /// an estimate said; and protein, carbohydrate, fat and alcohol to the grams. An oil's 100 g of
    /// fat in 100 g comes out a rounding above the grams for many portions (100 × 0.14 is
    /// 14.000000000000002), which `MealItem` would refuse.
    func item(named name: String, grams: Double, tags: [String]?) -> MealItem {
        let f = grams / 100
        func part(_ value: Double?, of whole: Double) -> Double? { value.map { min($0 * f, whole) } }
        let carbs = min(carbsG * f, grams)
        let fat = min(fatG * f, grams)
        return MealItem(
            name: name, grams: grams, calories: calories * f, proteinG: min(proteinG * f, grams), carbsG: carbs, fatG: fat, fiberG: part(fiberG, of: carbs),
            sugarG: part(sugarG, of: carbs), saturatedFatG: part(saturatedFatG, of: fat), sodiumMg: sodiumMg.map { min($0 * f, grams * 400) },
            alcoholG: part(alcoholG, of: grams), tags: tags)
    }
}

/// A food of the composition table that an item's name matched.
struct MatchedFood: Sendable, Equatable {
    var ndbNumber: String
    var description: String
    var per100g: Per100g
    /// The table's tags for the food (from USDA's classification), which the item keeps beside the
    /// model's: a model that leaves out the nuts in a satay sauce must not leave out its warning.
    var tags: [String]
}

/// The model's answer, as the JSON schema sent with each request describes it.
struct ModelAnswer: Sendable, Equatable {
    struct Item: Sendable, Equatable {
        var name: String
        var grams: Double
        var confidence: Double
        var tags: [String]
        var per100g: Per100g
    }

    var mealName: String
    var items: [Item]

    static let maxItems = 30

    private struct Wire: Decodable {
        struct Food: Decodable {
            var name: String
            var grams: Double
            var confidence: Double
            var tags: [String]
            var per100g: Per100g
            enum CodingKeys: String, CodingKey { case confidence, grams, name, per100g = "per_100g", tags }
        }
        var mealName: String
        var items: [Food]
        enum CodingKeys: String, CodingKey { case items, mealName = "meal_name" }
    }

    /// Reads the model's JSON text; anything the schema does not allow (a missing or mistyped field,
    /// an amount out of its range, an unknown tag, macros over 100 g in 100 g) is `nil`.
    init?(json text: String) {
        guard let wire = try? JSONDecoder().decode(Wire.self, from: Data(text.utf8)), wire.items.count <= Self.maxItems else { return nil }
        var parsed: [Item] = []
        for food in wire.items {
            // A model's text is cleaned, not refused: a stray control or zero-width character (a NUL
            // PostgreSQL would not store) costs the user nothing they wrote.
            let name = food.name.withoutInvisibleCharacters.trimmingCharacters(in: .whitespacesAndNewlines)
            var n = food.per100g
            // Alcohol is not asked for: a model's value would not be the schema's.
            n.alcoholG = nil
            let amounts = [food.grams, food.confidence, n.calories, n.proteinG, n.carbsG, n.fatG] + [n.fiberG, n.sugarG, n.saturatedFatG, n.sodiumMg].compactMap { $0 }
            guard (1...200).contains(name.unicodeScalars.count), amounts.allSatisfy({ $0.isFinite && $0 >= 0 }),
                food.grams > 0, food.grams <= 2_000, food.confidence <= 1, n.calories <= 900,
                n.proteinG + n.carbsG + n.fatG <= 100, (n.sodiumMg ?? 0) <= 40_000,
                food.tags.count <= 20, food.tags.allSatisfy(FoodTags.all.contains)
            else { return nil }
            parsed.append(Item(name: name, grams: food.grams, confidence: food.confidence, tags: Array(Set(food.tags)).sorted(), per100g: n))
        }
        // At most a meal name's 200 code points (what a typed meal's name may hold).
        let mealName = wire.mealName.withoutInvisibleCharacters.trimmingCharacters(in: .whitespacesAndNewlines)
        self.mealName = String(String.UnicodeScalarView(mealName.unicodeScalars.prefix(200))).trimmingCharacters(in: .whitespacesAndNewlines)
        items = parsed
    }

    /// The answer's JSON schema, in JSON Schema's words (the Chat Completions shape, strict: every
    /// field required, nothing else allowed; optional nutrients are nullable).
    static var jsonSchema: [String: Any] {
        func number(_ description: String, nullable: Bool = false) -> [String: Any] {
            ["type": nullable ? ["number", "null"] : "number", "description": description]
        }
        let per100g: [String: Any] = [
            "type": "object", "additionalProperties": false,
            "required": ["calories", "protein_g", "carbs_g", "fat_g", "fiber_g", "sugar_g", "saturated_fat_g", "sodium_mg"],
            "properties": [
                "calories": number("kcal in 100 g"), "protein_g": number("grams of protein in 100 g"), "carbs_g": number("grams of carbohydrate (fibre included) in 100 g"),
                "fat_g": number("grams of fat in 100 g"), "fiber_g": number("grams of fibre in 100 g", nullable: true),
                "sugar_g": number("grams of sugars in 100 g", nullable: true), "saturated_fat_g": number("grams of saturated fat in 100 g", nullable: true),
                "sodium_mg": number("milligrams of sodium in 100 g", nullable: true),
            ],
        ]
        let item: [String: Any] = [
            "type": "object", "additionalProperties": false, "required": ["name", "grams", "confidence", "tags", "per_100g"],
            "properties": [
                "name": ["type": "string", "description": "the food, as a food composition table names it (\"brown rice, cooked\")"],
                "grams": number("grams of it on the plate"),
                "confidence": number("0 to 1: how sure the food and its amount are"),
                "tags": ["type": "array", "items": ["type": "string", "enum": FoodTags.all.sorted()]],
                "per_100g": per100g,
            ],
        ]
        return [
            "type": "object", "additionalProperties": false, "required": ["meal_name", "items"],
            "properties": [
                "meal_name": ["type": "string", "description": "a short name for the meal"],
                "items": ["type": "array", "items": item, "description": "every food seen; empty when the photo shows no food"],
            ],
        ]
    }

    /// The same schema in the Gemini API's `Schema` object (an OpenAPI 3.0 subset: upper-case
    /// types, `nullable` rather than a type list, no `additionalProperties`).
    static var geminiSchema: [String: Any] {
        func convert(_ schema: [String: Any]) -> [String: Any] {
            var out: [String: Any] = [:]
            if let types = schema["type"] as? [String] {
                out["type"] = types.first { $0 != "null" }!.uppercased()
                out["nullable"] = true
            } else if let type = schema["type"] as? String {
                out["type"] = type.uppercased()
            }
            if let description = schema["description"] { out["description"] = description }
            if let values = schema["enum"] {
                out["enum"] = values
                out["format"] = "enum"
            }
            if let required = schema["required"] { out["required"] = required }
            if let properties = schema["properties"] as? [String: Any] {
                out["properties"] = properties.mapValues { convert($0 as! [String: Any]) }
                out["propertyOrdering"] = (schema["required"] as? [String]) ?? properties.keys.sorted()
            }
            if let items = schema["items"] as? [String: Any] { out["items"] = convert(items) }
            return out
        }
        return convert(jsonSchema)
    }

    static let instructions = """
        You look at a photo of a meal and list the foods on it. For each food give the name a food \
        composition table would use, the grams on the plate, how sure you are (0 to 1), tags from the \
        list allowed, and its energy and nutrients per 100 g. If the photo shows no food, answer with \
        no items. Answer only with JSON that follows the schema.
        """

    /// What is said of the user: their diet (so that, say, a vegan's "burger" is not read as beef)
    /// and the hint they typed. Nothing else about them.
    static func prompt(diet: Diet, hint: String?) -> String {
        var text = "The person eating follows a \(diet.rawValue.replacingOccurrences(of: "_", with: " ")) diet."
        if let hint, !hint.isEmpty { text += " They add: \"\(hint)\"" }
        return text
    }
}
