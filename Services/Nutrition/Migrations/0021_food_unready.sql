-- A food in a form nobody eats as it is says so in a part of its name after the kind ("Coffee,
-- instant, regular, powder", "Soup, tomato, canned, condensed", "Lemonade, frozen concentrate"):
-- a search for "coffee" means the cup, and an analysed "coffee" of 240 g must not be counted as
-- 240 g of powder, so such a food ranks a little lower unless the query names the form. One made
-- ready ("powder, prepared with water", "dry mix, prepared", "from concentrate") is not one, nor is
-- a way of cooking ("dry heat", "dry roasted").
ALTER TABLE foods ADD COLUMN unready boolean GENERATED ALWAYS AS (
    description ~* ',[^,]*\m(powder|powdered|dehydrated|(?<!from )concentrated?|condensed|unprepared|dry(?! heat| roasted))\M'
    AND description !~* '\m(prepared|reconstituted)\M') STORED;
