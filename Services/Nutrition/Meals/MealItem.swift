import Foundation
import ServiceKit

/// One food of a meal as the app sends it: its amounts for the portion eaten.
struct MealItem: Codable, Sendable, Equatable {
    var name: String
    var grams: Double
    var calories: Double
    var proteinG: Double
    var carbsG: Double
    var fatG: Double
    var fiberG: Double?
    var sugarG: Double?
    var saturatedFatG: Double?
    var sodiumMg: Double?
    var alcoholG: Double?
    var tags: [String]?
    /// The food of the composition table the amounts came from, when they did.
    var ndbNumber: String? = nil

    /// In the order of their names, as the JSON is written (sorted keys).
    enum CodingKeys: String, CodingKey, CaseIterable {
        case alcoholG = "alcohol_g", calories, carbsG = "carbs_g", fatG = "fat_g", fiberG = "fiber_g", grams, name, ndbNumber = "ndb_number"
        case proteinG = "protein_g", saturatedFatG = "saturated_fat_g", sodiumMg = "sodium_mg", sugarG = "sugar_g", tags
    }

    var scored: ScoredItem {
        ScoredItem(
            name: name, grams: grams, calories: calories, proteinG: proteinG, carbsG: carbsG, fatG: fatG, fiberG: fiberG, sugarG: sugarG,
            saturatedFatG: saturatedFatG, sodiumMg: sodiumMg, alcoholG: alcoholG, tags: Set(tags ?? []))
    }

    var totals: NutrientTotals {
        NutrientTotals(
            calories: calories, proteinG: proteinG, carbsG: carbsG, fatG: fatG, fiberG: fiberG ?? 0, sugarG: sugarG ?? 0, saturatedFatG: saturatedFatG ?? 0,
            sodiumMg: sodiumMg ?? 0)
    }

    /// Energy from the macros at 4/4/9 kcal a gram (2 for fibre, 7 for alcohol); carbohydrate is
    /// counted with its fibre, as labels that list fibre under it do.
    var energyFromMacros: Double {
        let fiber = min(fiberG ?? 0, carbsG)
        return 4 * proteinG + 4 * (carbsG - fiber) + 2 * fiber + 9 * fatG + 7 * (alcoholG ?? 0)
    }

    /// Stated energy may differ from the macros' by this much before a warning: labels round each
    /// figure, and small portions round by more.
    static let energyTolerance = (kcal: 25.0, share: 0.2)

    /// Every problem with the item, its fields named `items[i].field`.
    func problems(at index: Int) -> [Problem.FieldError] {
        var problems: [Problem.FieldError] = []
        func fail(_ field: String, _ message: String) { problems.append(.init(field: "items[\(index)].\(field)", message: message)) }
        let trimmed = name.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty || name.unicodeScalars.count > 200 { fail("name", "must be 1 to 200 characters") }
        let amounts: [(String, Double?)] = [
            ("grams", grams), ("calories", calories), ("protein_g", proteinG), ("carbs_g", carbsG), ("fat_g", fatG), ("fiber_g", fiberG), ("sugar_g", sugarG),
            ("saturated_fat_g", saturatedFatG), ("sodium_mg", sodiumMg), ("alcohol_g", alcoholG),
        ]
        var valid = true
        for (field, value) in amounts {
            guard let value else { continue }
            if !value.isFinite || value < 0 {
                fail(field, "must be a finite number, 0 or more")
                valid = false
            }
        }
        guard valid else { return problems }
        if grams <= 0 || grams > 10_000 { fail("grams", "must be more than 0 and at most 10000") }
        if calories > 20_000 { fail("calories", "must be at most 20000") }
        for (field, value) in [("protein_g", proteinG), ("carbs_g", carbsG), ("fat_g", fatG), ("alcohol_g", alcoholG ?? 0)] where value > grams {
            fail(field, "cannot be more than the item's grams")
        }
        // Within a measurement's rounding: each amount is measured and rounded apart, and the food
        // table's own add up to 100.16 g in 100 g (bearded seal oil).
        if proteinG + carbsG + fatG + (alcoholG ?? 0) > grams * 1.01 { fail("grams", "is less than its protein, carbs, fat and alcohol together") }
        if let fiberG, fiberG > carbsG { fail("fiber_g", "cannot be more than carbs_g (fibre is counted in carbohydrate)") }
        if let sugarG, sugarG > carbsG { fail("sugar_g", "cannot be more than carbs_g") }
        if let saturatedFatG, saturatedFatG > fatG { fail("saturated_fat_g", "cannot be more than fat_g") }
        if let sodiumMg, sodiumMg > grams * 400 { fail("sodium_mg", "cannot be more than 40 % of the item's grams") }
        let unknown = (tags ?? []).filter { !FoodTags.all.contains($0) }
        if !unknown.isEmpty { fail("tags", "unknown tags \(unknown.sorted().joined(separator: ", ")); known: \(FoodTags.all.sorted().joined(separator: ", "))") }
        if (tags ?? []).count > 20 { fail("tags", "at most 20") }
        return problems
    }
}

/// An item as a request writes it: its amounts (`MealItem`), or a food of the composition table
/// (`ndb_number`) and its grams, whose amounts the server fills in. An item with both keeps the
/// amounts it gives, the number saying where they came from.
enum MealItemInput: Decodable, Sendable, Equatable {
    case amounts(MealItem)
    case food(ndbNumber: String, grams: Double, name: String?, tags: [String]?)

    private enum Keys: String, CodingKey, CaseIterable {
        case alcoholG = "alcohol_g", calories, carbsG = "carbs_g", fatG = "fat_g", fiberG = "fiber_g", grams, name, ndbNumber = "ndb_number"
        case proteinG = "protein_g", saturatedFatG = "saturated_fat_g", sodiumMg = "sodium_mg", sugarG = "sugar_g", tags
    }
    private static let amounts: [Keys] = [.proteinG, .carbsG, .fatG, .fiberG, .sugarG, .saturatedFatG, .sodiumMg, .alcoholG]

    init(from decoder: any Decoder) throws {
        // A key no item takes is refused, naming it (`items[0].sodium`): dropped, a misspelt
        // amount or tag would count as nothing and silence an allergy warning.
        try StrictKeys.check(decoder, Keys.self, what: "a meal item")
        let container = try decoder.container(keyedBy: Keys.self)
        if !container.contains(.calories), let ndbNumber = try container.decodeIfPresent(String.self, forKey: .ndbNumber) {
            // Amounts without their energy are neither form: refused, not dropped.
            if let given = Self.amounts.first(where: container.contains) {
                throw DecodingError.dataCorruptedError(
                    forKey: given, in: container, debugDescription: "an item naming ndb_number gives grams only, or all of its amounts with calories")
            }
            self = .food(
                ndbNumber: ndbNumber, grams: try container.decode(Double.self, forKey: .grams), name: try container.decodeIfPresent(String.self, forKey: .name),
                tags: try container.decodeIfPresent([String].self, forKey: .tags))
        } else {
            self = .amounts(try MealItem(from: decoder))
        }
    }

    var ndbNumber: String? {
        switch self {
        case .amounts(let item): item.ndbNumber
        case .food(let ndbNumber, _, _, _): ndbNumber
        }
    }
}

/// Amounts summed over a meal (or one item's, with absent nutrients as 0).
struct NutrientTotals: Codable, Sendable, Equatable {
    var calories: Double
    var proteinG: Double
    var carbsG: Double
    var fatG: Double
    var fiberG: Double
    var sugarG: Double
    var saturatedFatG: Double
    var sodiumMg: Double

    /// In the order of their names (see `MealItem.CodingKeys`).
    enum CodingKeys: String, CodingKey {
        case calories, carbsG = "carbs_g", fatG = "fat_g", fiberG = "fiber_g", proteinG = "protein_g", saturatedFatG = "saturated_fat_g", sodiumMg = "sodium_mg"
        case sugarG = "sugar_g"
    }

    static let zero = NutrientTotals(calories: 0, proteinG: 0, carbsG: 0, fatG: 0, fiberG: 0, sugarG: 0, saturatedFatG: 0, sodiumMg: 0)

    static func + (lhs: NutrientTotals, rhs: NutrientTotals) -> NutrientTotals {
        NutrientTotals(
            calories: lhs.calories + rhs.calories, proteinG: lhs.proteinG + rhs.proteinG, carbsG: lhs.carbsG + rhs.carbsG, fatG: lhs.fatG + rhs.fatG,
            fiberG: lhs.fiberG + rhs.fiberG, sugarG: lhs.sugarG + rhs.sugarG, saturatedFatG: lhs.saturatedFatG + rhs.saturatedFatG,
            sodiumMg: lhs.sodiumMg + rhs.sodiumMg)
    }

    /// Rounded for display: a tenth of a gram or kcal, a whole milligram of sodium.
    var rounded: NutrientTotals {
        func tenth(_ value: Double) -> Double { (value * 10).rounded() / 10 }
        return NutrientTotals(
            calories: tenth(calories), proteinG: tenth(proteinG), carbsG: tenth(carbsG), fatG: tenth(fatG), fiberG: tenth(fiberG), sugarG: tenth(sugarG),
            saturatedFatG: tenth(saturatedFatG), sodiumMg: sodiumMg.rounded())
    }
}
