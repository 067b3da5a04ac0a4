-- When a session was cancelled (its plan ended: the client left, the coach's account went): a
-- workout performed before then may still be logged, as an app that logged it offline sends it
-- later. Sessions cancelled before this take the time of their last change, their cancellation:
-- nothing changes a cancelled session after it.
ALTER TABLE sessions ADD COLUMN cancelled_at timestamptz;
UPDATE sessions SET cancelled_at = updated_at WHERE status = 'cancelled';
