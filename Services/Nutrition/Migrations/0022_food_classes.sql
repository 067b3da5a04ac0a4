-- USDA names some foods by their class first: "Fish, salmon, Atlantic, …", "Nuts, almonds",
-- "Crustaceans, shrimp, …", "Spices, cinnamon, ground", "Alcoholic beverage, beer, …", or two
-- parts of it: "Alcoholic beverage, distilled, vodka, …", "Carbonated beverage, low calorie, cola
-- …". For those the part after the class is
-- what a person calls the food, so it is the food's kind: "salmon" names "Fish, salmon, …" as
-- "chicken" names "Chicken, …", while "Fish oil, salmon" (an oil) stays of its own kind. How many
-- parts of a name are its class (0 for most foods). The function stands alone, calling no other
-- of the schema's: a generated column's function must work under any search path (pg_restore's).
CREATE FUNCTION food_class_parts(description text) RETURNS integer LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN description ~* '^(alcoholic beverage, distilled|carbonated beverage, (low calorie|reduced sugar)), [^,]' THEN 2
        WHEN description ~* '^(fish|crustaceans|mollusks|nuts|seeds|spices|game meat|cereals|alcoholic beverage|carbonated beverage|beverages|snacks), [^,]' THEN 1
        ELSE 0 END
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
    ADD COLUMN kind_words text[] GENERATED ALWAYS AS (
        tsvector_to_array(to_tsvector('english', split_part(description, ',', food_class_parts(description) + 1)))) STORED,
    ADD COLUMN kind_and_detail_words text[] GENERATED ALWAYS AS (
        tsvector_to_array(to_tsvector('english',
            split_part(description, ',', food_class_parts(description) + 1) || ' ' || split_part(description, ',', food_class_parts(description) + 2)))) STORED,
    -- The class's words; NULL for a food named without one. A query naming the class and the
    -- kind's words ("pumpkin seeds" for "Seeds, pumpkin and squash seed kernels") names the kind.
    ADD COLUMN class_words text[] GENERATED ALWAYS AS (
        CASE food_class_parts(description)
            WHEN 1 THEN tsvector_to_array(to_tsvector('english', split_part(description, ',', 1)))
            WHEN 2 THEN tsvector_to_array(to_tsvector('english', split_part(description, ',', 1) || ' ' || split_part(description, ',', 2)))
        END) STORED;
CREATE INDEX foods_kind_words ON foods USING gin (kind_words);

-- Typicality is read within each kind (0020_food_typicality), so it is read again for the kinds
-- as they now are; as a procedure, which a later migration changing the foods or their kinds calls.
-- A food's words are read from its description: a name people call it by (0023) is no rarer form.
CREATE PROCEDURE refresh_food_typicality() LANGUAGE sql AS $$
WITH kinds AS (
    SELECT kind_words AS kind, count(*)::float8 AS foods FROM foods GROUP BY kind_words
), details AS (
    SELECT f.ndb_number, f.kind_words AS kind, word
    FROM foods f, unnest(tsvector_to_array(to_tsvector('english', f.description))) AS word WHERE NOT word = ANY (f.kind_words)
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
$$;
CALL refresh_food_typicality();

-- Two words that foods' names write as one ("soy milk": "Soymilk", "pop corn", "flax seed") are
-- read as that word: every way of cutting a food word in two words of their own (not stop words),
-- where more than twice as many generic foods use the word as hold both parts apart, in any form:
-- "milk shake" stays two words, as "Milk shakes" are more foods than "milkshake"; so do "low fat",
-- "meat loaf", "corn dog" (the "corndog" is fast food) and "poppy seed" (two poppyseed oils beside
-- one spice).
CREATE TABLE food_word_pairs (
    first  text NOT NULL,
    second text NOT NULL,
    PRIMARY KEY (first, second)
);
WITH lexemes AS (
    SELECT lexeme, count(*) AS foods FROM foods, unnest(words) AS lexeme WHERE generic GROUP BY lexeme
), lexeme_pairs AS (
    SELECT a, b, count(*) AS foods FROM foods f, unnest(f.words) AS a, unnest(f.words) AS b WHERE f.generic AND a < b GROUP BY a, b
), cuts AS (
    SELECT DISTINCT left(w.word, i) AS first, substr(w.word, i + 1) AS second,
        tsvector_to_array(to_tsvector('english', w.word)) AS joined,
        tsvector_to_array(to_tsvector('english', left(w.word, i) || ' ' || substr(w.word, i + 1))) AS apart
    FROM food_words w, generate_series(2, length(w.word) - 2) AS i
)
INSERT INTO food_word_pairs (first, second)
SELECT c.first, c.second
FROM cuts c
    LEFT JOIN lexemes j ON cardinality(c.joined) = 1 AND j.lexeme = c.joined[1]
    LEFT JOIN lexeme_pairs ab ON cardinality(c.apart) = 2 AND ab.a = c.apart[1] AND ab.b = c.apart[2]
WHERE cardinality(c.apart) = 2 AND coalesce(j.foods, 0) > 2 * coalesce(ab.foods, 0)
ON CONFLICT DO NOTHING;
