import Foundation
@testable import Nutrition
import Testing

/// The diet score against numbers worked out by hand from docs/SCORING.md: the three worked
/// examples there, one meal for every diet, the bands, Nutri-Score's thresholds at their edges and
/// its protein rule. Expected values are literals; the comments show how each was derived.
@Suite struct DietScoreTests {
    /// Decimals in explanations round as printf rounds (the binary value: 0.15 is 0.1499…, so 0.1),
    /// without printf: every thousandth from -20 to 20 (each tie among them), 50,000 numbers from a
    /// fixed sequence, and edge cases, at 0, 1 and 2 places.
    @Test func decimalsRoundAsPrintfDoes() {
        var state: UInt64 = 0x1234_5678_9ABC_DEF0
        func next() -> UInt64 {  // SplitMix64: the same numbers on every run
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        var values = (-20_000...20_000).map { Double($0) / 1000 }
        values += (0..<50_000).map { _ in Double(Int64(bitPattern: next()) % 100_000_000) / Double(1 << (next() % 24)) }
        values += [0, -0.0, 0.05, 0.15, 0.25, 0.35, 2.675, 1e-7, -1e-7, 0.0049999, 9.995, 99.95, 999.5, 123_456_789.125, 1e16, 1e22, 5e-324]
        var wrong: [String] = []
        for value in values {
            for places in 0...2 {
                var expected = String(format: "%.\(places)f", value)
                if expected.contains(".") {
                    while expected.hasSuffix("0") { expected.removeLast() }
                    if expected.hasSuffix(".") { expected.removeLast() }
                }
                if expected == "-0" { expected = "0" }
                let written = DietScore.decimal(value, places: places)
                if written != expected { wrong.append("\(value) at \(places): \(written), printf \(expected)") }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.count) differ: \(wrong.prefix(10))")
    }

    private func item(
        _ name: String, _ grams: Double, kcal: Double, protein: Double = 0, carbs: Double = 0, fat: Double = 0,
        fibre: Double? = nil, sugars: Double? = nil, saturatedFat: Double? = nil, sodiumMg: Double? = nil, tags: Set<String> = []
    ) -> ScoredItem {
        ScoredItem(
            name: name, grams: grams, calories: kcal, proteinG: protein, carbsG: carbs, fatG: fat, fiberG: fibre, sugarG: sugars,
            saturatedFatG: saturatedFat, sodiumMg: sodiumMg, alcoholG: nil, tags: tags
        )
    }

    private func points(_ result: DietScoreResult) -> [String: Double] {
        Dictionary(uniqueKeysWithValues: result.components.map { ($0.name, $0.points) })
    }

    private func component(_ result: DietScoreResult, _ name: String) -> ScoreComponent? {
        result.components.first { $0.name == name }
    }

    // MARK: - The worked examples of docs/SCORING.md

    private var ketoBreakfast: [ScoredItem] {
        [
            item("Scrambled eggs", 120, kcal: 180, protein: 15, carbs: 1, fat: 13, sugars: 1, saturatedFat: 4, sodiumMg: 300, tags: ["egg"]),
            item("Bacon", 30, kcal: 160, protein: 11, fat: 13, sugars: 0, saturatedFat: 4.5, sodiumMg: 550, tags: ["processed_meat", "red_meat"]),
            item("Avocado", 100, kcal: 160, protein: 2, carbs: 9, fat: 15, fibre: 7, sugars: 0.7, saturatedFat: 2, sodiumMg: 7, tags: ["fruit"]),
            item(
                "Wholegrain toast", 40, kcal: 100, protein: 4, carbs: 18, fat: 1, fibre: 3, sugars: 1.5, saturatedFat: 0.3, sodiumMg: 160,
                tags: ["whole_grain"]),
        ]
    }

    /// 290 g, 600 kcal; split 128 protein + 92 carbohydrate (72 net + 20 fibre) + 378 fat = 598 kcal.
    @Test func ketoBreakfastScoresAsWorkedOut() {
        let result = DietScore.score(ketoBreakfast, diet: .keto, custom: nil)
        #expect(
            points(result) == [
                // fat 378/598 = 63.21 %: 6.79 under 70, 4 started steps → 6; net carbs 72/598 = 12.04 %: 2.04 over 10,
                // 2 steps → 8; protein 128/598 = 21.40 %, inside 10–25 → 10.
                "fat_share": 6, "net_carbs_share": 8, "protein_share": 10,
                // Per 100 g (÷ 2.9): 865.66 kJ → 2 (10−2); sugars 1.10 → 0; sat fat 3.72 → 3 (10−3); salt 0.877 → 4 (20−4);
                // N = 9 so protein counts: 11.03 g → 4; fibre 3.45 → 1; fruit 100/290 = 34.5 % → 0.
                "energy": 8, "sugars": 15, "saturated_fat": 7, "salt": 16, "fibre": 1, "protein": 4, "fruit_vegetables_legumes": 0,
            ])
        // fit 24/30 = 80; quality 51/72 = 70.83 → 71; (80 + 71) / 2 = 75.5 → 76.
        #expect(result.fit == 80 && result.quality == 71 && result.score == 76 && result.band == "ok")
        #expect(result.algorithmVersion == DietScore.algorithmVersion)

        let fat = component(result, "fat_share")
        #expect(fat?.part == "fit" && fat?.max == 10)
        #expect(fat?.sentence == "Fat: 63.2 % of the meal's energy; the keto target is 70 % or more.")
        // Next point at 64 %: (0.64·598 − 378) / (9·0.36) = 1.457 g → 1.5 g.
        #expect(fat?.improvement == "1.5 g more fat: +1")
        #expect(component(result, "net_carbs_share")?.sentence == "Net carbs: 12 % of the meal's energy; the keto target is 10 % or less.")
        // Next point at 12 %: (0.12·598 − 72) / (4·0.88) = −0.068 g → 0.1 g.
        #expect(component(result, "net_carbs_share")?.improvement == "0.1 g less net carbs: +1")
        #expect(component(result, "protein_share")?.improvement == nil)

        let energy = component(result, "energy")
        #expect(energy?.part == "quality" && energy?.max == 10)
        #expect(energy?.sentence == "Energy: 866 kJ per 100 g, 2 of 10 Nutri-Score negative points.")
        // (865.66 − 670) kJ · 2.9 = 567.4 kJ = 135.6 kcal → 136.
        #expect(energy?.improvement == "136 kcal less: +1")
        #expect(component(result, "sugars")?.improvement == nil)
        // (3.724 − 3) · 2.9 = 2.1 g.
        #expect(component(result, "saturated_fat")?.improvement == "2.1 g less saturated fat: +1")
        #expect(component(result, "salt")?.sentence == "Salt: 0.88 g per 100 g, 4 of 20 Nutri-Score negative points.")
        // (0.8767 − 0.8) · 2.9 = 0.2225 g → 0.3 g.
        #expect(component(result, "salt")?.improvement == "0.3 g less salt: +1")
        // (4.1 − 3.448) · 2.9 = 1.89 g, strictly more → 1.9 g.
        #expect(component(result, "fibre")?.improvement == "1.9 g more fibre: +1")
        // (12 − 11.034) · 2.9 = 2.8 g exactly, and Nutri-Score needs strictly more → 2.9 g.
        #expect(component(result, "protein")?.improvement == "2.9 g more protein: +1")
        // 40 % of 290 g is 116 g, 16 g more than the avocado; strictly above → 17 g.
        #expect(component(result, "fruit_vegetables_legumes")?.improvement == "Swap 17 g of other food for fruit, vegetables or legumes: +1")
    }

    private var veganBowl: [ScoredItem] {
        [
            item("Quinoa", 150, kcal: 180, protein: 6, carbs: 32, fat: 3, fibre: 4, sugars: 1, saturatedFat: 0.3, sodiumMg: 10, tags: ["whole_grain"]),
            item("Chickpeas", 100, kcal: 160, protein: 9, carbs: 27, fat: 3, fibre: 8, sugars: 5, saturatedFat: 0.3, sodiumMg: 240, tags: ["legume"]),
            item("Roast vegetables", 150, kcal: 90, protein: 3, carbs: 15, fat: 2, fibre: 5, sugars: 8, saturatedFat: 0.3, sodiumMg: 300, tags: ["vegetable"]),
            item("Tahini dressing", 30, kcal: 180, protein: 5, carbs: 6, fat: 16, fibre: 2, sugars: 1, saturatedFat: 2.2, sodiumMg: 200, tags: ["seeds"]),
            item("Honey", 10, kcal: 30, carbs: 8, sugars: 8, tags: ["honey", "processed_sugar"]),
        ]
    }

    /// 440 g, 640 kcal, protein 23, fibre 19, sugars 23, sat fat 3.1, sodium 750 mg (honey's missing ones count 0).
    @Test func veganBowlScoresAsWorkedOut() {
        let result = DietScore.score(veganBowl, diet: .vegan, custom: nil)
        #expect(
            points(result) == [
                // Honey is excluded: 430 of 440 g free = 9.77 tenths → 9.
                "excluded_foods": 9,
                // Per 100 g (÷ 4.4): 608.58 kJ → 1; sugars 5.23 → 1; sat fat 0.70 → 0; salt 0.426 → 2; N = 4;
                // fibre 4.32 → 2; protein 5.23 → 2; legumes and vegetables 250/440 = 56.8 % → 1.
                "energy": 9, "sugars": 14, "saturated_fat": 10, "salt": 18, "fibre": 2, "protein": 2, "fruit_vegetables_legumes": 1,
            ])
        // fit 9/10 = 90; quality 56/72 = 77.78 → 78; (90 + 78) / 2 = 84.
        #expect(result.fit == 90 && result.quality == 78 && result.score == 84 && result.band == "great")
        #expect(component(result, "excluded_foods")?.sentence == "Excluded on a vegan diet: Honey (honey); 10 of 440 g.")
        // The next tenth is all 440 g: swap the 10 g.
        #expect(component(result, "excluded_foods")?.improvement == "Swap 10 g of Honey for food with no meat, fish, dairy, egg or honey: +1")
        // (608.58 − 335) kJ · 4.4 = 1203.76 kJ = 287.7 kcal → 288.
        #expect(component(result, "energy")?.improvement == "288 kcal less: +1")
        // (5.227 − 3.4) · 4.4 = 8.04 g → 8.1 g.
        #expect(component(result, "sugars")?.improvement == "8.1 g less sugars: +1")
        #expect(component(result, "saturated_fat")?.improvement == nil)
        // (0.4261 − 0.4) · 4.4 = 0.115 g → 0.2 g.
        #expect(component(result, "salt")?.improvement == "0.2 g less salt: +1")
        // (5.2 − 4.318) · 4.4 = 3.88 g → 3.9 g; (7.2 − 5.227) · 4.4 = 8.68 g → 8.7 g.
        #expect(component(result, "fibre")?.improvement == "3.9 g more fibre: +1")
        #expect(component(result, "protein")?.improvement == "8.7 g more protein: +1")
        // Above 60 % of 440 g = 264 g: 14 g more than 250, strictly above → 15 g.
        #expect(component(result, "fruit_vegetables_legumes")?.improvement == "Swap 15 g of other food for fruit, vegetables or legumes: +1")
    }

    private var mediterraneanPlate: [ScoredItem] {
        [
            item("Grilled salmon", 150, kcal: 310, protein: 34, fat: 19, sugars: 0, saturatedFat: 3.5, sodiumMg: 90, tags: ["fish"]),
            item("Lentils", 120, kcal: 140, protein: 11, carbs: 24, fat: 1, fibre: 9, sugars: 2, saturatedFat: 0.1, sodiumMg: 5, tags: ["legume"]),
            item("Tomato salad", 150, kcal: 30, protein: 1, carbs: 6, fibre: 2, sugars: 4, sodiumMg: 10, tags: ["vegetable"]),
            item("Olive oil", 10, kcal: 90, fat: 10, saturatedFat: 1.4, tags: ["olive_oil"]),
            item("White bread", 40, kcal: 100, protein: 4, carbs: 20, fat: 1, fibre: 1, sugars: 2, saturatedFat: 0.3, sodiumMg: 200, tags: ["grain"]),
            item("Baklava", 30, kcal: 130, protein: 2, carbs: 15, fat: 7, fibre: 1, sugars: 10, saturatedFat: 2, sodiumMg: 50, tags: ["nuts", "processed_sugar"]),
        ]
    }

    /// 500 g, 800 kcal, protein 52, fibre 13, sugars 18, sat fat 7.3, sodium 355 mg.
    @Test func mediterraneanPlateScoresAsWorkedOut() {
        let result = DietScore.score(mediterraneanPlate, diet: .mediterranean, custom: nil)
        #expect(
            points(result) == [
                // Favoured 460/500 = 92 % → capped 10; limited (baklava) 30/500 = 6 %: 2 started 5 % steps → 8.
                "favoured_foods": 10, "limited_foods": 8,
                // Per 100 g (÷ 5): 669.44 kJ → 1 (just under 670); sugars 3.6 → 1; sat fat 1.46 → 1; salt 0.1775 → 0; N = 3;
                // fibre 2.6 → 0; protein 10.4 → 4; legumes and vegetables 270/500 = 54 % → 1.
                "energy": 9, "sugars": 14, "saturated_fat": 9, "salt": 20, "fibre": 0, "protein": 4, "fruit_vegetables_legumes": 1,
            ])
        // fit 18/20 = 90; quality 57/72 = 79.17 → 79; (90 + 79) / 2 = 84.5 → 85.
        #expect(result.fit == 90 && result.quality == 79 && result.score == 85 && result.band == "great")
        #expect(component(result, "favoured_foods")?.improvement == nil)
        #expect(component(result, "limited_foods")?.sentence == "Processed sugar, red and processed meat: Baklava; 30 of 500 g (6 %).")
        // Down to 5 % of 500 g = 25 g: swap 5 g.
        #expect(component(result, "limited_foods")?.improvement == "Swap 5 g of Baklava for food that is not processed sugar, red or processed meat: +1")
        // (669.44 − 335) · 5 = 1672.2 kJ = 399.67 kcal → 400.
        #expect(component(result, "energy")?.improvement == "400 kcal less: +1")
        // (3.6 − 3.4) · 5 = 1 g; (1.46 − 1) · 5 = 2.3 g.
        #expect(component(result, "sugars")?.improvement == "1 g less sugars: +1")
        #expect(component(result, "saturated_fat")?.improvement == "2.3 g less saturated fat: +1")
        #expect(component(result, "salt")?.improvement == nil)
        // (3.0 − 2.6) · 5 = 2 g and (12 − 10.4) · 5 = 8 g, both strictly more.
        #expect(component(result, "fibre")?.improvement == "2.1 g more fibre: +1")
        #expect(component(result, "protein")?.improvement == "8.1 g more protein: +1")
        // Above 60 % of 500 g = 300 g: 30 g more than 270, strictly above → 31 g.
        #expect(component(result, "fruit_vegetables_legumes")?.improvement == "Swap 31 g of other food for fruit, vegetables or legumes: +1")
    }

    // MARK: - Every diet

    /// 200 g; 22.5 g protein (90 kcal), 45 g carbohydrate (180), 20 g fat (180): 20/40/40 % of 450 kcal.
    /// Its quality: 941.4 kJ/100 g → 2 (8/10); nothing else negative; protein 11.25 g → 4; 57/72 = 79.17 → 79.
    private var plainPlate: [ScoredItem] { [item("Plate", 200, kcal: 450, protein: 22.5, carbs: 45, fat: 20)] }

    @Test func lowCarbScoresNetCarbsProteinAndFat() {
        let result = DietScore.score(plainPlate, diet: .lowCarb, custom: nil)
        // Net carbs 40 %: 14 over 26 → 7 steps → 3; protein 20 % in 15–35 → 10; fat 40 % ≥ 35 → 10.
        #expect(result.components.filter { $0.part == "fit" }.map(\.points) == [3, 10, 10])
        #expect(result.components.filter { $0.part == "fit" }.map(\.name) == ["net_carbs_share", "protein_share", "fat_share"])
        // fit 23/30 = 76.67 → 77; (77 + 79) / 2 = 78.
        #expect(result.fit == 77 && result.quality == 79 && result.score == 78 && result.band == "ok")
        // Next point at 38 %: (0.38·450 − 180) / (4·0.62) = −3.63 g → 3.7 g.
        #expect(component(result, "net_carbs_share")?.improvement == "3.7 g less net carbs: +1")
    }

    @Test func balancedScoresAgainstTheGuidelineRanges() {
        let result = DietScore.score(plainPlate, diet: .balanced, custom: nil)
        // Carbohydrate 40 %: 5 under 45 → 3 steps → 7; fat 40 %: 5 over 35 → 7; protein 20 % → 10.
        #expect(points(result)["carbs_share"] == 7 && points(result)["fat_share"] == 7 && points(result)["protein_share"] == 10)
        // fit 24/30 = 80; (80 + 79) / 2 = 79.5 rounds to 80: great, on the band's edge.
        #expect(result.fit == 80 && result.quality == 79 && result.score == 80 && result.band == "great")
        // Next points at 41 % carbohydrate: (0.41·450 − 180) / (4·0.59) = 1.91 g → 2 g;
        // at 39 % fat: (0.39·450 − 180) / (9·0.61) = −0.82 g → 0.9 g.
        #expect(component(result, "carbs_share")?.improvement == "2 g more carbohydrate: +1")
        #expect(component(result, "fat_share")?.improvement == "0.9 g less fat: +1")
        #expect(component(result, "carbs_share")?.sentence == "Carbohydrate: 40 % of the meal's energy; the balanced target is 45–65 %.")
    }

    @Test func customScoresAgainstTheUsersSplitWithinFivePoints() {
        let split = MacroSplit(protein: 30, carbs: 40, fat: 30)
        let result = DietScore.score(plainPlate, diet: .custom, custom: split)
        // Ranges 25–35 / 35–45 / 25–35: protein 20 % is 5 under → 7; carbohydrate 40 % → 10; fat 40 % is 5 over → 7.
        #expect(result.components.filter { $0.part == "fit" }.map(\.points) == [7, 10, 7])
        #expect(result.fit == 80 && result.score == 80)
        // Next point at 21 %: (0.21·450 − 90) / (4·0.79) = 1.42 g → 1.5 g.
        #expect(component(result, "protein_share")?.improvement == "1.5 g more protein: +1")
        #expect(component(result, "protein_share")?.sentence == "Protein: 20 % of the meal's energy; your target is 25–35 %.")
    }

    @Test func vegetarianExcludesMeatAndFish() {
        let meal = [
            item("Margherita pizza", 300, kcal: 750, tags: ["grain", "cheese"]),
            item("Ham", 50, kcal: 60, tags: ["processed_meat", "red_meat"]),
            item("Prawns", 50, kcal: 50, tags: ["seafood"]),
        ]
        let result = DietScore.score(meal, diet: .vegetarian, custom: nil)
        let excluded = component(result, "excluded_foods")
        // Cheese is allowed; ham (meat) and prawns (fish) are 100 of 400 g: 300/400 = 7.5 tenths → 7.
        #expect(excluded?.points == 7 && result.fit == 70)
        #expect(excluded?.sentence == "Excluded on a vegetarian diet: Ham (meat), Prawns (fish); 100 of 400 g.")
        // 8 tenths of 400 g = 320 g allowed: swap 20 g.
        #expect(excluded?.improvement == "Swap 20 g of Ham or Prawns for food with no meat or fish: +1")
    }

    @Test func veganCountsCheeseAsDairyAndAcceptsAPlantMeal() {
        let toastie = [item("Cheese toastie", 100, kcal: 300, tags: ["grain", "cheese"]), item("Tomato soup", 300, kcal: 120, tags: ["vegetable"])]
        let result = DietScore.score(toastie, diet: .vegan, custom: nil)
        // 300 of 400 g free → 7; 8 tenths needs 320 g → swap 20 g.
        #expect(component(result, "excluded_foods")?.points == 7)
        #expect(component(result, "excluded_foods")?.sentence == "Excluded on a vegan diet: Cheese toastie (dairy); 100 of 400 g.")
        #expect(component(result, "excluded_foods")?.improvement == "Swap 20 g of Cheese toastie for food with no meat, fish, dairy, egg or honey: +1")

        let soup = DietScore.score([item("Lentil soup", 300, kcal: 240, tags: ["legume", "vegetable"])], diet: .vegan, custom: nil)
        #expect(soup.fit == 100 && component(soup, "excluded_foods")?.improvement == nil)
        #expect(component(soup, "excluded_foods")?.sentence == "Nothing in the meal is excluded on a vegan diet (no meat, fish, dairy, egg or honey).")
    }

    @Test func paleoExcludesGrainLegumeDairySugarAndSeedOil() {
        let meal = [
            item("Steak", 200, kcal: 500, tags: ["red_meat"]),
            item("Sweet potato", 150, kcal: 130, tags: ["vegetable"]),
            item("Butter", 10, kcal: 72, tags: ["dairy"]),
            item("Bread roll", 40, kcal: 110, tags: ["grain"]),
        ]
        let result = DietScore.score(meal, diet: .paleo, custom: nil)
        // 350 of 400 g free = 8.75 tenths → 8; 9 tenths needs 360 g → swap 10 g.
        #expect(component(result, "excluded_foods")?.points == 8 && result.fit == 80)
        #expect(component(result, "excluded_foods")?.sentence == "Excluded on a paleo diet: Butter (dairy), Bread roll (grain); 50 of 400 g.")
        #expect(
            component(result, "excluded_foods")?.improvement
                == "Swap 10 g of Butter or Bread roll for food with no grain, legume, dairy, processed sugar or seed oil: +1")
    }

    @Test func mediterraneanPenalisesRedMeatAndRewardsVegetables() {
        let meal = [
            item("Steak", 200, kcal: 500, tags: ["red_meat"]), item("Chips", 150, kcal: 450, tags: ["fried"]),
            item("Side salad", 50, kcal: 15, tags: ["vegetable"]),
        ]
        let result = DietScore.score(meal, diet: .mediterranean, custom: nil)
        // Favoured 50/400 = 12.5 % → 2 whole 5 % steps → 2; limited 200/400 = 50 % → 10 steps → 0. fit 2/20 = 10.
        #expect(points(result)["favoured_foods"] == 2 && points(result)["limited_foods"] == 0 && result.fit == 10)
        // 15 % of 400 g = 60 g favoured: swap 10 g in; 45 % of 400 g = 180 g limited: swap 20 g out.
        #expect(component(result, "favoured_foods")?.improvement == "Swap 10 g of other food for fish, legumes, vegetables, olive oil or nuts: +1")
        #expect(component(result, "limited_foods")?.improvement == "Swap 20 g of Steak for food that is not processed sugar, red or processed meat: +1")
    }

    @Test func ketoMealWithoutEnergyFitsAndScoresOnlyItsQuality() {
        let result = DietScore.score([item("Water", 250, kcal: 0)], diet: .keto, custom: nil)
        // No macro energy: every share component gets 10. Quality: N = 0, P = 0 → 55/72 = 76.39 → 76; (100 + 76) / 2 = 88.
        #expect(result.fit == 100 && result.quality == 76 && result.score == 88)
    }

    // MARK: - Bands and rounding

    @Test func bandsStartAtEightyAndSixty() {
        #expect(DietScore.band(for: 100) == "great" && DietScore.band(for: 80) == "great")
        #expect(DietScore.band(for: 79) == "ok" && DietScore.band(for: 60) == "ok")
        #expect(DietScore.band(for: 59) == "poor" && DietScore.band(for: 0) == "poor")
    }

    // MARK: - Nutri-Score's thresholds and protein rule

    /// 300 g with values exactly at thresholds per 100 g: sugars 3.4, sat fat 1, salt 0.8 (960 mg sodium), fibre 3.0.
    /// A value at a threshold gets the lower points; positive points need strictly more.
    @Test func valuesAtAThresholdGetTheLowerPoints() {
        let meal = [item("Edge", 300, kcal: 0, fibre: 9, sugars: 10.2, saturatedFat: 3, sodiumMg: 960)]
        let result = DietScore.score(meal, diet: .balanced, custom: nil)
        // Salt 960 · 2.5 / 1000 = 2.4 g in 300 g = 0.8: above 0.2, 0.4, 0.6 only → 3 → 17/20.
        #expect(points(result)["sugars"] == 15 && points(result)["saturated_fat"] == 10 && points(result)["salt"] == 17)
        #expect(points(result)["fibre"] == 0)
        // Down to 0.6 per 100 g: 0.2 · 3 = 0.6 g; fibre anything above 3.0 → the smallest step, 0.1 g.
        #expect(component(result, "salt")?.improvement == "0.6 g less salt: +1")
        #expect(component(result, "fibre")?.improvement == "0.1 g more fibre: +1")

        // 100 g with 400 mg sodium is 1.0 g salt: 4 points (16/20); 404 mg is 1.01 g: 5 points (15/20).
        let atOne = DietScore.score([item("Soup", 100, kcal: 0, sodiumMg: 400)], diet: .balanced, custom: nil)
        let overOne = DietScore.score([item("Soup", 100, kcal: 0, sodiumMg: 404)], diet: .balanced, custom: nil)
        #expect(points(atOne)["salt"] == 16 && points(overOne)["salt"] == 15)
        #expect(component(atOne, "salt")?.improvement == "0.2 g less salt: +1")
        // 0.01 g over the threshold: the smallest step, 0.1 g.
        #expect(component(overOne, "salt")?.improvement == "0.1 g less salt: +1")
    }

    /// 100 g: 400 kcal = 1673.6 kJ → 4; sat fat 5.5 → 5; protein 20 g would be 7.
    @Test func proteinCountsOnlyBelowElevenNegativePoints() {
        // Sodium 200 mg = 0.5 g salt → 2: N = 4 + 5 + 2 = 11, so protein earns nothing.
        let eleven = DietScore.score(
            [item("Burger", 100, kcal: 400, protein: 20, carbs: 30, fat: 25, saturatedFat: 5.5, sodiumMg: 200)], diet: .balanced, custom: nil)
        #expect(component(eleven, "protein")?.points == 0 && component(eleven, "protein")?.max == 7)
        #expect(
            component(eleven, "protein")?.sentence
                == "Protein: 20 g per 100 g would be 7 of 7 Nutri-Score positive points, but protein counts only below 11 negative points (this meal has 11).")
        #expect(component(eleven, "protein")?.improvement == "1 fewer negative point (energy, sugars, saturated fat or salt) would count the protein: +7")
        // 6 + 15 + 5 + 18 + 0 + 0 + 0 = 44/72 = 61.11 → 61.
        #expect(eleven.quality == 61)

        // Sodium 160 mg = 0.4 g salt, exactly at a threshold → 1: N = 10, protein counts 7.
        let ten = DietScore.score(
            [item("Burger", 100, kcal: 400, protein: 20, carbs: 30, fat: 25, saturatedFat: 5.5, sodiumMg: 160)], diet: .balanced, custom: nil)
        #expect(component(ten, "protein")?.points == 7 && component(ten, "protein")?.improvement == nil)
        // 6 + 15 + 5 + 19 + 0 + 7 + 0 = 52/72 = 72.22 → 72.
        #expect(ten.quality == 72)
    }

    // MARK: - Inputs, outputs, version

    @Test func missingNutrientsCountAsZero() {
        let missing = item("Rice", 150, kcal: 200, protein: 4, carbs: 44, fat: 0.5)
        let zero = item("Rice", 150, kcal: 200, protein: 4, carbs: 44, fat: 0.5, fibre: 0, sugars: 0, saturatedFat: 0, sodiumMg: 0)
        #expect(DietScore.score([missing], diet: .balanced, custom: nil) == DietScore.score([zero], diet: .balanced, custom: nil))
    }

    @Test func everyImprovementNamesAnAmount() {
        for (meal, diet) in [(ketoBreakfast, Diet.keto), (veganBowl, .vegan), (mediterraneanPlate, .mediterranean), (plainPlate, .lowCarb)] {
            for component in DietScore.score(meal, diet: diet, custom: nil).components {
                guard let improvement = component.improvement else { continue }
                // A number, then what it is of, then the gain.
                let hasNumber = improvement.contains { $0.isNumber }
                #expect(hasNumber, "\(component.name): \(improvement)")
                #expect(improvement.contains(" g ") || improvement.contains(" kcal ") || improvement.contains(" fewer "), "\(component.name): \(improvement)")
                #expect(improvement.hasSuffix(": +1") || improvement.hasSuffix(": +3") || improvement.hasSuffix(": +7"), "\(component.name): \(improvement)")
            }
        }
    }

    @Test func resultCarriesTheAlgorithmVersionInItsJSON() throws {
        let result = DietScore.score(veganBowl, diet: .vegan, custom: nil)
        #expect(DietScore.algorithmVersion == "2026-11.1")
        let json = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(result)) as? [String: Any])
        #expect(json["algorithm_version"] as? String == "2026-11.1")
        #expect(Set(json.keys) == ["score", "band", "fit", "quality", "components", "algorithm_version"])
    }

    @Test func everyDietAndTagIsKnown() {
        #expect(Diet(rawValue: "low_carb") == .lowCarb && Diet.allCases.count == 8)
        let documented: Set<String> = [
            "meat", "red_meat", "processed_meat", "poultry", "fish", "seafood", "dairy", "cheese", "egg", "honey", "grain", "whole_grain",
            "legume", "nuts", "seeds", "fruit", "vegetable", "olive_oil", "seed_oil", "processed_sugar", "alcohol", "fried",
        ]
        #expect(documented.isSubset(of: FoodTags.all))
    }
}
