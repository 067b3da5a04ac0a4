-- Fast foods and restaurant dishes are named by their class first too: "Fast foods, hamburger;
-- single, regular patty; with condiments", "Restaurant, Chinese, fried rice", "Restaurant, family
-- style, French fries". Read as foods of the kinds "fast foods" and "restaurant", a hamburger was
-- no food's kind, so "hamburger" named "Rolls, hamburger or hotdog" (a bun) better than the
-- burger, and "fried rice" a frozen rice bowl. The part after the class is their kind now, and a
-- semicolon ends a part as a comma does ("hamburger; single, regular patty": the kind "hamburger",
-- its first detail "single"). They still rank after the generic foods of the same kind
-- (`generic`, 0022).
ALTER TABLE foods
    DROP COLUMN kind_words,
    DROP COLUMN kind_and_detail_words,
    DROP COLUMN class_words;

-- A fast food whose name lists what is in it with commas ("Fast foods, ham, egg, and cheese
-- sandwich", "…, grilled chicken, bacon and tomato club sandwich") is read as before: the part after
-- the class is no kind of it.
CREATE OR REPLACE FUNCTION food_class_parts(description text) RETURNS integer LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN description ~* '^fast foods, [^,]+,[^,]*,? and [^,]*sandwich' THEN 0
        WHEN description ~* '^(alcoholic beverage, distilled|carbonated beverage, (low calorie|reduced sugar)|restaurant, [^,]+), [^,]' THEN 2
        WHEN description ~* '^(fish|crustaceans|mollusks|nuts|seeds|spices|game meat|cereals|alcoholic beverage|carbonated beverage|beverages|snacks|fast foods), [^,]' THEN 1
        ELSE 0 END
$$;

ALTER TABLE foods
    ADD COLUMN kind_words text[] GENERATED ALWAYS AS (
        tsvector_to_array(to_tsvector('english', split_part(translate(description, ';', ','), ',', food_class_parts(description) + 1)))) STORED,
    ADD COLUMN kind_and_detail_words text[] GENERATED ALWAYS AS (
        tsvector_to_array(to_tsvector('english',
            split_part(translate(description, ';', ','), ',', food_class_parts(description) + 1) || ' '
            || split_part(translate(description, ';', ','), ',', food_class_parts(description) + 2)))) STORED,
    -- The class's words; NULL for a food named without one.
    ADD COLUMN class_words text[] GENERATED ALWAYS AS (
        CASE food_class_parts(description)
            WHEN 1 THEN tsvector_to_array(to_tsvector('english', split_part(description, ',', 1)))
            WHEN 2 THEN tsvector_to_array(to_tsvector('english', split_part(description, ',', 1) || ' ' || split_part(description, ',', 2)))
        END) STORED;
CREATE INDEX foods_kind_words ON foods USING gin (kind_words);

-- Typicality is read within a kind among foods eaten out (USDA's fast foods and restaurant groups)
-- and among the others apart: the hamburgers' and croissants' of a fast-food counter, with egg and
-- sausage, say nothing of which croissant is usual at home.
CREATE OR REPLACE PROCEDURE refresh_food_typicality() LANGUAGE sql AS $$
WITH grouped AS (
    SELECT ndb_number, description, kind_words, left(ndb_number, 2) IN ('21', '36') AS eaten_out FROM foods
), kinds AS (
    SELECT kind_words AS kind, eaten_out, count(*)::float8 AS foods FROM grouped GROUP BY kind_words, eaten_out
), details AS (
    SELECT f.ndb_number, f.kind_words AS kind, f.eaten_out, word
    FROM grouped f, unnest(tsvector_to_array(to_tsvector('english', f.description))) AS word WHERE NOT word = ANY (f.kind_words)
), shares AS (
    SELECT kind, eaten_out, word, count(*)::float8 AS foods FROM details GROUP BY kind, eaten_out, word
), typicality AS (
    SELECT f.ndb_number, coalesce(exp(avg(ln(s.foods / (k.foods + 10)))), k.foods / (k.foods + 10)) AS typicality
    FROM grouped f JOIN kinds k ON k.kind = f.kind_words AND k.eaten_out = f.eaten_out
        LEFT JOIN details d ON d.ndb_number = f.ndb_number
        LEFT JOIN shares s ON s.kind = d.kind AND s.eaten_out = d.eaten_out AND s.word = d.word
    GROUP BY f.ndb_number, k.foods
)
UPDATE foods f SET typicality = t.typicality FROM typicality t WHERE t.ndb_number = f.ndb_number;
$$;
CALL refresh_food_typicality();
