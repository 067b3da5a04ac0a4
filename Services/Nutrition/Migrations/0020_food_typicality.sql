-- How usual a food is among the foods of its kind: a search naming the kind ("chicken", "rice")
-- means its usual form ("Chicken, broilers or fryers, meat only, …"), not a rare one that happens
-- to have a short name ("Chicken, feet, boiled"). USDA's table has no measure of how often a food
-- is eaten, so this is read from the table itself. A kind is its words as the search reads them
-- ("Egg" and "Eggs" are one). For each word of a food's name outside its kind, the share of the
-- kind's foods whose names also use it; the food's typicality is the geometric mean of those
-- shares (one rare word makes the food rare). A food named by its kind alone ("Oats") has the share
-- of its kind's own words, which every food of the kind uses. Shares are taken over the kind's
-- size plus ten, so that a kind of one or two foods, which says little about which is usual, does
-- not outrank a large one whose usual form is plain. The table changes only with a migration, and
-- a migration that changes its rows must compute this again (a new row's typicality is 0).
ALTER TABLE foods ADD COLUMN typicality real NOT NULL DEFAULT 0;
-- The foods whose kind holds a word of a query as typed, when its full matches rest on a guess.
CREATE INDEX foods_kind_words ON foods USING gin (kind_words);

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
