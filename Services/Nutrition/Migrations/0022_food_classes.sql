-- USDA names some foods by their class first: "Fish, salmon, Atlantic, …", "Nuts, almonds",
-- "Crustaceans, shrimp, …", "Spices, pepper, black", "Cereals, oats, …", "Alcoholic beverage,
-- beer, …". For those the part after the class is what a person calls the food, so it is the
-- food's kind: "salmon" names "Fish, salmon, …" as "chicken" names "Chicken, …", while "Fish oil,
-- salmon" (an oil) stays of its own kind. A query naming the class ("pumpkin seeds", "cereal")
-- still names the food's kind as before (`class_words`).
CREATE FUNCTION food_class(description text) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN position(',' IN description) > 0 AND split_part(description, ',', 1) IN (
        'Fish', 'Crustaceans', 'Mollusks', 'Nuts', 'Seeds', 'Spices', 'Game meat', 'Cereals', 'Alcoholic beverage', 'Beverages', 'Snacks', 'Candies')
        THEN split_part(description, ',', 1) END
$$;
-- The parts of a name with its class left out.
CREATE FUNCTION food_name_parts(description text) RETURNS text[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN food_class(description) IS NULL THEN parts ELSE parts[2:] END
    FROM (SELECT string_to_array(description, ',') AS parts) AS p
$$;

-- USDA's American Indian/Alaska Native foods (35) are recorded as particular communities prepare
-- them ("Fish, salmon, chum, dried (Alaska Native)"): like restaurant dishes, they rank after the
-- generic foods a search for "salmon" means.
ALTER TABLE foods
    DROP COLUMN generic,
    DROP COLUMN kind_words,
    DROP COLUMN kind_and_detail_words;
ALTER TABLE foods
    ADD COLUMN generic boolean GENERATED ALWAYS AS (
        left(ndb_number, 2) NOT IN ('03', '21', '35', '36') AND description !~* '^(babyfood|infant formula)' AND description !~ '[A-Z]{3,}') STORED,
    ADD COLUMN kind_words text[] GENERATED ALWAYS AS (tsvector_to_array(to_tsvector('english', (food_name_parts(description))[1]))) STORED,
    ADD COLUMN kind_and_detail_words text[] GENERATED ALWAYS AS (
        tsvector_to_array(to_tsvector('english', (food_name_parts(description))[1] || ' ' || coalesce((food_name_parts(description))[2], '')))) STORED,
    -- NULL for a food named without a class.
    ADD COLUMN class_words text[] GENERATED ALWAYS AS (tsvector_to_array(to_tsvector('english', food_class(description)))) STORED;
CREATE INDEX foods_kind_words ON foods USING gin (kind_words);

-- Typicality is read within each kind (0020_food_typicality), so it is read again for the kinds
-- as they now are.
WITH kinds AS (
    SELECT kind_words AS kind, count(*)::float8 AS foods FROM foods GROUP BY kind_words
), details AS (
    SELECT f.ndb_number, f.kind_words AS kind, word
    FROM foods f, unnest(f.words) AS word WHERE NOT word = ANY (f.kind_words)
), shares AS (
    SELECT kind, word, count(*)::float8 AS foods FROM details GROUP BY kind, word
), typicality AS (
    SELECT f.ndb_number, coalesce(exp(avg(ln(s.foods / (k.foods + 10)))), k.foods / (k.foods + 10)) AS typicality
    FROM foods f JOIN kinds k ON k.kind = f.kind_words
        LEFT JOIN details d ON d.ndb_number = f.ndb_number
        LEFT JOIN shares s ON s.kind = d.kind AND s.word = d.word
    GROUP BY f.ndb_number, k.foods
)
UPDATE foods f SET typicality = t.typicality FROM typicality t WHERE t.ndb_number = f.ndb_number;

-- Two words that foods' names write as one ("soy milk": "Soymilk", "pop corn", "flax seed") are
-- read as that word, unless some name also writes them apart ("low fat" beside "lowfat"): every
-- way of cutting a food word in two, each part at least two letters, less the pairs of words
-- adjacent in a name.
CREATE TABLE food_word_pairs (
    first  text NOT NULL,
    second text NOT NULL,
    PRIMARY KEY (first, second)
);
WITH apart AS (
    SELECT DISTINCT word AS first, next AS second FROM (
        SELECT word, lead(word) OVER (PARTITION BY f.ndb_number ORDER BY n) AS next
        FROM foods f, regexp_split_to_table(lower(f.description), '[^[:alnum:]]+') WITH ORDINALITY AS w(word, n)
        WHERE word <> ''
    ) AS words
    WHERE next IS NOT NULL
)
INSERT INTO food_word_pairs (first, second)
SELECT left(w.word, i), substr(w.word, i + 1)
FROM food_words w, generate_series(2, length(w.word) - 2) AS i
WHERE NOT EXISTS (SELECT FROM apart a WHERE a.first = left(w.word, i) AND a.second = substr(w.word, i + 1))
ON CONFLICT DO NOTHING;
