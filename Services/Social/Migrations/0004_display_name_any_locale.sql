-- Display names are found by a prefix in any case whatever the database's locale: under the C
-- locale lower() leaves every letter outside ASCII as it is ('Émile' stays 'Émile'), so a query the
-- service lowercased ('émile') found no such name. lower() under ICU's root locale lowers every
-- letter, as the service does.
DROP INDEX profiles_display_name_prefix;
CREATE INDEX profiles_display_name_prefix ON profiles (lower(display_name COLLATE "und-x-icu") text_pattern_ops);
