-- A meal's photo as stored: decoded, upright, sRGB, without metadata, at most 2048 pixels on its
-- long side, written again as JPEG by libvips. One per meal; it goes with its meal (and so with the
-- account). `etag` is the hex SHA-256 of the bytes.
CREATE TABLE meal_photos (
    meal_id uuid PRIMARY KEY REFERENCES meals (id) ON DELETE CASCADE,
    user_id uuid NOT NULL,
    content_type text NOT NULL,
    data bytea NOT NULL,
    etag text NOT NULL,
    width integer NOT NULL,
    height integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX meal_photos_user ON meal_photos (user_id);
-- A JPEG is compressed already: stored out of line as it is, without a compression attempt.
ALTER TABLE meal_photos ALTER COLUMN data SET STORAGE EXTERNAL;

-- A share link keeps a copy of the photo as it was when the link was made, served while the link
-- lives; cleared with the snapshot when the link is revoked or its meal or account deleted.
ALTER TABLE shares ADD COLUMN photo bytea, ADD COLUMN photo_type text, ADD COLUMN photo_etag text;
ALTER TABLE shares ALTER COLUMN photo SET STORAGE EXTERNAL;
