import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// A food of the composition table (`foods`): USDA's description, its amounts in 100 g, its
/// household portions and the diet score's tags read from USDA's classification.
struct FoodRecord: Sendable, Equatable {
    struct Portion: Codable, Sendable, Equatable {
        var amount: Double
        var unit: String
        var grams: Double
    }

    var ndbNumber: String
    var description: String
    var per100g: Per100g
    var portions: [Portion]
    var tags: [String]
}

/// Position in a food search: the food's rank for the query, its description, its number; and the
/// query (its words, lowercased), since a rank means nothing for another one.
struct FoodCursor: Codable, Sendable {
    var rank: Int
    var description: String
    var ndbNumber: String
    var query: String
    enum CodingKeys: String, CodingKey { case rank = "r", description = "d", ndbNumber = "n", query = "q" }
}

/// The queries on the food composition table. It changes only with a migration.
struct FoodStore: Sendable {
    /// The words of a query that count, from its first, stop words ("the", "how") left out before
    /// spelling is corrected (they would become food words): each unknown one costs a search of the
    /// food words, and no food's name needs more.
    static let maxWords = 8
    /// Of those, the first this many are corrected when no food uses them (each correction is a
    /// search of the food words); a later unknown word stays as typed.
    static let maxCorrections = 4
    /// A search lists foods naming at least half of the query's words.
    static let minimumCoverage = 0.5
    /// An analysed item takes a food's values only when the food names every word of the item's
    /// name as written (`match`); otherwise the model's estimate stands.
    static let matchCoverage = 1.0
    /// How many of the best matches an analysed item is weighed against.
    static let matchCandidates = 10
    /// Energies per 100 g this close are plausible whatever their ratio (black coffee 1 or 2 kcal),
    /// and no closer than a sweet drink (35 to 50) to an unsweetened one (0 to 2).
    static let plausibleEnergyGap = 20.0
    /// The most of its energy a plausible food draws otherwise than the estimate among protein,
    /// carbohydrate and fat (half the sum of the three shares' differences): a bun is not the
    /// burger, a dressing not the salad, a fruit yoghurt not a plain one, whatever their energies.
    static let plausibleShareDifference = 0.25
    /// How far below the best match's rank a food ranks for as much distance as the whole of the
    /// estimate's energy: what the name means counts with what the model saw (`distance`).
    static let rankPerDistance = 3000.0
    /// Foods whose distances are this close are alike; the better ranked of them is taken.
    static let alikeDistance = 0.03
    /// The farthest a food may be and still stand for the item; farther, the estimate stands.
    static let farthestMatch = 0.6

    /// A table's energy per 100 g beside a model's estimate: within a factor of two either way, or
    /// within `plausibleEnergyGap`.
    static func isPlausible(_ energy: Double, beside estimate: Double) -> Bool {
        abs(energy - estimate) <= plausibleEnergyGap || (energy <= 2 * estimate && estimate <= 2 * energy)
    }

    /// A table's food beside a model's estimate: its energy plausible, and its energy shared out
    /// among protein, carbohydrate and fat (4, 4 and 9 kcal a gram) as the estimate's is, within
    /// `plausibleShareDifference`. Alcohol is left out of both, as an estimate may not give it.
    /// Where either side's macronutrients hold less than `plausibleEnergyGap` (coffee, tea, a diet
    /// drink) the shares say nothing and only the energy counts.
    static func isPlausible(_ food: Per100g, beside estimate: Per100g) -> Bool {
        isPlausible(food.calories, beside: estimate.calories) && (shareDifference(food, estimate) ?? 0) <= plausibleShareDifference
    }

    /// Half the sum of the differences between the shares of two foods' energy that protein,
    /// carbohydrate and fat give (4, 4 and 9 kcal a gram), alcohol left out; nil where either
    /// side's three give less than `plausibleEnergyGap`.
    static func shareDifference(_ food: Per100g, _ estimate: Per100g) -> Double? {
        func shares(_ values: Per100g) -> [Double]? {
            let energies = [4 * values.proteinG, 4 * values.carbsG, 9 * values.fatG]
            let total = energies.reduce(0, +)
            return total < plausibleEnergyGap ? nil : energies.map { $0 / total }
        }
        guard let found = shares(food), let estimated = shares(estimate) else { return nil }
        return zip(found, estimated).map { abs($0 - $1) }.reduce(0, +) / 2
    }

    /// How far a food is from the model's estimate for an item: the energy per 100 g between them
    /// as a share of the estimate's (of 50 kcal at least, so that a cup of black coffee is not ten
    /// times off for one kcal), plus the share difference, plus how far below the best match the
    /// search ranked it, `rankPerDistance` points counting one.
    static func distance(_ food: Per100g, rankedBelowBestBy rankGap: Int, from estimate: Per100g) -> Double {
        abs(food.calories - estimate.calories) / max(estimate.calories, 50) + (shareDifference(food, estimate) ?? 0)
            + Double(max(rankGap, 0)) / rankPerDistance
    }

    static let columns = """
        f.ndb_number, f.description, f.energy_kcal, f.protein_g, f.carbs_g, f.fat_g, f.fiber_g, f.sugars_g, f.saturated_fat_g, f.sodium_mg, f.alcohol_g,
        f.portions::text, f.tags
        """

    static func decode(_ row: PostgresRandomAccessRow) throws -> FoodRecord {
        func v<T: PostgresDecodable>(_ index: Int, _ type: T.Type) throws -> T { try row[index].decode(T.self) }
        let per100g = Per100g(
            calories: try v(2, Double.self), proteinG: try v(3, Double.self), carbsG: try v(4, Double.self), fatG: try v(5, Double.self),
            fiberG: try v(6, Double?.self), sugarG: try v(7, Double?.self), saturatedFatG: try v(8, Double?.self), sodiumMg: try v(9, Double?.self),
            alcoholG: try v(10, Double?.self))
        let portions = try JSONDecoder().decode([FoodRecord.Portion].self, from: Data(try v(11, String.self).utf8))
        return FoodRecord(
            ndbNumber: try v(0, String.self), description: try v(1, String.self), per100g: per100g, portions: portions, tags: try v(12, [String].self))
    }

    /// The foods best matching `query`, with each one's rank, whether it names a word of the query
    /// only by a correction, whether it is a stand-in the query does not ask for, whether it
    /// names each word of the query other than by a piece of a brand's or product's capitals, and
    /// whether it names one of them before "with" or by a common name (`words_before_with`).
    ///
    /// Two words that foods write as one are read as that word ("soy milk"), and
    /// a food is also found by what people call it (`food_common_names`: "oatmeal", "fries"); then the
    /// query's words are corrected: one no food uses becomes the food word nearest it by trigrams
    /// (similarity as pg_trgm counts it, at least pg_trgm's default 0.3). Foods naming every word are
    /// the candidates; when none does, those naming any (unless every word must be named); when they
    /// name every word only by a correction ("greek salad" read as "green salad"), the foods whose kind
    /// holds a word as typed follow them. A food's kind is its name before the first comma, or the part
    /// after it when that is one of USDA's classes ("Fish, salmon, …", "Fast foods, hamburger; …", up
    /// to a semicolon: see `0022_food_classes.sql` and `0024_food_eaten_out_classes.sql`).
    /// They rank by coverage, a corrected word counting half as much as one typed as a food word (a
    /// correction is a guess: "greek yogurt" lists yogurts before green peppers); then a food whose
    /// kind the query names ("Chicken, …" for "chicken breast"), or its class ("pumpkin seeds"), or one
    /// of its common names, by how usual it is among its kind's foods (`typicality`: "chicken" means
    /// broilers, not feet), a little more when its kind, or kind and first detail, is the query ("Milk,
    /// whole"); then by being generic, by how much of their name the query is, and by how many
    /// household portions USDA lists (common foods list many). A stand-in ("Chicken, meatless") gives
    /// up the kind and generic shares unless the query names it so, and a form nobody eats as it is
    /// (`unready`: "Coffee, instant, regular, powder") a little less.
    func search(_ query: String, limit: Int, after: FoodCursor?, minimumCoverage: Double, on connection: PostgresConnection, logger: Logger)
        async throws -> [SearchQuery.Row]
    {
        var found: [SearchQuery.Row] = []
        // USDA's descriptions are ASCII ("Peppers, jalapeno"): a letter with a mark is matched as the
        // letter, so "jalapeño" is not split into two words at the "ñ".
        let letters = query.folding(options: [.diacriticInsensitive], locale: nil)
        let statement = SearchQuery(query: letters, limit: limit, after: after, minimumCoverage: minimumCoverage)
        for try await row in try await connection.checkedExecute(statement, logger: logger) { found.append(row) }
        return found
    }

    /// Prepared once per connection: parsing and planning the statement on every request cost
    /// PostgreSQL about as much as running it (its plan cache now decides when to plan again).
    struct SearchQuery: PostgresPreparedStatement {
        static let name = "nutrition.food_search"
        static let sql = """
            WITH split AS (
                SELECT word, n, lead(word) OVER (ORDER BY n) AS next
                FROM regexp_split_to_table(lower($1), '[^[:alnum:]]+') WITH ORDINALITY AS w(word, n) WHERE word <> ''
            ),
            -- Two words that foods' names write as one ("soy milk": "Soymilk") are read as that word
            -- (`food_word_pairs`). Looked up by key as a scalar subquery: as EXISTS, the planner
            -- hashed the whole table for the thousand words it expects of a split.
            pairs AS (
                SELECT word, n, next, coalesce((SELECT true FROM food_word_pairs p WHERE p.first = s.word AND p.second = s.next), false) AS pair
                FROM split s
            ),
            -- In a run of words each joining the next ("corn bread fruit cake"), the first joins,
            -- the second is taken, the third joins: a word's place in its run is counted from the
            -- last word before the run that joins nothing.
            runs AS (SELECT word, n, next, pair, count(*) FILTER (WHERE NOT pair) OVER (ORDER BY n) AS run FROM pairs),
            places AS (SELECT word, n, next, pair, row_number() OVER (PARTITION BY run ORDER BY n) - (CASE WHEN run = 0 THEN 1 ELSE 2 END) AS place FROM runs),
            joined AS (
                SELECT CASE WHEN joins THEN word || next ELSE word END AS word, n, coalesce(lag(joins) OVER (ORDER BY n), false) AS taken
                FROM (SELECT word, n, next, pair AND place % 2 = 0 AS joins FROM places) AS p
            ),
            typed AS (
                SELECT word, word_trigrams(word) AS t, row_number() OVER (ORDER BY first) AS place
                FROM (
                    SELECT word, min(n) AS first FROM joined
                    WHERE NOT taken AND length(to_tsvector('english', word)) > 0
                    GROUP BY word ORDER BY min(n) LIMIT \(FoodStore.maxWords)
                ) AS words
            ),
            corrected AS (
                SELECT c.word, t.word AS typed, c.word <> t.word AS guessed
                FROM typed t, LATERAL (SELECT coalesce(
                    (SELECT w.word FROM food_words w WHERE w.word = t.word),
                    (SELECT w.word FROM food_words w, LATERAL (SELECT count(*)::float8 AS n FROM unnest(w.trigrams) AS g WHERE g = ANY (t.t)) AS s
                        WHERE t.place <= \(FoodStore.maxCorrections) AND w.trigrams && t.t AND length(w.word) BETWEEN length(t.word) - 2 AND length(t.word) + 2
                          AND s.n / (cardinality(w.trigrams) + cardinality(t.t) - s.n) >= 0.3
                        ORDER BY s.n / (cardinality(w.trigrams) + cardinality(t.t) - s.n) DESC, w.foods DESC, w.word
                        LIMIT 1),
                    t.word) AS word) AS c
            ),
            q AS (
                SELECT tsvector_to_array(to_tsvector('english', coalesce(string_agg(word, ' '), ''))) AS w,
                    -- A correction to another form of the word typed ("chickens" to "chicken") guesses nothing.
                    ARRAY(
                        SELECT unnest(tsvector_to_array(to_tsvector('english', coalesce(string_agg(word, ' ') FILTER (WHERE guessed), ''))))
                        EXCEPT SELECT unnest(tsvector_to_array(to_tsvector('english', coalesce(string_agg(typed, ' '), ''))))) AS guessed,
                    tsvector_to_array(to_tsvector('english', 'meatless imitation substitute')) AS stand_in_words,
                    tsvector_to_array(to_tsvector('english', 'powder powdered dry dehydrated concentrate concentrated condensed unprepared')) AS unready_words
                FROM corrected
            ),
            as_typed AS (SELECT ARRAY(SELECT unnest(q.w) EXCEPT SELECT unnest(q.guessed)) AS w FROM q),
            candidates AS (
                SELECT f.*, false AS typed_only FROM foods f, q WHERE f.words @> q.w
                UNION ALL
                SELECT f.*, false FROM foods f, q
                WHERE $3 < 1 AND NOT EXISTS (SELECT FROM foods e WHERE e.words @> q.w) AND f.words && q.w
                UNION ALL
                -- Foods naming every word only with a guess ("greek salad" read as "green salad") do not
                -- hide the foods whose kind holds a word as typed ("Salad dressing, …"): those follow them.
                SELECT f.*, true FROM foods f, q, as_typed
                WHERE $3 < 1 AND cardinality(q.guessed) > 0 AND EXISTS (SELECT FROM foods e WHERE e.words @> q.w)
                  AND f.kind_words && as_typed.w AND NOT f.words @> q.w
            )
            SELECT * FROM (
                SELECT \(FoodStore.columns), found.n / cardinality(q.w) AS coverage,
                    (20000 * (found.n - found.guessed / 2) / cardinality(q.w))::int - (CASE WHEN f.typed_only THEN 20000 ELSE 0 END)
                    + (500 * found.n / cardinality(f.words))::int
                    + (CASE WHEN f.generic AND NOT unasked.stand_in THEN 1000 ELSE 0 END)
                    + (CASE WHEN NOT unasked.stand_in
                        AND (q.w @> f.kind_words OR (q.w && f.class_words AND (f.class_words || f.kind_words) @> q.w) OR f.name_words @> q.w)
                        -- A kind read after a class ranks after the same kind named first ("Basil, fresh"
                        -- before "Spices, basil, dried").
                        THEN (CASE WHEN f.class_words IS NULL THEN 3000 ELSE 2500 END) + (2000 * f.typicality)::int ELSE 0 END)
                    + (CASE WHEN NOT unasked.stand_in AND found.n = cardinality(q.w)
                        AND ((f.kind_words @> q.w AND q.w @> f.kind_words) OR (f.kind_and_detail_words @> q.w AND q.w @> f.kind_and_detail_words))
                        THEN 300 ELSE 0 END)
                    + 100 * least(jsonb_array_length(f.portions), 10)
                    - (CASE WHEN f.unready AND NOT q.w && q.unready_words THEN 1500 ELSE 0 END) AS rank,
                    found.guessed > 0 AS guessed, unasked.stand_in,
                    -- Whether the food names each word of the query outside the capitals of a brand or
                    -- product, or in such a name the query holds whole ("BURGER KING, CHICKEN TENDERS"
                    -- is no chicken burger, but is "burger king chicken tenders"). A capitalised name
                    -- ends at a comma.
                    f.generic OR q.w <@ (tsvector_to_array(to_tsvector('english', regexp_replace(f.description, '\\S*[A-Z]{3,}\\S*', ' ', 'g')))
                        || coalesce(f.name_words, '{}')
                        || ARRAY(
                            SELECT unnest(b.w)
                            FROM regexp_matches(f.description, '([^\\s,]*[A-Z]{3,}[^\\s,]*(?:\\s+[^\\s,]*[A-Z]{3,}[^\\s,]*)*)', 'g') AS m,
                                LATERAL (SELECT tsvector_to_array(to_tsvector('english', m[1])) AS w) AS b
                            WHERE q.w @> b.w)) AS not_by_brand,
                    -- Whether it names a word of the query before "with", or by what people call it.
                    q.w && (f.words_before_with || coalesce(f.name_words, '{}')) AS named_before_with
                FROM candidates f, q, LATERAL (
                    SELECT count(*)::float8 AS n, count(*) FILTER (WHERE w = ANY (q.guessed))::float8 AS guessed
                    FROM unnest(q.w) AS w WHERE w = ANY (f.words)) AS found,
                    LATERAL (SELECT f.stand_in AND NOT q.w && q.stand_in_words AS stand_in) AS unasked
                WHERE cardinality(q.w) > 0
            ) AS f
            WHERE f.coverage >= $3
              AND ($4::int IS NULL OR f.rank < $4 OR (f.rank = $4 AND (f.description, f.ndb_number) > ($5, $6)))
            ORDER BY f.rank DESC, f.description, f.ndb_number
            LIMIT $2
            """
        static let bindingDataTypes: [PostgresDataType] = [.text, .int8, .float8, .int4, .text, .text]
        typealias Row = (food: FoodRecord, rank: Int, guessed: Bool, standIn: Bool, notByBrand: Bool, namedBeforeWith: Bool)

        var query: String
        var limit: Int
        var after: FoodCursor?
        var minimumCoverage: Double

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 6)
            bindings.append(query)
            bindings.append(limit)
            bindings.append(minimumCoverage)
            bindings.append(after.map { Int32(clamping: $0.rank) })
            bindings.append(after?.description)
            bindings.append(after?.ndbNumber)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let c = row.makeRandomAccess()
            return (
                try FoodStore.decode(c), try c[14].decode(Int.self), try c[15].decode(Bool.self), try c[16].decode(Bool.self), try c[17].decode(Bool.self),
                try c[18].decode(Bool.self)
            )
        }
    }

    func find(_ ndbNumber: String, on connection: PostgresConnection, logger: Logger) async throws -> FoodRecord? {
        try await foods([ndbNumber], on: connection, logger: logger)[ndbNumber]
    }

    /// The foods of these numbers, by number; numbers not in the table are absent.
    func foods(_ ndbNumbers: [String], on connection: PostgresConnection, logger: Logger) async throws -> [String: FoodRecord] {
        guard !ndbNumbers.isEmpty else { return [:] }
        let rows = try await connection.checkedQuery(
            "SELECT \(unescaped: Self.columns) FROM foods f WHERE f.ndb_number = ANY (\(Array(Set(ndbNumbers)))::text[])", logger: logger)
        var found: [String: FoodRecord] = [:]
        for try await row in rows {
            let food = try Self.decode(row.makeRandomAccess())
            found[food.ndbNumber] = food
        }
        return found
    }

    /// A request's items with their amounts: a food named by number and grams becomes the table's
    /// amounts for those grams, its description the name and its tags the tags unless the item gives
    /// them. A number not in the table is a problem of that item. Items that give their amounts cost
    /// no query unless they name a number.
    func fill(_ inputs: [MealItemInput], on connection: PostgresConnection, logger: Logger) async throws -> [MealItem] {
        // The count is checked before any lookup, as the draft checks it: a body of thousands of
        // numbers asks for nothing.
        guard (1...MealDraft.maxItems).contains(inputs.count) else {
            throw APIError.validation([.init(field: "items", message: "must hold 1 to \(MealDraft.maxItems) items")])
        }
        let numbers = inputs.compactMap(\.ndbNumber)
        let foods = try await self.foods(numbers.filter { $0.utf8.count <= 16 }, on: connection, logger: logger)
        var problems: [Problem.FieldError] = []
        var items: [MealItem] = []
        for (index, input) in inputs.enumerated() {
            if let number = input.ndbNumber, foods[number] == nil {
                problems.append(.init(field: "items[\(index)].ndb_number", message: "is not a food of the table (GET /v1/foods)"))
                continue
            }
            // Grams are checked before they scale the table's amounts, so that a bad one is named
            // as itself rather than as the amounts it would make.
            if case .food(_, let grams, _, _) = input, !(grams.isFinite && grams > 0 && grams <= 10_000) {
                problems.append(.init(field: "items[\(index)].grams", message: "must be more than 0 and at most 10000"))
                continue
            }
            switch input {
            case .amounts(let item):
                items.append(item)
            case .food(let number, let grams, let name, let tags):
                let food = foods[number]!
                var item = food.per100g.item(named: name ?? food.description, grams: grams, tags: tags ?? (food.tags.isEmpty ? nil : food.tags))
                item.ndbNumber = number
                items.append(item)
            }
        }
        if !problems.isEmpty { throw APIError.validation(problems) }
        return items
    }

    /// The food an analysed item's name means: of the best matches naming every word of it as
    /// written and plausible beside the model's own estimate (`isPlausible`), the nearest to the
    /// estimate (`distance`), or nil.
    ///
    /// A model spells its names, so a word the table lacks means a food it lacks, not a typo: a
    /// correction is no match ("latte" is not "late"). And a name alone can mean another food of
    /// the same words ("chips" holds banana chips and chocolate chip cookies). The model saw the
    /// plate; its estimate is a guess, but one ten times off is rarer than a name read as another
    /// food. So a match whose energy per 100 g is more than twice or less than half the estimate
    /// (and more than `plausibleEnergyGap` away from it, as low-energy foods vary by more than a
    /// factor) is passed over, as is one whose energy comes from other macronutrients ("hamburger"
    /// names a bun too), a stand-in the name does not ask for ("Meatballs, meatless": the search
    /// ranks those lower, not out), and a food naming a word only in a brand's capitals that the
    /// name does not hold whole ("chicken burger" is not "BURGER KING, CHICKEN TENDERS"; "burger king
    /// whopper" is "BURGER KING, WHOPPER, …"), nor one naming the words only after "with" when the
    /// name does not say "with" ("guacamole" is not "Tostada with guacamole": `words_before_with`).
    ///
    /// Of those left among the first `matchCandidates`, the estimate says which variant the plate
    /// held: the table ranks raw bacon, toasted bread and 2 % milk first, and a name of one word
    /// ("steak", "pasta") ranks sandwich steaks and corn pasta as high as the usual kind. The rank
    /// still counts, so that a food the name fits worse ("milk" at 64 kcal is not goat's milk) needs
    /// to be much nearer to win. When the nearest is farther than `farthestMatch` ("tacos" as a taco
    /// salad), the estimate stands.
    func match(_ name: String, near estimate: Per100g, on connection: PostgresConnection, logger: Logger) async throws -> MatchedFood? {
        let found = try await search(name, limit: Self.matchCandidates, after: nil, minimumCoverage: Self.matchCoverage, on: connection, logger: logger)
        guard let bestRank = found.first?.rank else { return nil }
        let saysWith = name.lowercased().split(whereSeparator: { !$0.isLetter }).contains("with")
        let plausible = found.filter {
            !$0.guessed && !$0.standIn && $0.notByBrand && ($0.namedBeforeWith || saysWith) && Self.isPlausible($0.food.per100g, beside: estimate)
        }
        let weighed = plausible.map { (row: $0, distance: Self.distance($0.food.per100g, rankedBelowBestBy: bestRank - $0.rank, from: estimate)) }
        guard let nearest = weighed.map(\.distance).min(), nearest <= Self.farthestMatch,
            let best = weighed.first(where: { $0.distance <= nearest + Self.alikeDistance })?.row
        else { return nil }
        return MatchedFood(ndbNumber: best.food.ndbNumber, description: best.food.description, per100g: best.food.per100g, tags: best.food.tags)
    }
}
