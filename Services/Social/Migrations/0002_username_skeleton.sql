-- Usernames that look alike are one name: besides case, I, l, 1 and i are one letter, and O, o and
-- 0 another (Unicode's confusables for the characters a username may hold, UTS #39, folded as
-- case is), so "aIice" cannot stand beside "alice". The spelling the user chose is what is stored
-- and shown; ProfileEdit.usernameSkeleton is the same function in Swift.
CREATE FUNCTION username_skeleton(name text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT translate(lower(name), '1i0', 'llo') $$;

-- Names that already collide: the earliest keeps it, the later ones are cleared (the app asks for a
-- username again, as for a new account).
UPDATE profiles p SET username = NULL, updated_at = now()
WHERE username IS NOT NULL AND EXISTS (
    SELECT 1 FROM profiles q
    WHERE q.username IS NOT NULL AND username_skeleton(q.username) = username_skeleton(p.username)
      AND (q.created_at, q.user_id) < (p.created_at, p.user_id));

CREATE UNIQUE INDEX profiles_username_skeleton ON profiles (username_skeleton(username));
