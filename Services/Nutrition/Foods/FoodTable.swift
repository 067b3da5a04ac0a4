import Foundation
import ServiceKit

/// The food composition table shipped in `Resources/usda-sr24-foods.json` (USDA SR24; source and
/// licence in `Resources/README.md`), loaded by a migration of its own: the SQL below with the
/// file's text in it. Its checksum is then the file's, so an edited file stops start-up as an
/// edited migration would.
enum FoodTable {
    static let migrationName = "0018_foods_usda_sr24"
    /// What `source` names in answers: the release the values are from.
    static let release = "USDA SR24"
    /// The table's version for kept search responses: the release's number.
    static let version: Int64 = 24

    struct Unusable: Error, CustomStringConvertible {
        var description: String
    }

    static func migration(bundle: Bundle) throws -> Migration {
        guard let url = bundle.url(forResource: "usda-sr24-foods", withExtension: "json", subdirectory: "Resources") else {
            throw Unusable(description: "Resources/usda-sr24-foods.json is missing from the bundle")
        }
        return try migration(json: String(contentsOf: url, encoding: .utf8))
    }

    static func migration(json: String) throws -> Migration {
        // The text goes into the statement dollar-quoted: it must not close the quote itself.
        guard !json.contains("$foods$") else { throw Unusable(description: "Resources/usda-sr24-foods.json contains the quote $foods$") }
        let sql = """
            INSERT INTO foods (ndb_number, description, energy_kcal, protein_g, carbs_g, fat_g, fiber_g, sugars_g, saturated_fat_g, sodium_mg, alcohol_g, portions)
            SELECT f.ndb_number, f.description, f.energy_kcal, f.protein_g, f.carbs_g, f.fat_g, f.fiber_g, f.sugars_g, f.saturated_fat_g, f.sodium_mg,
                f.alcohol_g, coalesce(f.portions, '[]')
            FROM jsonb_to_recordset($foods$\(json)$foods$::jsonb) AS f(
                ndb_number text, description text, energy_kcal float8, protein_g float8, carbs_g float8, fat_g float8, fiber_g float8,
                sugars_g float8, saturated_fat_g float8, sodium_mg float8, alcohol_g float8, portions jsonb);

            INSERT INTO food_words (word, trigrams, foods)
            SELECT word, word_trigrams(word), count(DISTINCT ndb_number)
            FROM foods, regexp_split_to_table(lower(description), '[^[:alnum:]]+') AS word
            WHERE word <> ''
            GROUP BY word;
            """
        return Migration(name: migrationName, sql: sql)
    }
}
