import Foundation
import Hummingbird

/// A food of the composition table as the API shows it.
struct FoodView: ResponseEncodable, Codable, Sendable {
    var ndbNumber: String
    var description: String
    var per100g: Per100g
    var portions: [FoodRecord.Portion]
    var tags: [String]
    /// The release its values are from.
    var source: String

    enum CodingKeys: String, CodingKey {
        case description, ndbNumber = "ndb_number", per100g = "per_100g", portions, source, tags
    }

    init(_ food: FoodRecord) {
        ndbNumber = food.ndbNumber
        description = food.description
        per100g = food.per100g
        portions = food.portions
        tags = food.tags
        source = FoodTable.release
    }
}
