import Foundation
import ServiceKit

/// A meal as written (`POST` or `PUT`): validated, totalled, scored against the profile's diet,
/// checked against the user's allergies, with the local day it counts for.
struct MealDraft: Sendable {
    struct Body: StrictJSONBody {
        var name: String
        var eatenAt: Date
        var items: [MealItemInput]
        var notes: String?
        var photoURL: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case name, eatenAt = "eaten_at", items, notes, photoURL = "photo_url" }
    }

    struct AllergyWarning: Codable, Sendable, Equatable {
        var item: String
        var allergy: String
        var severity: String
        /// In the order of their names (see `MealItem.CodingKeys`).
        enum CodingKeys: String, CodingKey { case allergy, item, severity }
    }

    struct Warning: Codable, Sendable, Equatable {
        var code: String
        var item: Int
        var message: String
    }

    static let maxItems = 50

    var name: String
    var eatenAt: Date
    var localDay: LocalDay
    var items: [MealItem]
    var totals: NutrientTotals
    var diet: Diet
    var score: DietScoreResult
    var allergyWarnings: [AllergyWarning]
    var warnings: [Warning]
    var notes: String?
    var photoURL: String?

    /// `items` are the body's, each with its amounts (`FoodStore.fill`).
    /// When a meal may say it was eaten: within five years of now either way.
    static func eatenAtProblem(_ date: Date) -> Problem.FieldError? {
        abs(date.timeIntervalSinceNow) > 5 * 366 * 86_400 ? .init(field: "eaten_at", message: "must be within five years of now") : nil
    }

    /// `meal` is the meal written (nil for a new one): the only path on this API its `photo_url` may
    /// name is its own photo's, which the server sets; any other is another meal's, or nothing.
    init(_ body: Body, items: [MealItem], profile: DietProfile, meal: UUID?) throws {
        var problems: [Problem.FieldError] = []
        let name = body.name.trimmingCharacters(in: .whitespacesAndNewlines)
        if name.isEmpty || body.name.unicodeScalars.count > 200 { problems.append(.init(field: "name", message: "must be 1 to 200 characters")) }
        if items.isEmpty || items.count > Self.maxItems { problems.append(.init(field: "items", message: "must hold 1 to \(Self.maxItems) items")) }
        for (index, item) in items.prefix(Self.maxItems).enumerated() { problems += item.problems(at: index) }
        if let notes = body.notes, notes.unicodeScalars.count > 2000 { problems.append(.init(field: "notes", message: "must be at most 2000 characters")) }
        if let photo = body.photoURL,
            photo.unicodeScalars.count > 2048 || !(photo.hasPrefix("https://") || photo.hasPrefix("http://") || meal.map { MealPhotoStore.isOwnPhoto(photo, of: $0) } == true)
        {
            problems.append(
                .init(field: "photo_url", message: "must be an http(s) URL, at most 2048 characters (a photo this API keeps is set by POST /v1/meals/{id}/photo)"))
        }
        if let problem = Self.eatenAtProblem(body.eatenAt) { problems.append(problem) }
        if !problems.isEmpty { throw APIError.validation(problems) }
        self.name = name
        eatenAt = body.eatenAt
        localDay = profile.localDay(of: body.eatenAt)
        self.items = items
        totals = items.map(\.totals).reduce(.zero, +)
        diet = profile.diet
        score = DietScore.score(items.map(\.scored), diet: profile.diet, custom: profile.customMacros)
        notes = body.notes
        photoURL = body.photoURL
        allergyWarnings = Self.allergyWarnings(items, allergies: profile.allergies)
        warnings = items.enumerated().compactMap { index, item in
            let expected = item.energyFromMacros
            let allowed = max(MealItem.energyTolerance.kcal, expected * MealItem.energyTolerance.share)
            guard abs(item.calories - expected) > allowed else { return nil }
            return Warning(
                code: "nutrition_inconsistent", item: index,
                message: "\(item.name): \(Int(item.calories.rounded())) kcal stated, \(Int(expected.rounded())) kcal from its protein, carbs and fat")
        }
    }

    /// Items whose name or tags name one of the user's allergies (case and accents aside): the
    /// allergy's text within the name, or its words within the name's or a tag's in either number
    /// ("Peanuts" warns of "Peanut butter toast", "Cookies" of "Oatmeal cookie", "Nut" of the tag
    /// `nuts`). A missed warning costs far more than a needless one.
    static func allergyWarnings(_ items: [MealItem], allergies: [Allergy]) -> [AllergyWarning] {
        func fold(_ text: String) -> String { text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil) }
        var warnings: [AllergyWarning] = []
        for item in items {
            let name = fold(item.name)
            let nameWords = wordForms(name)
            let tags = (item.tags ?? []).map(fold)
            for allergy in allergies {
                let allergen = fold(allergy.name).trimmingCharacters(in: .whitespaces)
                let allergenWords = wordForms(allergen)
                guard !allergen.isEmpty else { continue }
                if name.contains(allergen) || contains(nameWords, allergenWords) || tags.contains(where: { contains(wordForms($0), allergenWords) }) {
                    warnings.append(AllergyWarning(item: item.name, allergy: allergy.name, severity: allergy.severity.rawValue))
                }
            }
        }
        return warnings
    }

    /// The words of `text` (folded already), each with the forms it may have in the other number
    /// as English writes plurals: "cookies" is also "cookie" and "cooky", "peaches" "peache" and
    /// "peach", "eggs" "egg"; a word ending in -ss, -us or -is is only itself (hummus, couscous).
    static func wordForms(_ text: String) -> [Set<String>] {
        text.split { !$0.isLetter }.map { part in
            let word = String(part)
            var forms: Set<String> = [word]
            guard word.count > 3, word.hasSuffix("s"), !word.hasSuffix("ss"), !word.hasSuffix("us"), !word.hasSuffix("is") else { return forms }
            forms.insert(String(word.dropLast()))
            if word.hasSuffix("es") { forms.insert(String(word.dropLast(2))) }
            if word.hasSuffix("ies") { forms.insert(word.dropLast(3) + "y") }
            return forms
        }
    }

    /// Whether `words` holds `run` in a row, each word of the run sharing a form with its match.
    static func contains(_ words: [Set<String>], _ run: [Set<String>]) -> Bool {
        guard !run.isEmpty, run.count <= words.count else { return false }
        return (0...(words.count - run.count)).contains { start in
            run.indices.allSatisfy { !words[start + $0].isDisjoint(with: run[$0]) }
        }
    }
}
