-- When the coach last pushed the workout's new blocks onto the session (`POST /v1/workouts/{id}/push`);
-- NULL while the session holds the blocks it was assigned with, and once a log was written against
-- the pushed blocks. A session pushed and not logged since (skipped or not)
-- is logged only with `If-Match`: an app that showed the old blocks would otherwise file its log
-- under exercises the client never saw. A column without a default: added without rewriting the table.
ALTER TABLE sessions ADD COLUMN pushed_at timestamptz;
