-- A session's blocks as the API shows them, kept beside the stored blocks: in kilograms and in
-- pounds, each as `SessionView.BlockView` writes them (every key present, in the API's key order,
-- the exercise's id in lowercase, `weight` in the reader's unit rounded to millionths). Today and My
-- Workouts are the app's commonest reads: with these, PostgreSQL writes a whole list as one row
-- without taking the blocks apart on every read, and the service sends it on as it comes.
--
-- `row_to_json` and `array_to_json` write JSON without spaces, unlike `json_build_object` and
-- `jsonb`.
CREATE FUNCTION session_blocks_json(blocks jsonb, unit text) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_to_json(array_agg(row_to_json(block) ORDER BY b.n)), '[]')
    FROM jsonb_array_elements(blocks) WITH ORDINALITY AS b(stored, n),
    LATERAL (
        SELECT (b.stored->>'exercise_id')::uuid AS exercise_id, b.stored->'exercise_name' AS exercise_name, b.stored->'notes' AS notes,
               (SELECT coalesce(array_to_json(array_agg(row_to_json(prescribed) ORDER BY t.m)), '[]')
                FROM jsonb_array_elements(b.stored->'sets') WITH ORDINALITY AS t(stored, m),
                LATERAL (
                    SELECT t.stored->'distance_m' AS distance_m, t.stored->'duration_s' AS duration_s, t.stored->'reps' AS reps,
                           t.stored->'rest_s' AS rest_s, t.stored->'rpe' AS rpe,
                           CASE WHEN unit = 'lbs' THEN to_jsonb(trim_scale(round((t.stored->>'weight_kg')::numeric / 0.45359237, 6)))
                                ELSE t.stored->'weight_kg' END AS weight,
                           t.stored->'weight_kg' AS weight_kg
                ) prescribed) AS sets,
               b.stored->'superset' AS superset
    ) block
$$;

-- Written by a trigger when a session is written with its blocks (assigned, pushed), not when it
-- is logged or skipped. Columns without a default and a trigger, rather than generated columns: a
-- stored generated column rewrites the whole table as it is added, under a lock that would hold
-- every read of the previous release while it runs. The sessions written before this migration
-- have none until their blocks are written again; their lists write the blocks on each read.
ALTER TABLE sessions ADD COLUMN blocks_view_kg json, ADD COLUMN blocks_view_lbs json;

-- With this schema's search path, whoever writes the row: a session of `psql` as another role
-- finds `session_blocks_json` too.
CREATE FUNCTION sessions_keep_blocks_views() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    NEW.blocks_view_kg := session_blocks_json(NEW.blocks, 'kg');
    NEW.blocks_view_lbs := session_blocks_json(NEW.blocks, 'lbs');
    RETURN NEW;
END
$$;

CREATE TRIGGER sessions_keep_blocks_views BEFORE INSERT OR UPDATE OF blocks ON sessions
FOR EACH ROW EXECUTE FUNCTION sessions_keep_blocks_views();
