-- The food composition table: USDA's foods with the nine amounts a meal stores per 100 g and their
-- household portions. Its rows come from Resources/usda-sr24-foods.json (source and licence in
-- Resources/README.md), loaded by the migration `0018_foods_usda_sr24` (`FoodTable`).

-- Food names are matched with plurals, word forms and typos without an extension (a service's role
-- may not create one). Each food's English text-search lexemes are kept as an array: a query's
-- lexemes are looked up in them. A word of a query no food uses is first replaced by the food word
-- nearest to it by trigrams (`food_words`), as pg_trgm's documentation suggests for spelling: the
-- trigrams are those of the word padded as pg_trgm pads it.
CREATE FUNCTION word_trigrams(word text) RETURNS text[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT substr(padded, i, 3)), '{}')
    FROM (SELECT '  ' || lower(word) || ' ' AS padded) AS p, generate_series(1, length(padded) - 2) AS i
$$;

-- The diet score's tags of a food, read from USDA's own classification: the food group its NDB
-- number starts with (01 dairy and egg, 05 poultry, 07 sausages and luncheon meats, 09 fruits,
-- 10 pork, 11 vegetables, 12 nuts and seeds, 13 beef, 15 finfish and shellfish, 16 legumes,
-- 17 lamb, veal and game, 19 sweets, 20 cereal grains and pasta) and the food's name as USDA writes it, its kind first ("Beef, …", "Oil, olive,
-- …", "Alcoholic beverage, …"). Foods numbered outside those groups get only what their name says.
-- docs/API.md lists the rules.
CREATE FUNCTION food_tags(ndb_number text, description text, alcohol_g double precision) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT tag ORDER BY tag), '{}') FROM (
        SELECT 'red_meat' AS tag WHERE left(ndb_number, 2) IN ('10', '13', '17') OR description ~* '^(beef|pork|lamb|veal),'
        UNION ALL SELECT 'processed_meat' WHERE (left(ndb_number, 2) = '07' AND description !~* 'meatless') OR description ~* '^pork, cured,'
        UNION ALL SELECT 'poultry' WHERE left(ndb_number, 2) = '05'
        UNION ALL SELECT CASE WHEN description ~* '^(crustaceans|mollusks),' THEN 'seafood' ELSE 'fish' END WHERE left(ndb_number, 2) = '15'
        UNION ALL SELECT CASE WHEN description ~* '^eggs?[, ]' THEN 'egg' WHEN description ~* '^cheese' THEN 'cheese' ELSE 'dairy' END
            WHERE left(ndb_number, 2) = '01' AND description !~* 'non-?dairy|imitation'
        UNION ALL SELECT 'fruit' WHERE left(ndb_number, 2) = '09'
        UNION ALL SELECT 'vegetable' WHERE left(ndb_number, 2) = '11'
        UNION ALL SELECT 'legume' WHERE left(ndb_number, 2) = '16'
        UNION ALL SELECT CASE WHEN split_part(description, ',', 1) ~* 'seed' THEN 'seeds' ELSE 'nuts' END WHERE left(ndb_number, 2) = '12'
        UNION ALL SELECT 'grain' WHERE left(ndb_number, 2) = '20'
        UNION ALL SELECT 'whole_grain' WHERE left(ndb_number, 2) = '20' AND description ~* 'whole[- ](grain|wheat)|^rice, brown|^oat|^buckwheat|^bulgur|^quinoa|^millet'
        UNION ALL SELECT 'honey' WHERE description ~* '^honey\M'
        UNION ALL SELECT 'processed_sugar' WHERE left(ndb_number, 2) = '19' AND description !~* '^honey\M'
        UNION ALL SELECT 'alcohol' WHERE description ~* '^alcoholic beverage' OR alcohol_g > 0
        UNION ALL SELECT 'olive_oil' WHERE description ~* '^oil, olive'
        UNION ALL SELECT 'seed_oil' WHERE description ~* '^oil, (canola|corn|soybean|sunflower|safflower|cottonseed|grapeseed|sesame)'
        UNION ALL SELECT 'fried' WHERE description ~* 'fried\M'
    ) AS tags
$$;

CREATE TABLE foods (
    -- USDA's Nutrient Databank number, as FoodData Central's `ndb_number` keeps it.
    ndb_number      text PRIMARY KEY,
    description     text NOT NULL,
    -- Per 100 g; NULL where USDA gives no value.
    energy_kcal     double precision NOT NULL,
    protein_g       double precision NOT NULL,
    carbs_g         double precision NOT NULL,
    fat_g           double precision NOT NULL,
    fiber_g         double precision,
    sugars_g        double precision,
    saturated_fat_g double precision,
    sodium_mg       double precision,
    alcohol_g       double precision,
    -- [{amount, unit, grams}], as USDA lists the household measures.
    portions        jsonb NOT NULL DEFAULT '[]',
    tags            text[] GENERATED ALWAYS AS (food_tags(ndb_number, description, alcohol_g)) STORED,
    -- Baby foods (03, or so named), fast food (21), restaurant dishes (36) and brands (a name in
    -- capitals) rank after the generic foods a person means by "rice" or "banana".
    generic         boolean GENERATED ALWAYS AS (
        left(ndb_number, 2) NOT IN ('03', '21', '36') AND description !~* '^(babyfood|infant formula)' AND description !~ '[A-Z]{3,}') STORED,
    -- The name's lexemes; then those of its kind (the part before the first comma: "Bananas") and of
    -- its kind and first detail ("Rice, brown"): a query naming exactly one of those ranks first.
    words           text[] GENERATED ALWAYS AS (tsvector_to_array(to_tsvector('english', description))) STORED,
    kind_words      text[] GENERATED ALWAYS AS (tsvector_to_array(to_tsvector('english', split_part(description, ',', 1)))) STORED,
    kind_and_detail_words text[] GENERATED ALWAYS AS (
        tsvector_to_array(to_tsvector('english', split_part(description, ',', 1) || ' ' || split_part(description, ',', 2)))) STORED
);
CREATE INDEX foods_words ON foods USING gin (words);

-- Every word the foods' names use, with its trigrams: what a misspelt word is corrected to.
CREATE TABLE food_words (
    word     text PRIMARY KEY,
    trigrams text[] NOT NULL,
    -- How many foods use it: of two words as near, the commoner wins.
    foods    integer NOT NULL
);
CREATE INDEX food_words_trigrams ON food_words USING gin (trigrams);
