"""What the fault scripts check after each fault, from the services' own tables.

- Writes: every write the load record says was answered 2xx is in the database (a value a later
  write replaces is checked against the last one, or against what a later unanswered write may
  have left).
- Events: every event a service published (its outbox row, copied at insert by a trigger this
  module installs into a schema of its own, `faults`) left the outbox and was handled once by
  every service that consumes its type: one row in the consumer's `inbox` (its primary key is the
  event id, written in the handler's transaction). Which services consume which types is read from
  the sources (`handlers.on(X.self)` in Services/*/Events/), as the services register them.
- Mail: every message queued (`mail_outbox` of auth and invitations) was sent, none failed, and
  the SMTP sink holds exactly one copy of each (its Message-ID is `<row id>@foodbackend`).
"""
import glob
import json
import os
import re
import subprocess
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIL_SCHEMAS = ["auth", "invitations"]


def consumers_by_type(services):
    """{event type: [consuming service, ...]} from each service's handler registrations."""
    types = {}
    with open(os.path.join(ROOT, "Shared", "Models", "Events.swift")) as f:
        source = f.read()
    for name, event_type in re.findall(r"struct (\w+): EventPayload[^{]*\{\s*public static let eventType = \"([^\"]+)\"", source):
        types[name] = event_type
    consumers = defaultdict(list)
    for service in services:
        folder = os.path.join(ROOT, "Services", service[0].upper() + service[1:])
        for path in glob.glob(os.path.join(folder, "**", "*.swift"), recursive=True):
            with open(path) as f:
                text = f.read()
            for name in re.findall(r"handlers\.on\((\w+)\.self", text):
                if name not in types:
                    raise SystemExit(f"{path}: handles {name}, which Shared/Models/Events.swift does not declare")
                consumers[types[name]].append(service)
            for event_type in re.findall(r"handlers\.on\(type: \"([^\"]+)\"", text):
                consumers[event_type].append(service)
    return {event_type: sorted(set(names)) for event_type, names in consumers.items()}


class Database:
    def __init__(self, port):
        self.url = f"postgres://postgres@127.0.0.1:{port}/foodbackend"

    def run(self, sql, check=True):
        done = subprocess.run(["psql", self.url, "-qAtX", "-v", "ON_ERROR_STOP=1", "-F", "\t", "-c", sql],
                              capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"psql: {done.stderr.strip()} in {sql[:200]}")
        return done.stdout

    def rows(self, sql):
        return [line.split("\t") for line in self.run(sql).splitlines() if line]

    def value(self, sql):
        return self.run(sql).strip()


def install_audit(db, services):
    """A copy of every outbox row, made by a trigger in the inserting transaction: what was
    published, whatever the relay does to the outbox afterwards (it deletes what Redis took)."""
    sql = ["CREATE SCHEMA IF NOT EXISTS faults",
           "CREATE TABLE IF NOT EXISTS faults.published (n bigserial PRIMARY KEY, producer text NOT NULL, id uuid NOT NULL, "
           "type text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
           """CREATE OR REPLACE FUNCTION faults.copy_outbox_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
              SET search_path = faults, pg_catalog AS $$
              BEGIN
                  INSERT INTO faults.published (producer, id, type) VALUES (TG_TABLE_SCHEMA, NEW.id, NEW.type);
                  RETURN NULL;
              END $$"""]
    for service in services:
        sql.append(f"DROP TRIGGER IF EXISTS faults_published ON {service}.outbox")
        sql.append(f"CREATE TRIGGER faults_published AFTER INSERT ON {service}.outbox FOR EACH ROW EXECUTE FUNCTION faults.copy_outbox_row()")
    db.run("; ".join(sql))


def remove_audit(db, services):
    db.run("; ".join([f"DROP TRIGGER IF EXISTS faults_published ON {service}.outbox" for service in services]
                     + ["DROP SCHEMA IF EXISTS faults CASCADE"]), check=False)


def published_marker(db):
    return int(db.value("SELECT coalesce(max(n), 0) FROM faults.published"))


def mail_marker(db):
    """The time of the newest queued mail: the check looks at mail queued after it."""
    return {schema: db.value(f"SELECT coalesce(max(created_at), '-infinity')::text FROM {schema}.mail_outbox") for schema in MAIL_SCHEMAS}


def event_state(db, services, consumers, since):
    """(published, unsent, missing): events published after marker `since`, those still in an
    outbox, and (event, consumer) pairs without an inbox row."""
    published = int(db.value(f"SELECT count(*) FROM faults.published WHERE n > {since}"))
    unsent = int(db.value("SELECT " + " + ".join(f"(SELECT count(*) FROM {s}.outbox)" for s in services) or "0"))
    missing = []
    for event_type, names in sorted(consumers.items()):
        for consumer in names:
            for row in db.rows(f"""SELECT p.producer, p.id, p.type FROM faults.published p
                                   WHERE p.n > {since} AND p.type = '{event_type}'
                                   AND NOT EXISTS (SELECT 1 FROM {consumer}.inbox i WHERE i.event_id = p.id)"""):
                missing.append((row[0], row[1], row[2], consumer))
    return published, unsent, missing


def mail_state(db, since, mail_dir):
    """(queued, pending, failed, not_received, duplicates) for mail queued after `since`."""
    # The rows first, the folder after: the sink saves a message before it answers, and the sender
    # marks it sent after that answer, so every row read as sent has its file by then.
    rows = [row for schema in MAIL_SCHEMAS
            for row in db.rows(f"SELECT id, status FROM {schema}.mail_outbox WHERE created_at > '{since[schema]}'::timestamptz")]
    received = defaultdict(int)
    for path in glob.glob(os.path.join(mail_dir, "*.eml")):
        with open(path, "rb") as f:
            head = f.read(8192).decode("utf-8", "replace")
        match = re.search(r"^Message-ID:\s*<([0-9a-f-]{36})@foodbackend>", head, re.MULTILINE | re.IGNORECASE)
        if match:
            received[match.group(1).lower()] += 1
    queued = pending = failed = 0
    not_received, duplicates = [], []
    for mail_id, status in rows:
        queued += 1
        if status == "pending":
            pending += 1
        elif status == "failed":
            failed += 1
        elif received[mail_id] == 0:
            not_received.append(mail_id)
        if received[mail_id] > 1:
            duplicates.append((mail_id, received[mail_id]))
    return queued, pending, failed, not_received, duplicates


def read_record(path):
    lines = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    lines.append(json.loads(line))
    return lines


def check_writes(db, record_path):
    """[(kind, id, why)] of acknowledged writes not found as written, and {kind: acknowledged}."""
    lines = read_record(record_path)
    acknowledged = defaultdict(int)
    lost = []
    # Writes that replace a value: the last answered one per key, and what later unanswered ones tried.
    last = {}
    later = defaultdict(set)
    exists = defaultdict(list)
    consumed = []
    for line in lines:
        kind = line["kind"]
        if not line.get("attempt"):
            acknowledged[kind] += 1
        if kind in ("meal", "signup", "invitation"):
            if not line.get("attempt"):
                exists[kind].append(line["id"])
            continue
        if kind == "consume":
            consumed.append(line["id"])
            continue
        # Both record formats: this loader's (target_id, date and value, notes) and
        # scripts/load/locustfile.py's (the id alone: followee, local date, session).
        if kind in ("follow", "unfollow"):
            key, value = ("follow", line["user_id"], line.get("target_id") or line["id"]), kind == "follow"
        elif kind == "weight":
            date = line.get("date") or line["id"]
            key, value = ("weight", line["user_id"], date), f"{float(line['value']):.2f}" if "value" in line else True
        elif kind == "profile":
            key, value = ("profile", line["user_id"]), line["bio"]
        elif kind == "workout_log":
            key, value = ("workout_log", line["id"]), line.get("notes", True)
        else:
            continue  # sign-ins and other kinds are not looked for
        if line.get("attempt"):
            if key in last:
                later[key].add(value)
        else:
            last[key] = value
            later[key] = set()
    tables = {"meal": "nutrition.meals", "signup": "auth.users", "invitation": "invitations.clients"}
    for kind, ids in exists.items():
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            found = {row[0] for row in db.rows(f"SELECT id FROM {tables[kind]} WHERE id = ANY('{{{','.join(chunk)}}}'::uuid[])")}
            lost += [(kind, record_id, "not in the database") for record_id in chunk if record_id not in found]
    follows = {(a, b) for a, b in db.rows("SELECT follower_id, followee_id FROM social.follows")}
    weights = {(u, d): f"{float(v):.2f}" for u, d, v in db.rows("SELECT user_id, local_date, weight_kg FROM nutrition.body_metrics WHERE weight_kg IS NOT NULL")}
    bios = {u: b for u, b in db.rows("SELECT user_id, coalesce(bio, '') FROM social.profiles")}
    logs = {i: (s, n) for i, s, n in db.rows("SELECT id, status, coalesce(log_notes, '') FROM training.sessions WHERE status IN ('completed', 'partial')")}
    for key, value in last.items():
        allowed = {value} | later[key]
        if key[0] == "follow":
            actual = (key[1], key[2]) in follows
        elif key[0] == "weight":
            actual = weights.get((key[1], key[2]))
            if value is True:  # only that the day has a weight
                actual = actual is not None
        elif key[0] == "profile":
            actual = bios.get(key[1])
        else:
            actual = logs.get(key[1], (None, None))[1]
            if value is True:  # only that the session is logged
                actual = actual is not None
        if actual not in allowed:
            lost.append((key[0], "/".join(key[1:]), f"database has {actual!r}, expected {value!r}"))
    for start in range(0, len(consumed), 500):
        chunk = consumed[start:start + 500]
        eaten = {row[0] for row in db.rows(f"SELECT id FROM nutrition.meals WHERE consumed AND id = ANY('{{{','.join(chunk)}}}'::uuid[])")}
        lost += [("consume", record_id, "the meal is not eaten in the database") for record_id in chunk if record_id not in eaten]
    return lost, dict(acknowledged)
