-- A share link's snapshot named the link's photo by its path, which holds the link's token: the
-- one place a token was kept other than as its hash. The path is now made from the token asked
-- with, when the link kept a photo; the kept paths go.
UPDATE shares SET snapshot = snapshot - 'photo_url' WHERE snapshot->>'photo_url' LIKE '/v1/shared/%';
