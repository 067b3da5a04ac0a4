-- Each send names the address it went to (its normalized form's SHA-256, not the address), so the
-- daily mail limit counts one coach's mails to one address: removing a client and adding it again
-- made a new roster entry whose count started from nothing. Sends from before have no address and
-- leave the window within a day.
ALTER TABLE invitation_sends ADD COLUMN address_hash bytea;
CREATE INDEX invitation_sends_address ON invitation_sends (coach_id, address_hash, sent_at);
