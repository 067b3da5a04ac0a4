"""The app's writes, and a few of its reads, through the gateway from many simulated users at once.

Each simulated user is a thread with an account of its own (a requests session, its own keep-alive
connections). A few are coaches, whose clients accepted their invitation and were assigned
sessions; the others log meals and weights, follow and unfollow, edit their profile, sign in again;
now and then someone signs up. Every write the gateway answers 2xx is appended to the record file as
one JSON line {"kind", "id", "user_id", "status", "at"} (plus what the check needs to find it), the
format of scripts/load/locustfile.py's LOAD_RECORD; every request's status and duration is kept for
the summary.

    loader = Loader(gateway, mail_dir, record_path, users=50)
    loader.setup()      # accounts, coaches, clients, sessions: before the measured window
    loader.start()      # the users' threads
    ...
    loader.stop()       # joins them; loader.results holds (start, seconds, status, route)
"""
import datetime
import email
import email.policy
import glob
import json
import os
import random
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests

# How long a request may take before the loader gives up on it. Far longer than any answer should
# take (the statement timeout bounds a request's wait for the database): a request that reaches it
# is a hang, and the check says so.
REQUEST_TIMEOUT = 30
PASSWORD = "fault load password"
COACHES = 5
CLIENTS_PER_COACH = 3
# Think time between one user's requests, in seconds: uniform in this range (0.5 s on average, so
# 50 users make some 100 requests a second).
THINK = (0.2, 0.8)
# The mix: (weight, action) for a user who is neither coach nor client; clients and coaches add theirs.
MIX = [
    (15, "read_profile"), (10, "read_meals"), (8, "read_notifications"), (4, "read_trends"), (4, "read_entitlements"),
    (15, "meal"), (6, "weight"), (8, "follow"), (4, "profile"), (2, "login"), (1, "signup"),
]
CLIENT_MIX = [(6, "workout_log"), (3, "read_today")]
COACH_MIX = [(5, "invitation"), (4, "read_clients")]


class Failed(Exception):
    pass


def now():
    return time.time()


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="milliseconds")


class User:
    def __init__(self, index, email_address):
        self.index = index
        self.email = email_address
        self.id = None
        self.session = None  # {access_token, refresh_token}
        self.refreshed_at = 0
        self.http = requests.Session()
        self.coach = False
        self.workout_id = None
        self.sessions = []  # training sessions assigned to this client
        self.weight_day = 0

    def auth(self):
        return {"Authorization": f"Bearer {self.session['access_token']}"}


class Loader:
    def __init__(self, gateway, mail_dir, record_path, users=50, tag=None, only=None):
        self.gateway = gateway
        self.mail_dir = mail_dir
        self.record_path = record_path
        self.count = users
        self.tag = tag or uuid.uuid4().hex[:8]
        self.users = []
        self.results = []  # (start, seconds, status, route); status is an int or an error's name
        self.lock = threading.Lock()
        self.record_file = None
        self.stopping = threading.Event()
        self.threads = []
        self.sequence = 0
        self.mail_seen = {}
        # Actions to keep of the mix (None: all): beside scripts/load's users, only what they do not do.
        self.only = only

    # -- requests -------------------------------------------------------------------------------

    def call(self, user, method, path, route, record=True, **kwargs):
        """One request; its status (or the error's name) and duration go into results."""
        started = now()
        try:
            response = user.http.request(method, self.gateway + path, timeout=REQUEST_TIMEOUT, **kwargs)
            status = response.status_code
        except requests.RequestException as error:
            response, status = None, type(error).__name__
        if record:
            with self.lock:
                self.results.append((started, now() - started, status, route))
        return response

    def write(self, kind, record_id, user, response, **extra):
        line = {"kind": kind, "id": record_id, "user_id": user.id, "status": response.status_code, "at": iso(now()), **extra}
        with self.lock:
            self.record_file.write(json.dumps(line) + "\n")
            self.record_file.flush()

    def attempt(self, kind, record_id, user, **extra):
        """A write that did not answer 2xx: it may or may not have happened. Kept so that a check of a
        value that later writes replace accepts what such a write may have left."""
        line = {"kind": kind, "id": record_id, "attempt": True, "user_id": user.id, "at": iso(now()), **extra}
        with self.lock:
            self.record_file.write(json.dumps(line) + "\n")
            self.record_file.flush()

    def next_number(self):
        with self.lock:
            self.sequence += 1
            return self.sequence

    # -- setup ----------------------------------------------------------------------------------

    def mails_to(self, address):
        found = []
        for path in sorted(glob.glob(os.path.join(self.mail_dir, "*.eml"))):
            if path not in self.mail_seen:
                with open(path, "rb") as f:
                    message = email.message_from_binary_file(f, policy=email.policy.default)
                self.mail_seen[path] = ((message["To"] or "").lower(), message)
            to, message = self.mail_seen[path]
            if address.lower() in to:
                found.append(message)
        return found

    def wait_for_mail(self, address, pattern, seconds=60):
        deadline = now() + seconds
        while now() < deadline:
            with self.lock:
                for message in self.mails_to(address):
                    match = re.search(pattern, message.get_body(preferencelist=("plain",)).get_content())
                    if match:
                        return match.group(1)
            time.sleep(0.2)
        raise Failed(f"no mail to {address} matching {pattern} within {seconds}s")

    def must(self, response, expected, what):
        if response is None or response.status_code not in expected:
            raise Failed(f"{what}: {response.status_code if response is not None else 'no answer'} {response.text[:300] if response is not None else ''}")
        return response.json() if response.content else {}

    def sign_up(self, user):
        body = self.must(self.call(user, "POST", "/v1/auth/signup", "signup", record=False,
                                   json={"email": user.email, "password": PASSWORD, "display_name": f"Load {user.index}"}), {201}, "sign-up")
        user.id = body["user"]["id"]
        user.session = body["session"]
        user.refreshed_at = now()

    def refresh(self, user, record=False):
        response = self.call(user, "POST", "/v1/auth/token/refresh", "refresh", record=record, json={"refresh_token": user.session["refresh_token"]})
        if response is not None and response.status_code == 200:
            user.session = response.json()
            user.refreshed_at = now()
        return response

    def verify(self, user):
        token = self.wait_for_mail(user.email, r"token=([A-Za-z0-9_-]{20,})")
        self.must(self.call(user, "POST", "/v1/auth/email/verify", "verify", record=False, headers=user.auth(), json={"token": token}), {200}, "verification")
        self.must(self.refresh(user), {200}, "refresh")

    def setup(self):
        """Accounts (verified), coaches with a workout, clients linked by accepted invitations and
        given sessions to log. Nothing here is counted."""
        self.users = [User(i, f"fault-{self.tag}-{i}@example.com") for i in range(self.count)]
        with ThreadPoolExecutor(max_workers=10) as pool:
            list(pool.map(self.sign_up, self.users))
            list(pool.map(self.verify, self.users))
        coaches = self.users[:COACHES]
        clients = self.users[COACHES:COACHES + COACHES * CLIENTS_PER_COACH]

        def make_coach(coach):
            self.must(self.call(coach, "POST", "/v1/auth/roles/coach", "role", record=False, headers=coach.auth()), {200}, "coach role")
            self.must(self.refresh(coach), {200}, "refresh")
            coach.coach = True
            found = self.must(self.call(coach, "GET", "/v1/exercises", "exercises", record=False, headers=coach.auth(), params={"q": "push ups"}), {200}, "exercises")
            workout = self.must(self.call(coach, "POST", "/v1/workouts", "workout", record=False, headers=coach.auth(), json={
                "name": "Load week", "blocks": [{"exercise_id": found["items"][0]["id"], "sets": [{"reps": 10, "weight_kg": 20}, {"reps": 10, "weight_kg": 20}]}]}),
                {201}, "workout")
            coach.workout_id = workout["id"]

        def link(pair):
            coach, client = pair
            entry = self.must(self.call(coach, "POST", "/v1/clients", "client", record=False, headers=coach.auth(),
                                        json={"name": f"Client {client.index}", "email": client.email}), {201}, "invitation")
            code = self.wait_for_mail(client.email, r"/invite\?code=([A-Za-z0-9_-]{20,})")
            self.must(self.call(client, "POST", f"/v1/invitations/{code}/accept", "accept", record=False, headers=client.auth()), {200}, "acceptance")
            self.must(self.refresh(client), {200}, "refresh")
            today = datetime.date.today()
            dates = [str(today + datetime.timedelta(days=n)) for n in range(-7, 7)]
            deadline = now() + 30
            while True:  # training learns of the link from invitation.accepted
                planned = self.call(coach, "POST", f"/v1/training/clients/{entry['id']}/assignments", "assign", record=False,
                                    headers=coach.auth(), json={"workout_id": coach.workout_id, "dates": dates})
                if planned is not None and planned.status_code == 201:
                    break
                if now() > deadline:
                    self.must(planned, {201}, "assignment")
                time.sleep(0.3)
            client.sessions = [s["id"] for s in planned.json()["items"]]

        with ThreadPoolExecutor(max_workers=10) as pool:
            list(pool.map(make_coach, coaches))
            list(pool.map(link, [(coaches[i % COACHES], client) for i, client in enumerate(clients)]))

    # -- the load -------------------------------------------------------------------------------

    def start(self):
        self.record_file = open(self.record_path, "a")
        self.stopping.clear()
        self.threads = [threading.Thread(target=self.run_user, args=(user,), daemon=True) for user in self.users]
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        self.record_file.close()

    def run_user(self, user):
        mix = MIX + (COACH_MIX if user.coach else []) + (CLIENT_MIX if user.sessions else [])
        if self.only:
            mix = [(weight, action) for weight, action in mix if action in self.only]
        actions = [action for _, action in mix]
        weights = [weight for weight, _ in mix]
        rng = random.Random(user.index)
        while not self.stopping.is_set():
            # Access tokens live 15 minutes: refresh well before, as the apps do.
            if now() - user.refreshed_at > 300:
                self.refresh(user, record=True)
            action = rng.choices(actions, weights)[0]
            try:
                getattr(self, "do_" + action)(user, rng)
            except Exception as error:  # a bug of the loader, not an answer: counted, never silent
                with self.lock:
                    self.results.append((now(), 0, f"loader:{type(error).__name__}:{error}", action))
            self.stopping.wait(rng.uniform(*THINK))

    def do_read_profile(self, user, rng):
        self.call(user, "GET", "/v1/profiles/me", "GET /v1/profiles/me", headers=user.auth())

    def do_read_meals(self, user, rng):
        self.call(user, "GET", "/v1/meals?limit=20", "GET /v1/meals", headers=user.auth())

    def do_read_notifications(self, user, rng):
        self.call(user, "GET", "/v1/notifications", "GET /v1/notifications", headers=user.auth())

    def do_read_trends(self, user, rng):
        self.call(user, "GET", "/v1/trends?period=7d", "GET /v1/trends", headers=user.auth())

    def do_read_entitlements(self, user, rng):
        self.call(user, "GET", "/v1/entitlements/me", "GET /v1/entitlements/me", headers=user.auth())

    def do_read_today(self, user, rng):
        self.call(user, "GET", "/v1/training/today", "GET /v1/training/today", headers=user.auth())

    def do_read_clients(self, user, rng):
        self.call(user, "GET", "/v1/clients?limit=20", "GET /v1/clients", headers=user.auth())

    def do_meal(self, user, rng):
        eaten = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=rng.randint(1, 600))
        body = {"name": f"Load meal {self.next_number()}", "eaten_at": eaten.isoformat(), "items": [
            {"name": "Eggs", "grams": 120, "calories": 240, "protein_g": 16, "carbs_g": 1, "fat_g": 18, "tags": ["egg"]},
            {"name": "Toast", "grams": 60, "calories": 160, "protein_g": 5, "carbs_g": 28, "fat_g": 2, "fiber_g": 3}]}
        response = self.call(user, "POST", "/v1/meals", "POST /v1/meals", headers={**user.auth(), "Idempotency-Key": str(uuid.uuid4())}, json=body)
        if response is not None and 200 <= response.status_code < 300:
            self.write("meal", response.json()["id"], user, response)

    def do_weight(self, user, rng):
        # A day of its own for each write (one weight a day is kept), so each can be found.
        user.weight_day += 1
        day = str(datetime.date.today() - datetime.timedelta(days=user.weight_day))
        value = round(60 + (self.next_number() % 4000) / 100, 2)
        response = self.call(user, "POST", "/v1/metrics/weight", "POST /v1/metrics/weight", headers=user.auth(),
                             json={"date": day, "value": value, "unit": "kg"})
        if response is not None and 200 <= response.status_code < 300:
            self.write("weight", f"{user.id}/{day}", user, response, date=day, value=value)
        else:
            self.attempt("weight", f"{user.id}/{day}", user, date=day, value=value)

    def do_follow(self, user, rng):
        target = rng.choice([other for other in self.users if other is not user])
        unfollow = rng.random() < 0.4
        response = self.call(user, "DELETE" if unfollow else "POST", f"/v1/profiles/{target.id}/follow",
                             "DELETE /v1/profiles/{id}/follow" if unfollow else "POST /v1/profiles/{id}/follow", headers=user.auth())
        kind = "unfollow" if unfollow else "follow"
        if response is not None and 200 <= response.status_code < 300:
            self.write(kind, target.id, user, response, target_id=target.id)
        else:
            self.attempt(kind, target.id, user, target_id=target.id)

    def do_profile(self, user, rng):
        bio = f"Load bio {self.next_number()}"
        response = self.call(user, "PATCH", "/v1/profiles/me", "PATCH /v1/profiles/me", headers=user.auth(), json={"bio": bio})
        if response is not None and 200 <= response.status_code < 300:
            self.write("profile", user.id, user, response, bio=bio)
        else:
            self.attempt("profile", user.id, user, bio=bio)

    def do_login(self, user, rng):
        response = self.call(user, "POST", "/v1/auth/login", "POST /v1/auth/login", json={"email": user.email, "password": PASSWORD})
        if response is not None and response.status_code == 200:
            body = response.json()
            user.session = body.get("session", body)
            user.refreshed_at = now()
            self.write("login", user.session.get("session_id") or user.id, user, response)

    def do_signup(self, user, rng):
        address = f"fault-{self.tag}-new-{uuid.uuid4().hex[:12]}@example.com"
        response = self.call(user, "POST", "/v1/auth/signup", "POST /v1/auth/signup", json={"email": address, "password": PASSWORD})
        if response is not None and response.status_code == 201:
            self.write("signup", response.json()["user"]["id"], user, response, email=address)

    def do_invitation(self, user, rng):
        address = f"fault-{self.tag}-invitee-{uuid.uuid4().hex[:12]}@example.com"
        response = self.call(user, "POST", "/v1/clients", "POST /v1/clients", headers=user.auth(), json={"name": "Invitee", "email": address})
        if response is not None and response.status_code == 201:
            self.write("invitation", response.json()["id"], user, response, email=address)

    def do_workout_log(self, user, rng):
        session_id = rng.choice(user.sessions)
        notes = f"Load log {self.next_number()}"
        day = datetime.date.today()
        body = {"performed_at": f"{day}T07:30:00+00:00", "notes": notes, "sets": [
            {"block": 1, "set": 1, "reps": 10, "weight_kg": 20, "done": True}, {"block": 1, "set": 2, "reps": rng.randint(6, 10), "weight_kg": 20, "done": True}]}
        response = self.call(user, "POST", f"/v1/training/sessions/{session_id}/log", "POST /v1/training/sessions/{id}/log",
                             headers={**user.auth(), "Idempotency-Key": str(uuid.uuid4())}, json=body)
        if response is not None and 200 <= response.status_code < 300:
            self.write("workout_log", session_id, user, response, notes=notes)
        else:
            self.attempt("workout_log", session_id, user, notes=notes)
