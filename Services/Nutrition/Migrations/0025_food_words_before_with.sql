-- What a food is named before "with" is what it is: "Tostada with guacamole" is a tostada, "Cake,
-- cherry fudge with chocolate frosting" a cake, "Chicken, …, cooked with water, with salt"
-- chicken. An analysed "guacamole" that took the tostada's values would count the shell and the
-- beans as guacamole, so an item is not matched to a food naming its words only after "with"
-- unless the item's own name says "with" too (`FoodStore.match`). "Without" is another word.
ALTER TABLE foods ADD COLUMN words_before_with text[] GENERATED ALWAYS AS (
    tsvector_to_array(to_tsvector('english', regexp_replace(description, '\mwith\M.*$', '', 'i')))) STORED;
