-- A food in a form nobody eats as it is says so in a part of its name after the kind ("Coffee,
-- instant, regular, powder", "Soup, tomato, canned, condensed", "Lemonade, frozen concentrate",
-- "Pasta, dry, enriched", a dry mix): a search for "coffee" means the cup, and an analysed "coffee"
-- of 240 g must not be counted as 240 g of powder, so such a food ranks a little lower unless the
-- query names the form. "Dry" counts only as a part of its own or in "dry mix": "dry roasted",
-- "dry grated" or "dry or hard" describe a food eaten as it is. One made ready ("powder, prepared
-- with water", "dry mix, prepared", "diluted with 3 volume water", "from concentrate") is not one;
-- "not reconstituted" and "not prepared" are.
ALTER TABLE foods ADD COLUMN unready boolean GENERATED ALWAYS AS (
    (description ~* ',[^,]*\m(powder|powdered|dehydrated|(?<!from )concentrated?|condensed|unprepared)\M'
        OR description ~* ',\s*dry\s*(,|$)|\mdry mix\M')
    AND description !~* '(?<!not )\m(prepared|reconstituted|diluted)\M') STORED;
