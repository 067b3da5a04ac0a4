-- A link's share card, drawn on its first request and kept with the link: the snapshot it shows does
-- not change while the link lives, so a link preview or a page view reads the card instead of
-- drawing it again. `card_etag` is the hex SHA-256 of the PNG. Both are cleared when the link is
-- revoked or its meal or account deleted; an expired link's card is never served.
ALTER TABLE shares ADD COLUMN card_png bytea, ADD COLUMN card_etag text;
-- A PNG is compressed already: stored out of line as it is, without a compression attempt.
ALTER TABLE shares ALTER COLUMN card_png SET STORAGE EXTERNAL;
