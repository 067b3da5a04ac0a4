-- What people call some foods that USDA names otherwise: "oatmeal" is USDA's "Cereals, oats, …,
-- cooked with water" (its "Bread, oatmeal" and "Cookies, oatmeal" are other foods), "soda" a
-- carbonated beverage, "fries" "Potatoes, french fried", "bacon" "Pork, cured, bacon" (not only
-- "Turkey bacon"). A search finds a food by these names as by its own words, and a query made of
-- their words names the food's kind. Only names nobody would mean another food by are listed. A
-- food's typicality stays as its description gives it (0022): a name is no rarer form of the food.
CREATE FUNCTION food_common_names(description text) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT nullif(concat_ws(' ',
        CASE WHEN description ~ '^Cereals, oats, .*(cooked|prepared)' THEN 'oatmeal porridge' END,
        CASE WHEN description ~ '^Carbonated beverage, ' AND description !~ '^Carbonated beverage, (club soda|tonic water)' THEN 'soda' END,
        CASE WHEN description ~ '^Carbonated beverage, (reduced sugar, |low calorie, )?cola' THEN 'coke' END,
        CASE WHEN description ~ '^Carbonated beverage, low calorie' THEN 'diet' END,
        CASE WHEN description ~ '^Potatoes, french fried' THEN 'french fries' END,
        CASE WHEN description ~ '^Doughnuts' THEN 'donut' END,
        CASE WHEN description ~ '^Frankfurter' THEN 'hot dog hotdog' END,
        CASE WHEN description ~ '^Pork, cured, bacon' THEN 'bacon' END,
        CASE WHEN description ~ '^Pork, cured, ham' THEN 'ham' END,
        CASE WHEN description ~* '^Macaroni and cheese' THEN 'mac' END), '')
$$;

ALTER TABLE foods DROP COLUMN words;
ALTER TABLE foods
    ADD COLUMN words text[] GENERATED ALWAYS AS (
        tsvector_to_array(to_tsvector('english', description || ' ' || coalesce(food_common_names(description), '')))) STORED,
    -- NULL for a food without one.
    ADD COLUMN name_words text[] GENERATED ALWAYS AS (tsvector_to_array(to_tsvector('english', food_common_names(description)))) STORED;
CREATE INDEX foods_words ON foods USING gin (words);

-- The names' words are food words: "donut" is not corrected into another word.
INSERT INTO food_words (word, trigrams, foods)
SELECT word, word_trigrams(word), count(*)
FROM foods, regexp_split_to_table(food_common_names(description), ' ') AS word
GROUP BY word
ON CONFLICT (word) DO NOTHING;
