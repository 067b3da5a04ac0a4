-- When a session was cancelled (its plan ended: the client left, the coach's account went): a
-- workout performed before then may still be logged, as an app that logged it offline sends it
-- later. Sessions cancelled before this keep no such time (their last change need not be their
-- cancellation), and take no log, as before.
ALTER TABLE sessions ADD COLUMN cancelled_at timestamptz;
