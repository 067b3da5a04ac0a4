"""The apps' traffic through the gateway, one account per simulated user (scripts/load/run drives it;
docs/BENCHMARKS.md, "Whole app under load", has the figures).

Who: of every 20 users, one is a coach with two linked clients (accounts.py links them through the
invitation flow and plans them a workout), the rest use the app on their own. Everyone holds the live
event stream (GET /v1/events) open for the whole run, as an app in the foreground does, and reopens
it 3 s after it ends (the stream's own `retry: 3000`).

What: each user, after a think time of 1 to 5 s (uniform; the apps' pace of taps, a screen read
between them), does one of the actions below, picked at random by weight; the share of a type's
actions is weight / that type's total. A session is refreshed every 15 minutes of use (some 300
actions at this pace) and a sign-in is rarer still: both are weighted well above that so that they
are measured, and below 1% of requests, so that bcrypt's deliberate cost (a sign-in's tens of
milliseconds) is read in its own row and does not stand for the overall p99.

  everyone (total 283)                     weight  requests
  read own profile                          40     GET /v1/profiles/me
  read someone's profile                    50     GET /v1/profiles/{id}
  follow or unfollow someone                20     POST or DELETE /v1/profiles/{id}/follow
  read notifications                        25     GET /v1/notifications
  unread badge                              20     GET /v1/notifications/unread-count
  log a meal (and eat it, half the time)    25     POST /v1/meals [+ POST /v1/meals/{id}/consume]
  read the day's diary                      40     GET /v1/meals?from=today&to=today
  read trends                               20     GET /v1/trends?period=7d
  log the day's weight                      10     POST /v1/metrics/weight
  read weights                              10     GET /v1/metrics/weight?days=30
  entitlements                              10     GET /v1/entitlements/me
  check a feature                           10     POST /v1/entitlements/check (meal_analysis
                                                   allowed; ai_suggestions a 403 requires_upgrade
                                                   for a free user, the paywall: expected, not an error)
  refresh the session                        2     POST /v1/auth/token/refresh
  sign in again                              1     POST /v1/auth/login (bcrypt)
  a client also (total +40)
  today's training                          30     GET /v1/training/today
  log a session                             10     POST /v1/training/sessions/{id}/log
  a coach also (total +80)
  a client's diary                          40     GET /v1/nutrition/clients/{id}/meals
  a client's trends                         15     GET /v1/nutrition/clients/{id}/trends?period=7d
  a client's training                       15     GET /v1/training/clients/{entry id}
  the roster                                10     GET /v1/clients

Measured: from the moment every user has started (the ramp is not counted) for LOAD_SECONDS; each
request's time to its whole response, by route, exact (not Locust's rounded buckets), and every
answer that was not the expected one by route and status (0: no answer). The CPU each process of the
stack used in that window (from /proc, $STACK_DIR/pids; PostgreSQL with its backends) and this
process's own. LOAD_REPORT names the JSON file the summary goes to; LOAD_RECORD, when set, a file
to which every write answered 2xx appends one JSON line {"kind", "id", "user_id", "status", "at"}:
kinds meal (id: the meal), consume (the meal), weight (the local date), follow and unfollow (the
followee's user id; the last one by "at" is the state), workout_log (the training session).
"""
import datetime
import json
import os
import random
import resource
import socket
import sys
import time
import uuid

import gevent
from locust import between, events, task
from locust.contrib.fasthttp import FastHttpUser

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import wrk_cpu  # noqa: E402

USERS = int(os.environ["LOAD_USERS"])
SECONDS = float(os.environ["LOAD_SECONDS"])
STACK_DIR = os.environ["STACK_DIR"]
GATEWAY_PORT = int(os.environ["STACK_GATEWAY_PORT"])
PASSWORD = "load run password 7"
CLIENTS_PER_COACH = 2

# The accounts for USERS users: a coach and its clients per 20 users, the rest on their own.
_accounts = json.load(open(os.environ["LOAD_ACCOUNTS"]))
_coaches_wanted = max(1, round(USERS / 20))
_by_id = {a["user_id"]: a for a in _accounts}
COACHES = [a for a in _accounts if a["kind"] == "coach"][:_coaches_wanted]
CLIENTS = [_by_id[c] for coach in COACHES for c in coach["clients"]]
PLAIN = [a for a in _accounts if a["kind"] == "plain"][:max(0, USERS - len(COACHES) - len(CLIENTS))]
EVERYONE = COACHES + CLIENTS + PLAIN
if len(EVERYONE) != USERS:
    raise SystemExit(f"locustfile: {len(EVERYONE)} accounts for {USERS} users; run accounts.py first")
USER_IDS = [a["user_id"] for a in EVERYONE]
_pools = {"coach": list(COACHES), "client": list(CLIENTS), "plain": list(PLAIN)}

_record_path = os.environ.get("LOAD_RECORD")
_record = open(_record_path, "a", buffering=1) if _record_path else None

# The measured window, and what it measured.
window = {"start": None, "end": None}
latencies = {}  # name -> [ms]
errors = {}  # (name, status) -> count
stream = {"opened": 0, "messages": 0, "open_now": 0}
cpu = {}


def record(kind, ident, user_id, status):
    if _record and 200 <= status < 300:
        _record.write(json.dumps({"kind": kind, "id": str(ident), "user_id": user_id, "status": status,
                                  "at": datetime.datetime.now(datetime.timezone.utc).isoformat()}) + "\n")


@events.request.add_listener
def on_request(request_type, name, response_time, response_length, response=None, context=None, exception=None, **kwargs):
    if window["start"] is None or window["end"] is not None:
        return
    latencies.setdefault(name, []).append(response_time)
    if exception is not None:
        status = (context or {}).get("status") or getattr(response, "status_code", 0) or 0
        errors[(name, status)] = errors.get((name, status), 0) + 1


def today():
    return str(datetime.datetime.now(datetime.timezone.utc).date())


class AppUser(FastHttpUser):
    abstract = True
    wait_time = between(1, 5)
    kind = "plain"

    def on_start(self):
        self.account = _pools[self.kind].pop()
        self.token = self.account["session"]["access_token"]
        self.following = set()
        self.meals = []
        self.streaming = gevent.spawn(self.hold_stream)

    def on_stop(self):
        self.streaming.kill(block=False)

    @property
    def auth(self):
        return {"Authorization": f"Bearer {self.token}"}

    def hold_stream(self):
        """The live event stream, held open and read as an app reads it."""
        while True:
            started = time.perf_counter()
            status, failure, sock = 0, None, None
            try:
                sock = socket.create_connection(("127.0.0.1", GATEWAY_PORT), timeout=10)
                sock.sendall((f"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.token}\r\n"
                              "Accept: text/event-stream\r\n\r\n").encode())
                reader = sock.makefile("rb")
                status = int(reader.readline().split()[1])
                while reader.readline() not in (b"\r\n", b""):
                    pass
                if status != 200:
                    failure = RuntimeError(f"event stream answered {status}")
            except Exception as error:  # noqa: BLE001 (any failure to open is counted)
                failure = error
            events.request.fire(request_type="GET", name="GET /v1/events (open)", response_time=(time.perf_counter() - started) * 1000,
                                response_length=0, response=None, context={"status": status}, exception=failure)
            if failure is None:
                stream["opened"] += 1
                stream["open_now"] += 1
                try:
                    sock.settimeout(60)  # a ping comes every 15 s
                    for line in reader:
                        if line.startswith(b"event:") and window["start"] is not None and window["end"] is None:
                            stream["messages"] += 1
                except Exception:  # noqa: BLE001 (the stream ended; reopen it)
                    pass
                finally:
                    stream["open_now"] -= 1
            if sock:
                sock.close()
            gevent.sleep(3)

    def other(self):
        while True:
            user_id = random.choice(USER_IDS)
            if user_id != self.account["user_id"]:
                return user_id

    @task(40)
    def own_profile(self):
        self.client.get("/v1/profiles/me", headers=self.auth, name="GET /v1/profiles/me")

    @task(50)
    def someones_profile(self):
        self.client.get(f"/v1/profiles/{self.other()}", headers=self.auth, name="GET /v1/profiles/{id}")

    @task(20)
    def follow_or_unfollow(self):
        if self.following and random.random() < 0.5:
            user_id = random.choice(sorted(self.following))
            response = self.client.delete(f"/v1/profiles/{user_id}/follow", headers=self.auth, name="DELETE /v1/profiles/{id}/follow")
            if response.status_code == 200:
                self.following.discard(user_id)
                record("unfollow", user_id, self.account["user_id"], response.status_code)
        else:
            user_id = self.other()
            response = self.client.post(f"/v1/profiles/{user_id}/follow", headers=self.auth, name="POST /v1/profiles/{id}/follow")
            if response.status_code == 200:
                self.following.add(user_id)
                record("follow", user_id, self.account["user_id"], response.status_code)

    @task(25)
    def notifications(self):
        self.client.get("/v1/notifications", headers=self.auth, name="GET /v1/notifications")

    @task(20)
    def unread_badge(self):
        self.client.get("/v1/notifications/unread-count", headers=self.auth, name="GET /v1/notifications/unread-count")

    @task(25)
    def log_meal(self):
        eaten_at = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=random.randint(1, 90))).isoformat()
        grams = random.randint(80, 300)
        meal = {"name": random.choice(["Oats and berries", "Chicken salad", "Rice and beans", "Omelette", "Salmon and greens"]),
                "eaten_at": eaten_at, "items": [
                    {"name": "Main", "grams": grams, "calories": grams * 2, "protein_g": grams // 10, "carbs_g": grams // 6, "fat_g": grams // 20},
                    {"name": "Side", "grams": 100, "calories": 90, "protein_g": 3, "carbs_g": 15, "fat_g": 2, "fiber_g": 4}]}
        response = self.client.post("/v1/meals", json=meal, headers={**self.auth, "Idempotency-Key": str(uuid.uuid4())}, name="POST /v1/meals")
        if response.status_code != 201:
            return
        meal_id = response.json()["id"]
        record("meal", meal_id, self.account["user_id"], response.status_code)
        if random.random() < 0.5:
            eaten = self.client.post(f"/v1/meals/{meal_id}/consume", json={}, headers=self.auth, name="POST /v1/meals/{id}/consume")
            record("consume", meal_id, self.account["user_id"], eaten.status_code)

    @task(40)
    def diary(self):
        day = today()
        self.client.get(f"/v1/meals?from={day}&to={day}", headers=self.auth, name="GET /v1/meals?from&to")

    @task(20)
    def trends(self):
        self.client.get("/v1/trends?period=7d", headers=self.auth, name="GET /v1/trends")

    @task(10)
    def log_weight(self):
        response = self.client.post("/v1/metrics/weight", json={"value": round(random.uniform(60, 90), 1), "unit": "kg"}, headers=self.auth,
                                    name="POST /v1/metrics/weight")
        if response.status_code == 201:
            record("weight", response.json()["date"], self.account["user_id"], response.status_code)

    @task(10)
    def weights(self):
        self.client.get("/v1/metrics/weight?days=30", headers=self.auth, name="GET /v1/metrics/weight")

    @task(10)
    def entitlements(self):
        self.client.get("/v1/entitlements/me", headers=self.auth, name="GET /v1/entitlements/me")

    @task(10)
    def check_feature(self):
        feature = random.choice(["meal_analysis", "ai_suggestions"])
        with self.client.post("/v1/entitlements/check", json={"feature": feature}, headers=self.auth, name="POST /v1/entitlements/check",
                              catch_response=True) as response:
            if feature == "ai_suggestions" and response.status_code == 403 and response.json().get("code") == "requires_upgrade":
                response.success()

    @task(2)
    def refresh(self):
        response = self.client.post("/v1/auth/token/refresh", json={"refresh_token": self.account["session"]["refresh_token"]},
                                    name="POST /v1/auth/token/refresh")
        if response.status_code == 200:
            self.account["session"] = response.json()
            self.token = self.account["session"]["access_token"]

    @task(1)
    def sign_in(self):
        response = self.client.post("/v1/auth/login", json={"email": self.account["email"], "password": PASSWORD}, name="POST /v1/auth/login")
        if response.status_code == 200:
            self.account["session"] = response.json()["session"]
            self.token = self.account["session"]["access_token"]


class OnTheirOwn(AppUser):
    kind = "plain"
    fixed_count = len(PLAIN)


class Client(AppUser):
    kind = "client"
    fixed_count = len(CLIENTS)

    @task(30)
    def training_today(self):
        self.client.get("/v1/training/today", headers=self.auth, name="GET /v1/training/today")

    @task(10)
    def log_training(self):
        session_id = random.choice(self.account["training_sessions"])
        performed = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
        sets = [{"block": 1, "set": n, "reps": random.randint(6, 10), "weight_kg": 40, "done": True} for n in (1, 2)]
        response = self.client.post(f"/v1/training/sessions/{session_id}/log", json={"performed_at": performed, "sets": sets},
                                    headers={**self.auth, "Idempotency-Key": str(uuid.uuid4())}, name="POST /v1/training/sessions/{id}/log")
        record("workout_log", session_id, self.account["user_id"], response.status_code)


class Coach(AppUser):
    kind = "coach"
    fixed_count = len(COACHES)

    @task(40)
    def client_diary(self):
        day = today()
        self.client.get(f"/v1/nutrition/clients/{random.choice(self.account['clients'])}/meals?from={day}&to={day}", headers=self.auth,
                        name="GET /v1/nutrition/clients/{id}/meals")

    @task(15)
    def client_trends(self):
        self.client.get(f"/v1/nutrition/clients/{random.choice(self.account['clients'])}/trends?period=7d", headers=self.auth,
                        name="GET /v1/nutrition/clients/{id}/trends")

    @task(15)
    def client_training(self):
        self.client.get(f"/v1/training/clients/{random.choice(self.account['entries'])}", headers=self.auth,
                        name="GET /v1/training/clients/{id}")

    @task(10)
    def roster(self):
        self.client.get("/v1/clients", headers=self.auth, name="GET /v1/clients")


# The CPU of each process of the stack, and of this one, over the window.
def stack_pids():
    found = {}
    folder = os.path.join(STACK_DIR, "pids")
    for entry in sorted(os.listdir(folder)):
        if entry.endswith(".pid"):
            try:
                found[entry[:-4]] = int(open(os.path.join(folder, entry)).read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return found


def waited(pids):
    """Nanoseconds the threads of PIDS spent runnable but waiting for a core (schedstat's run_delay)."""
    total = {}
    for pid in pids:
        try:
            for thread in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{thread}/schedstat") as f:
                    total[f"{pid}/{thread}"] = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total


def cpu_sample():
    sample = {}
    for name, pid in stack_pids().items():
        pids = [pid] + (wrk_cpu.children(pid) if name == "postgres" else [])
        ticks = {p: wrk_cpu.cpu_ticks(p) for p in pids}
        sample[name] = {"ticks": {p: t for p, t in ticks.items() if t is not None},
                        "reaped": wrk_cpu.reaped_ticks(pid) if name == "postgres" else 0, "waited": waited(pids)}
    own = resource.getrusage(resource.RUSAGE_SELF)
    sample["locust (load generator)"] = {"seconds": own.ru_utime + own.ru_stime, "waited": waited([os.getpid()])}
    sample["machine"] = wrk_cpu.machine()
    return sample


def cpu_used(before, after, seconds):
    used = {}
    for name in after:
        if name == "machine":
            continue
        if "seconds" in after[name]:
            spent = after[name]["seconds"] - before[name]["seconds"]
        elif name in before:
            now, then = after[name]["ticks"], before[name]["ticks"]
            ticks = sum(t - then.get(p, 0) for p, t in now.items())
            ticks += (after[name]["reaped"] - before[name]["reaped"]) - sum(t for p, t in then.items() if p not in now)
            spent = ticks / wrk_cpu.TICKS
        else:
            continue
        # Time runnable but not running: what a busy machine adds to every request in the process.
        delay = sum(ns - before[name]["waited"].get(thread, 0) for thread, ns in after[name]["waited"].items()) / 1e9
        used[name] = {"seconds": round(spent, 2), "percent_of_a_core": round(100 * spent / seconds, 1),
                      "waited_for_a_core_seconds": round(delay, 2)}
    total = after["machine"][0] - before["machine"][0]
    idle = after["machine"][1] - before["machine"][1]
    return used, round(100 * (total - idle) / total, 1) if total else 0


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else None


def summary():
    seconds = window["end"] - window["start"]
    routes = {}
    for name, values in sorted(latencies.items()):
        routes[name] = {"count": len(values), "per_second": round(len(values) / seconds, 1),
                        **{f"p{p}": round(percentile(values, p / 100), 1) for p in (50, 95, 99)}, "max": round(max(values), 1)}
    everything = [v for name, values in latencies.items() if not name.startswith("GET /v1/events") for v in values]
    used, busy = cpu_used(cpu["before"], cpu["after"], seconds)
    return {"users": USERS, "seconds": round(seconds, 1), "requests": len(everything),
            "overall": {"per_second": round(len(everything) / seconds, 1),
                        **{f"p{p}": round(percentile(everything, p / 100), 1) for p in (50, 95, 99)},
                        "max": round(max(everything), 1) if everything else None},
            "routes": routes, "errors": [{"route": n, "status": s, "count": c} for (n, s), c in sorted(errors.items())],
            "errors_total": sum(errors.values()), "streams": dict(stream), "cpu": used, "cores_busy_percent": busy,
            "cores": os.cpu_count()}


@events.spawning_complete.add_listener
def begin_window(user_count, **kwargs):
    if window["start"] is not None:
        return
    cpu["before"] = cpu_sample()
    window["start"] = time.perf_counter()

    def end_window():
        gevent.sleep(SECONDS)
        window["end"] = time.perf_counter()
        cpu["after"] = cpu_sample()
        report = summary()
        with open(os.environ["LOAD_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
        window["environment"].runner.quit()

    gevent.spawn(end_window)


@events.init.add_listener
def keep_environment(environment, **kwargs):
    window["environment"] = environment


@events.test_stop.add_listener
def keep_sessions(**kwargs):
    """The sessions as the run left them (a refresh token works once), for the next run to refresh."""
    path = os.environ["LOAD_ACCOUNTS"]
    with open(path + ".part", "w") as f:
        json.dump(_accounts, f)
    os.replace(path + ".part", path)
