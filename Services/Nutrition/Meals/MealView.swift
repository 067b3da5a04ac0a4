import Hummingbird
import ServiceKit

/// A meal as the API writes it.
struct MealView: Encodable, Sendable, ResponseEncodable {
    struct ItemView: Encodable, Sendable {
        var item: MealItem
        func encode(to encoder: any Encoder) throws {
            try item.encode(to: encoder)
            var json = encoder.container(keyedBy: AnyKey.self)
            try json.encode(item.totals.rounded, forKey: AnyKey("totals"))
        }
    }

    struct Explanation: Encodable, Sendable {
        var fit: Int
        var quality: Int
        var components: [ScoreComponent]
        /// In the order of their names (see `MealItem.CodingKeys`).
        enum CodingKeys: String, CodingKey { case components, fit, quality }
    }

    var meal: MealRecord

    init(_ meal: MealRecord) { self.meal = meal }

    /// Keys in the order of their names (see `MealItem.CodingKeys`).
    func encode(to encoder: any Encoder) throws {
        var json = encoder.container(keyedBy: AnyKey.self)
        try json.encode(meal.score.algorithmVersion, forKey: AnyKey("algorithm_version"))
        try json.encode(meal.allergyWarnings, forKey: AnyKey("allergy_warnings"))
        // Only on a meal made from a photo: a typed meal's answer is as it always was.
        if let analysis = meal.analysis { try json.encode(analysis, forKey: AnyKey("analysis")) }
        try json.encode(meal.consumed, forKey: AnyKey("consumed"))
        try json.encode(meal.consumedAt, forKey: AnyKey("consumed_at"))
        try json.encode(meal.consumedNotes, forKey: AnyKey("consumed_notes"))
        try json.encode(meal.createdAt, forKey: AnyKey("created_at"))
        try json.encode(meal.diet, forKey: AnyKey("diet"))
        try json.encode(meal.score.score, forKey: AnyKey("diet_score"))
        try json.encode(meal.eatenAt, forKey: AnyKey("eaten_at"))
        try json.encode(meal.edited, forKey: AnyKey("edited"))
        try json.encode(meal.id, forKey: AnyKey("id"))
        try json.encode(meal.items.map(ItemView.init), forKey: AnyKey("items"))
        try json.encode(meal.localDate, forKey: AnyKey("local_date"))
        try json.encode(meal.name, forKey: AnyKey("name"))
        try json.encode(meal.notes, forKey: AnyKey("notes"))
        try json.encode(meal.photoURL, forKey: AnyKey("photo_url"))
        try json.encode(meal.score.band, forKey: AnyKey("score_band"))
        try json.encode(Explanation(fit: meal.score.fit, quality: meal.score.quality, components: meal.score.components), forKey: AnyKey("score_explanation"))
        try json.encode(meal.totals.rounded, forKey: AnyKey("totals"))
        try json.encode(meal.updatedAt, forKey: AnyKey("updated_at"))
        try json.encode(meal.viewCount, forKey: AnyKey("view_count"))
        try json.encode(meal.warnings, forKey: AnyKey("warnings"))
    }
}
