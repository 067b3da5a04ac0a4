-- A food that stands in for another names what it imitates as its kind ("Chicken, meatless",
-- "Sour cream, imitation", "Egg substitute, powder"): a search for "chicken" means the chicken, so
-- such a food ranks after it unless the query asks for the stand-in.
ALTER TABLE foods ADD COLUMN stand_in boolean GENERATED ALWAYS AS (description ~* '\m(meatless|imitation|substitutes?)\M') STORED;
