-- A food that stands in for another says so in its kind or in a part of its name of its own
-- ("Chicken, meatless", "Sour cream, imitation", "Egg substitute, powder"): a search for "chicken"
-- means the chicken, so such a food does not rank as the kind it imitates unless the query asks for
-- the stand-in. A food merely made with one ("grits with imitation bacon bits") is not one.
ALTER TABLE foods ADD COLUMN stand_in boolean GENERATED ALWAYS AS (
    description ~* '^[^,]*\m(meatless|imitation|substitutes?)\M|,\s*(meatless|imitation|substitutes?)\s*(,|$)') STORED;
