-- Which sign-in provider vouched for the account's address (`vouched_by` of `user.email_verified`),
-- NULL when a mailed link proved it: an acceptance's private-relay exception holds only for a relay
-- address Apple vouched for, not for one typed at sign-up.
ALTER TABLE accounts ADD COLUMN email_vouched_by text;
