import Foundation
import ServiceKit

// The diet score of a meal: how well it fits a diet, and its food quality by the 2023 Nutri-Score
// points for general foods. docs/SCORING.md has the formula, every threshold and worked examples.
// Pure and deterministic: the same items, diet and split give the same result for one algorithm version.

/// The diets a meal can be scored against; raw values are the API's spelling.
enum Diet: String, Codable, Sendable, CaseIterable {
    case keto, paleo, vegan, vegetarian, mediterranean, lowCarb = "low_carb", balanced, custom
}

/// Percentages of energy; validated by the caller to sum to 100.
struct MacroSplit: Codable, Sendable, Equatable {
    var protein: Double
    var carbs: Double
    var fat: Double

    enum CodingKeys: String, CodingKey, CaseIterable { case protein, carbs, fat }

    init(protein: Double, carbs: Double, fat: Double) {
        self.protein = protein
        self.carbs = carbs
        self.fat = fat
    }

    /// Read from a request only (the profile keeps the three in columns): a key it does not take
    /// is refused, naming it.
    init(from decoder: any Decoder) throws {
        try StrictKeys.check(decoder, CodingKeys.self, what: "custom_macros")
        let container = try decoder.container(keyedBy: CodingKeys.self)
        protein = try container.decode(Double.self, forKey: .protein)
        carbs = try container.decode(Double.self, forKey: .carbs)
        fat = try container.decode(Double.self, forKey: .fat)
    }
}

/// One item of a meal as the score sees it. `carbsG` is total carbohydrate, fibre included.
/// A nil optional nutrient counts as 0.
struct ScoredItem: Sendable, Equatable {
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
    var tags: Set<String>
}

/// One explained part of the score. `points` of `max`, higher is better in both parts.
struct ScoreComponent: Codable, Sendable, Equatable {
    var part: String
    var name: String
    var points: Double
    var max: Double
    var sentence: String
    /// What would gain a point, with the amount; nil when the component is already at its best.
    var improvement: String?
    /// In the order of their names (see `MealItem.CodingKeys`).
    enum CodingKeys: String, CodingKey { case improvement, max, name, part, points, sentence }
}

struct DietScoreResult: Codable, Sendable, Equatable {
    var score: Int
    var band: String
    var fit: Int
    var quality: Int
    var components: [ScoreComponent]
    var algorithmVersion: String
    /// In the order of their names (see `MealItem.CodingKeys`).
    enum CodingKeys: String, CodingKey { case algorithmVersion = "algorithm_version", band, components, fit, quality, score }
}

/// The item tags the API accepts, and the groups the diet rules read.
enum FoodTags {
    static let all: Set<String> = [
        "meat", "red_meat", "processed_meat", "poultry", "fish", "seafood", "dairy", "cheese", "egg", "honey",
        "grain", "whole_grain", "legume", "nuts", "seeds", "fruit", "vegetable", "olive_oil", "seed_oil",
        "processed_sugar", "alcohol", "fried",
    ]
    // Red, processed meat and poultry are all meat; cheese is dairy; whole grain is grain.
    static let meat: Set<String> = ["meat", "red_meat", "processed_meat", "poultry"]
    static let fish: Set<String> = ["fish", "seafood"]
    static let dairy: Set<String> = ["dairy", "cheese"]
    static let grain: Set<String> = ["grain", "whole_grain"]
    /// Nutri-Score 2023's positive food group (nuts and oils left it in 2023).
    static let fruitVegetablesLegumes: Set<String> = ["fruit", "vegetable", "legume"]
    static let mediterraneanFavoured: Set<String> = ["fish", "seafood", "legume", "vegetable", "olive_oil", "nuts"]
    static let mediterraneanLimited: Set<String> = ["processed_sugar", "red_meat", "processed_meat"]
}

enum DietScore {
    /// Stored with every score. A change to any rule, threshold or weight is a new version;
    /// scores kept under an older version are never recomputed silently.
    static let algorithmVersion = "2026-11.1"

    static func score(_ items: [ScoredItem], diet: Diet, custom: MacroSplit?) -> DietScoreResult {
        let meal = DietScoreMeal(items)
        let fit = fitComponents(meal, diet: diet, custom: custom)
        let quality = qualityComponents(meal)
        let fitValue = percentage(fit)
        let qualityValue = percentage(quality)
        // Equal weights, from the two rounded parts, so a reader can check the total from the response.
        let score = Int((Double(fitValue + qualityValue) / 2).rounded(.toNearestOrAwayFromZero))
        return DietScoreResult(
            score: score, band: band(for: score), fit: fitValue, quality: qualityValue,
            components: fit + quality, algorithmVersion: algorithmVersion
        )
    }

    static func band(for score: Int) -> String {
        score >= 80 ? "great" : score >= 60 ? "ok" : "poor"
    }

    /// A part's 0–100 value: its points over its maximum, rounded half away from zero.
    static func percentage(_ components: [ScoreComponent]) -> Int {
        let points = components.reduce(0) { $0 + $1.points }
        let max = components.reduce(0) { $0 + $1.max }
        guard max > 0 else { return 100 }
        return Int((100 * points / max).rounded(.toNearestOrAwayFromZero))
    }
}

// MARK: - The meal's sums

/// A meal's sums; absent optional nutrients count as 0.
struct DietScoreMeal {
    let items: [ScoredItem]
    let grams, calories, protein, carbs, fat, fibre, sugars, saturatedFat, sodiumMg, alcohol: Double

    init(_ items: [ScoredItem]) {
        func sum(_ value: (ScoredItem) -> Double) -> Double { items.reduce(0) { $0 + value($1) } }
        self.items = items
        grams = sum { $0.grams }
        calories = sum { $0.calories }
        protein = sum { $0.proteinG }
        carbs = sum { $0.carbsG }
        fat = sum { $0.fatG }
        fibre = sum { $0.fiberG ?? 0 }
        sugars = sum { $0.sugarG ?? 0 }
        saturatedFat = sum { $0.saturatedFatG ?? 0 }
        sodiumMg = sum { $0.sodiumMg ?? 0 }
        alcohol = sum { $0.alcoholG ?? 0 }
    }

    // The energy split uses 4/4/9 kcal per gram, 2 for fibre and 7 for alcohol, so it follows the
    // macros themselves rather than whatever energy figure a label printed.
    var netCarbs: Double { Swift.max(0, carbs - fibre) }
    var proteinKcal: Double { 4 * protein }
    var netCarbsKcal: Double { 4 * netCarbs }
    var carbohydrateKcal: Double { netCarbsKcal + 2 * fibre }
    var fatKcal: Double { 9 * fat }
    var splitKcal: Double { proteinKcal + carbohydrateKcal + fatKcal + 7 * alcohol }

    func items(taggedWithAny tags: Set<String>) -> [ScoredItem] {
        items.filter { !$0.tags.isDisjoint(with: tags) }
    }

    func per100g(_ amount: Double) -> Double { amount * 100 / grams }
}

// MARK: - Fit to the diet

extension DietScore {
    /// A macro's share of energy against a target range, in percent of energy.
    struct ShareTarget {
        var name: String
        var label: String
        var noun: String
        var kcalPerGram: Double
        var kcal: Double
        var lower: Double
        var upper: Double
    }

    static func fitComponents(_ meal: DietScoreMeal, diet: Diet, custom: MacroSplit?) -> [ScoreComponent] {
        func fat(_ lower: Double, _ upper: Double) -> ShareTarget {
            ShareTarget(name: "fat_share", label: "Fat", noun: "fat", kcalPerGram: 9, kcal: meal.fatKcal, lower: lower, upper: upper)
        }
        func protein(_ lower: Double, _ upper: Double) -> ShareTarget {
            ShareTarget(name: "protein_share", label: "Protein", noun: "protein", kcalPerGram: 4, kcal: meal.proteinKcal, lower: lower, upper: upper)
        }
        func netCarbs(_ upper: Double) -> ShareTarget {
            ShareTarget(name: "net_carbs_share", label: "Net carbs", noun: "net carbs", kcalPerGram: 4, kcal: meal.netCarbsKcal, lower: 0, upper: upper)
        }
        // Carbohydrate as a whole (fibre at 2 kcal/g), as dietary guidelines state it; more or
        // less of it is counted as digestible carbohydrate at 4 kcal/g.
        func carbs(_ lower: Double, _ upper: Double) -> ShareTarget {
            ShareTarget(name: "carbs_share", label: "Carbohydrate", noun: "carbohydrate", kcalPerGram: 4, kcal: meal.carbohydrateKcal, lower: lower, upper: upper)
        }
        switch diet {
        case .keto:
            return [fat(70, 100), netCarbs(10), protein(10, 25)].map { shareComponent($0, meal: meal, named: "the keto target") }
        case .lowCarb:
            return [netCarbs(26), protein(15, 35), fat(35, 100)].map { shareComponent($0, meal: meal, named: "the low-carb target") }
        case .balanced:
            return [carbs(45, 65), fat(20, 35), protein(10, 35)].map { shareComponent($0, meal: meal, named: "the balanced target") }
        case .custom:
            // Without a split (the caller should always send one) the balanced ranges apply.
            guard let split = custom else {
                return [carbs(45, 65), fat(20, 35), protein(10, 35)].map { shareComponent($0, meal: meal, named: "the balanced target") }
            }
            func around(_ value: Double) -> (Double, Double) { (Swift.max(0, value - 5), Swift.min(100, value + 5)) }
            let (p, c, f) = (around(split.protein), around(split.carbs), around(split.fat))
            return [protein(p.0, p.1), carbs(c.0, c.1), fat(f.0, f.1)].map { shareComponent($0, meal: meal, named: "your target") }
        case .vegan:
            return [
                exclusionComponent(
                    meal, diet: "vegan",
                    rules: [("meat", FoodTags.meat), ("fish", FoodTags.fish), ("dairy", FoodTags.dairy), ("egg", ["egg"]), ("honey", ["honey"])]
                )
            ]
        case .vegetarian:
            return [exclusionComponent(meal, diet: "vegetarian", rules: [("meat", FoodTags.meat), ("fish", FoodTags.fish)])]
        case .paleo:
            return [
                exclusionComponent(
                    meal, diet: "paleo",
                    rules: [
                        ("grain", FoodTags.grain), ("legume", ["legume"]), ("dairy", FoodTags.dairy),
                        ("processed sugar", ["processed_sugar"]), ("seed oil", ["seed_oil"]),
                    ]
                )
            ]
        case .mediterranean:
            return mediterraneanComponents(meal)
        }
    }

    /// 10 points inside the range; one less for each started 2 percentage points outside it.
    static func shareComponent(_ target: ShareTarget, meal: DietScoreMeal, named goal: String) -> ScoreComponent {
        let range =
            target.lower <= 0
            ? "\(decimal(target.upper)) % or less"
            : target.upper >= 100 ? "\(decimal(target.lower)) % or more" : "\(decimal(target.lower))–\(decimal(target.upper)) %"
        let total = meal.splitKcal
        guard total > 0 else {
            // Nothing to split (water, black coffee): it fits any split.
            return ScoreComponent(
                part: "fit", name: target.name, points: 10, max: 10,
                sentence: "\(target.label): the meal has no energy from protein, carbohydrate or fat; \(goal) is \(range).",
                improvement: nil
            )
        }
        let share = 100 * target.kcal / total
        let below = share < target.lower
        let distance = below ? target.lower - share : Swift.max(0, share - target.upper)
        let penalty = Swift.min(10, (distance / 2 - 1e-9).rounded(.up))
        let sentence = "\(target.label): \(decimal(share)) % of the meal's energy; \(goal) is \(range)."
        guard penalty > 0 else {
            return ScoreComponent(part: "fit", name: target.name, points: 10, max: 10, sentence: sentence, improvement: nil)
        }
        // The next point is one 2-point step closer; solve (kcal + k·Δ) / (total + k·Δ) = goal for Δ grams.
        let goalDistance = (penalty - 1) * 2
        let nextShare = (below ? target.lower - goalDistance : target.upper + goalDistance) / 100
        let change = (nextShare * total - target.kcal) / (target.kcalPerGram * (1 - nextShare))
        let amount = roundUp(abs(change), step: 0.1)
        return ScoreComponent(
            part: "fit", name: target.name, points: 10 - penalty, max: 10, sentence: sentence,
            improvement: "\(decimal(amount)) g \(change > 0 ? "more" : "less") \(target.noun): +1"
        )
    }

    /// Points are the whole tenths of the meal's grams free of excluded foods, so any excluded
    /// food costs at least one point.
    static func exclusionComponent(_ meal: DietScoreMeal, diet: String, rules: [(group: String, tags: Set<String>)]) -> ScoreComponent {
        let groups = orList(rules.map { $0.group })
        let excluded: [(item: ScoredItem, groups: [String])] = meal.items.compactMap { item in
            let broken = rules.filter { !item.tags.isDisjoint(with: $0.tags) }.map { $0.group }
            return broken.isEmpty ? nil : (item, broken)
        }
        guard !excluded.isEmpty else {
            return ScoreComponent(
                part: "fit", name: "excluded_foods", points: 10, max: 10,
                sentence: "Nothing in the meal is excluded on a \(diet) diet (no \(groups)).", improvement: nil
            )
        }
        let excludedGrams = excluded.reduce(0) { $0 + $1.item.grams }
        let allowed = meal.grams - excludedGrams
        let points = (10 * allowed / meal.grams + 1e-9).rounded(.down)
        let listed = excluded.map { "\($0.item.name) (\($0.groups.joined(separator: ", ")))" }.joined(separator: ", ")
        // Swapping r grams keeps the meal's weight: (allowed + r) / grams reaches the next tenth.
        let swap = roundUp((points + 1) / 10 * meal.grams - allowed, step: 1)
        return ScoreComponent(
            part: "fit", name: "excluded_foods", points: points, max: 10,
            sentence: "Excluded on a \(diet) diet: \(listed); \(decimal(excludedGrams)) of \(decimal(meal.grams)) g.",
            improvement: "Swap \(decimal(swap)) g of \(orList(excluded.map { $0.item.name })) for food with no \(groups): +1"
        )
    }

    /// One point for each whole 5 % of the meal's grams from favoured foods (10 at 50 %), and one
    /// lost for each started 5 % from limited foods (0 at 50 % or more).
    static func mediterraneanComponents(_ meal: DietScoreMeal) -> [ScoreComponent] {
        let favouredItems = meal.items(taggedWithAny: FoodTags.mediterraneanFavoured)
        let favoured = favouredItems.reduce(0) { $0 + $1.grams }
        let favouredPoints = Swift.min(10, (20 * favoured / meal.grams + 1e-9).rounded(.down))
        let favouredShare = "\(decimal(favoured)) of \(decimal(meal.grams)) g (\(decimal(100 * favoured / meal.grams)) %)"
        let favouredComponent = ScoreComponent(
            part: "fit", name: "favoured_foods", points: favouredPoints, max: 10,
            sentence: "Fish, legumes, vegetables, olive oil and nuts: \(favouredShare); 50 % earns all 10 points.",
            improvement: favouredPoints >= 10
                ? nil
                : "Swap \(decimal(roundUp((favouredPoints + 1) / 20 * meal.grams - favoured, step: 1))) g of other food for fish, legumes, vegetables, olive oil or nuts: +1"
        )

        let limitedItems = meal.items(taggedWithAny: FoodTags.mediterraneanLimited)
        let limited = limitedItems.reduce(0) { $0 + $1.grams }
        let penalty = Swift.min(10, (20 * limited / meal.grams - 1e-9).rounded(.up))
        let limitedComponent: ScoreComponent
        if limitedItems.isEmpty {
            limitedComponent = ScoreComponent(
                part: "fit", name: "limited_foods", points: 10, max: 10,
                sentence: "No processed sugar, red meat or processed meat.", improvement: nil
            )
        } else {
            let names = limitedItems.map(\.name)
            // Down to the next started-5 % step below the current one.
            let swap = roundUp(limited - (penalty - 1) / 20 * meal.grams, step: 1)
            limitedComponent = ScoreComponent(
                part: "fit", name: "limited_foods", points: 10 - penalty, max: 10,
                sentence: "Processed sugar, red and processed meat: \(names.joined(separator: ", ")); \(decimal(limited)) of \(decimal(meal.grams)) g (\(decimal(100 * limited / meal.grams)) %).",
                improvement: "Swap \(decimal(swap)) g of \(orList(names)) for food that is not processed sugar, red or processed meat: +1"
            )
        }
        return [favouredComponent, limitedComponent]
    }
}

// MARK: - Food quality: Nutri-Score 2023, general foods

extension DietScore {
    /// Points are the count of thresholds the per-100 g value is strictly above.
    enum NutriScore {
        static let energyKJ: [Double] = [335, 670, 1005, 1340, 1675, 2010, 2345, 2680, 3015, 3350]
        static let sugarsG: [Double] = [3.4, 6.8, 10, 14, 17, 20, 24, 27, 31, 34, 37, 41, 44, 48, 51]
        static let saturatedFatG: [Double] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
        static let saltG: [Double] = [0.2, 0.4, 0.6, 0.8, 1, 1.2, 1.4, 1.6, 1.8, 2, 2.2, 2.4, 2.6, 2.8, 3, 3.2, 3.4, 3.6, 3.8, 4]
        static let fibreG: [Double] = [3.0, 4.1, 5.2, 6.3, 7.4]
        static let proteinG: [Double] = [2.4, 4.8, 7.2, 9.6, 12, 14, 17]
        /// Percent of grams; above 80 % jumps from 2 to 5 points.
        static let fruitVegetablesLegumesPercent: [Double] = [40, 60, 80, 80, 80]
        /// Protein counts only when the negative points are below this.
        static let proteinRuleLimit: Double = 11

        static func points(_ value: Double, _ thresholds: [Double]) -> Double {
            // The small margin keeps a value exactly at a threshold (after float arithmetic) at the lower points.
            Double(thresholds.filter { value > $0 + 1e-9 }.count)
        }
    }

    static let kilojoulesPerKcal = 4.184

    static func qualityComponents(_ meal: DietScoreMeal) -> [ScoreComponent] {
        let scale = meal.grams / 100
        let energy = meal.per100g(meal.calories * kilojoulesPerKcal)
        let salt = meal.per100g(meal.sodiumMg * 2.5 / 1000)

        var negatives: [ScoreComponent] = []
        func negative(_ name: String, _ label: String, _ value: Double, unit: String, _ thresholds: [Double], improve: (Double) -> String) {
            let points = NutriScore.points(value, thresholds)
            let max = Double(thresholds.count)
            let shown = unit == "kJ" ? decimal(value, places: 0) : decimal(value, places: 2)
            negatives.append(
                ScoreComponent(
                    part: "quality", name: name, points: max - points, max: max,
                    sentence: "\(label): \(shown) \(unit) per 100 g, \(decimal(points)) of \(decimal(max)) Nutri-Score negative points.",
                    // Down to the threshold below (at the threshold is the lower points), for the whole meal.
                    improvement: points == 0 ? nil : improve((value - thresholds[Int(points) - 1]) * scale)
                ))
        }
        negative("energy", "Energy", energy, unit: "kJ", NutriScore.energyKJ) { "\(decimal(roundUp($0 / kilojoulesPerKcal, step: 1))) kcal less: +1" }
        negative("sugars", "Sugars", meal.per100g(meal.sugars), unit: "g", NutriScore.sugarsG) { "\(decimal(roundUp($0, step: 0.1))) g less sugars: +1" }
        negative("saturated_fat", "Saturated fat", meal.per100g(meal.saturatedFat), unit: "g", NutriScore.saturatedFatG) {
            "\(decimal(roundUp($0, step: 0.1))) g less saturated fat: +1"
        }
        negative("salt", "Salt", salt, unit: "g", NutriScore.saltG) { "\(decimal(roundUp($0, step: 0.1))) g less salt: +1" }
        let negativePoints = negatives.reduce(0) { $0 + ($1.max - $1.points) }

        func positive(_ name: String, _ label: String, _ value: Double, _ thresholds: [Double]) -> ScoreComponent {
            let points = NutriScore.points(value, thresholds)
            let max = Double(thresholds.count)
            // Strictly above the next threshold, for the whole meal.
            let improvement = points >= max ? nil : "\(decimal(stepAbove((thresholds[Int(points)] - value) * scale, step: 0.1))) g more \(name): +1"
            return ScoreComponent(
                part: "quality", name: name, points: points, max: max,
                sentence: "\(label): \(decimal(value, places: 2)) g per 100 g, \(decimal(points)) of \(decimal(max)) Nutri-Score positive points.",
                improvement: improvement
            )
        }
        let fibre = positive("fibre", "Fibre", meal.per100g(meal.fibre), NutriScore.fibreG)
        var protein = positive("protein", "Protein", meal.per100g(meal.protein), NutriScore.proteinG)
        if negativePoints >= NutriScore.proteinRuleLimit {
            // Nutri-Score's protein rule: a meal with 11 or more negative points gets nothing for protein.
            let wouldEarn = protein.points
            let fewer = negativePoints - NutriScore.proteinRuleLimit + 1
            let fewerPoints = "\(decimal(fewer)) fewer negative point\(fewer == 1 ? "" : "s")"
            protein.sentence =
                "Protein: \(decimal(meal.per100g(meal.protein), places: 2)) g per 100 g would be \(decimal(wouldEarn)) of 7 Nutri-Score positive points, "
                + "but protein counts only below 11 negative points (this meal has \(decimal(negativePoints)))."
            let firstPoint = stepAbove((NutriScore.proteinG[0] - meal.per100g(meal.protein)) * scale, step: 0.1)
            protein.improvement =
                wouldEarn > 0
                ? "\(fewerPoints) (energy, sugars, saturated fat or salt) would count the protein: +\(decimal(wouldEarn))"
                : "\(decimal(firstPoint)) g more protein and \(fewerPoints): +1"
            protein.points = 0
        }

        let fvlGrams = meal.items(taggedWithAny: FoodTags.fruitVegetablesLegumes).reduce(0) { $0 + $1.grams }
        let fvlPercent = meal.per100g(fvlGrams)
        let fvlPoints = NutriScore.points(fvlPercent, NutriScore.fruitVegetablesLegumesPercent)
        var fvlImprovement: String?
        if fvlPoints < 5 {
            let next = NutriScore.fruitVegetablesLegumesPercent[Int(fvlPoints)]
            let gain = NutriScore.points(next + 1e-6, NutriScore.fruitVegetablesLegumesPercent) - fvlPoints
            let swap = stepAbove(next * scale - fvlGrams, step: 1)
            fvlImprovement = "Swap \(decimal(swap)) g of other food for fruit, vegetables or legumes: +\(decimal(gain))"
        }
        let fvl = ScoreComponent(
            part: "quality", name: "fruit_vegetables_legumes", points: fvlPoints, max: 5,
            sentence: "Fruit, vegetables and legumes: \(decimal(fvlPercent)) % of the meal's grams, \(decimal(fvlPoints)) of 5 Nutri-Score positive points.",
            improvement: fvlImprovement
        )
        return negatives + [fibre, protein, fvl]
    }
}

// MARK: - Wording and rounding

extension DietScore {
    /// At most `places` decimals, trailing zeros dropped, always with a point (no locale), rounded
    /// as `String(format: "%.*f")` rounds: a score's explanations write dozens, and Foundation's
    /// formatting was a tenth of a meal post.
    static func decimal(_ value: Double, places: Int = 1) -> String {
        if let text = rounded(value, places: places) { return text }
        var text = String(format: "%.\(places)f", value)
        if text.contains(".") {
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text.removeLast() }
        }
        return text == "-0" ? "0" : text
    }

    /// `value` to at most `places` decimals, trailing zeros dropped, rounded from its shortest
    /// decimal form (`description`), or nil where that may differ from rounding the binary value
    /// itself, as printf does: a form ending exactly half-way (0.15 is 0.1499… in binary) or written
    /// with an exponent. Worked on the form's bytes in one buffer: String's own edits (a search, a
    /// character removed at a time) were most of what a decimal cost.
    static func rounded(_ value: Double, places: Int) -> String? {
        guard value.isFinite else { return nil }
        let zero = UInt8(ascii: "0")
        var digits = Array(value.magnitude.description.utf8)
        guard !digits.contains(UInt8(ascii: "e")), let point = digits.firstIndex(of: UInt8(ascii: ".")) else { return nil }
        digits.remove(at: point)
        // The whole part is `digits[..<whole]`, the decimals kept `digits[whole..<end]`.
        var whole = point
        var end = digits.count
        let cut = point + places
        if end > cut {
            let next = digits[cut]
            let beyond = digits[(cut + 1)...].contains { $0 != zero }
            end = cut
            if next == UInt8(ascii: "5") && !beyond { return nil }
            if next >= UInt8(ascii: "5") {
                var index = end - 1
                while index >= 0, digits[index] == UInt8(ascii: "9") {
                    digits[index] = zero
                    index -= 1
                }
                if index >= 0 {
                    digits[index] += 1
                } else {
                    digits.insert(UInt8(ascii: "1"), at: 0)
                    whole += 1
                    end += 1
                }
            }
        }
        while end > whole, digits[end - 1] == zero { end -= 1 }
        var text: [UInt8] = []
        text.reserveCapacity(end + 2)
        // A negative value that rounds to zero is written "0", as printf's "-0" trimmed would be.
        if value < 0, digits[..<end].contains(where: { $0 != zero }) { text.append(UInt8(ascii: "-")) }
        text.append(contentsOf: digits[..<whole])
        if end > whole {
            text.append(UInt8(ascii: "."))
            text.append(contentsOf: digits[whole..<end])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The smallest multiple of `step` at or above `value` (float noise forgiven), at least one step.
    static func roundUp(_ value: Double, step: Double) -> Double {
        Swift.max(1, (value / step - 1e-9).rounded(.up)) * step
    }

    /// The smallest multiple of `step` strictly above `value`, at least one step.
    static func stepAbove(_ value: Double, step: Double) -> Double {
        Swift.max(1, (value / step + 1e-9).rounded(.down) + 1) * step
    }

    /// "a", "a or b", "a, b or c".
    static func orList(_ words: [String]) -> String {
        guard words.count > 1 else { return words.first ?? "" }
        return words.dropLast().joined(separator: ", ") + " or " + words.last!
    }
}
