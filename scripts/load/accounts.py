"""The simulated users' accounts, made through the gateway as the apps make them, before a load run
measures anything (none of this is counted in its figures).

Usage: accounts.py FILE USERS
Makes FILE hold at least USERS accounts (a run that finds some there already makes only the missing
ones), then refreshes every session so each starts the run with a fresh access token (they last 15
minutes; a capacity search spans more). One in twenty accounts is a coach with two clients linked
through the real invitation flow, as scripts/e2e/test_invitations.py and test_training.py link
them: the coach proves the address from its mailed link and takes the role; adds each client, which
mails the invitation; the client signs up with the invited address, proves it from its own mail and
accepts the mailed code; the coach plans a workout from the library on the client's yesterday, today
and tomorrow. The rest sign up and use the app alone. The mail comes from the stack's SMTP sink
($STACK_DIR/mail). Profiles (social), diet profiles (nutrition) and the coach's view of each client
are made from events, so this waits until every one of them answers before it returns.
"""
import concurrent.futures
import datetime
import email
import email.policy
import glob
import json
import os
import re
import sys
import threading
import time
import uuid

import requests

GATEWAY = f"http://127.0.0.1:{os.environ['STACK_GATEWAY_PORT']}"
MAIL_DIR = os.path.join(os.environ["STACK_DIR"], "mail")
PASSWORD = "load run password 7"
CLIENTS_PER_COACH = 2
# Sign-up hashes the password with bcrypt on auth's thread pool: more parallel sign-ups than cores
# only queue there.
PARALLEL = 8
http = threading.local()


def session():
    if not hasattr(http, "session"):
        http.session = requests.Session()
    return http.session


def call(method, path, token=None, expect=(200,), **kwargs):
    headers = kwargs.pop("headers", {})
    if token:
        headers["Authorization"] = f"Bearer {token}"
    for attempt in range(5):
        response = session().request(method, GATEWAY + path, headers=headers, timeout=30, **kwargs)
        if response.status_code in expect:
            return response
        if response.status_code in (429, 502, 503, 504) and attempt < 4:
            time.sleep(1 + attempt)
            continue
        raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")


class Mailbox:
    """The sink's messages by recipient, read once each."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = set()
        self.by_address = {}

    def scan(self):
        with self.lock:
            for path in sorted(glob.glob(os.path.join(MAIL_DIR, "*.eml"))):
                if path in self.seen:
                    continue
                self.seen.add(path)
                with open(path, "rb") as f:
                    message = email.message_from_binary_file(f, policy=email.policy.default)
                text = message.get_body(preferencelist=("plain",)).get_content()
                for address in (message["To"] or "").lower().replace(",", " ").split():
                    address = address.strip("<>")
                    self.by_address.setdefault(address, []).append((message["Subject"] or "", text))

    def wait(self, address, subject_has, seconds=60):
        deadline = time.time() + seconds
        while time.time() < deadline:
            self.scan()
            for subject, text in self.by_address.get(address.lower(), []):
                if subject_has in subject.lower():
                    return text
            time.sleep(0.2)
        raise RuntimeError(f"no mail '{subject_has}' to {address} within {seconds}s")


MAIL = Mailbox()


def sign_up(kind, address=None):
    address = address or f"load-{kind}-{uuid.uuid4().hex[:12]}@example.com"
    body = call("POST", "/v1/auth/signup", json={"email": address, "password": PASSWORD}, expect=(201,)).json()
    return {"kind": kind, "email": address, "user_id": body["user"]["id"], "session": body["session"]}


def refreshed(account):
    try:
        account["session"] = call("POST", "/v1/auth/token/refresh", json={"refresh_token": account["session"]["refresh_token"]}).json()
    except RuntimeError:  # a refresh token already used (a run cut short): sign in again
        account["session"] = call("POST", "/v1/auth/login", json={"email": account["email"], "password": PASSWORD}).json()["session"]
    return account


def verify(account):
    text = MAIL.wait(account["email"], "confirm")
    token = re.search(r"token=([A-Za-z0-9_-]{20,})", text).group(1)
    call("POST", "/v1/auth/email/verify", account["session"]["access_token"], json={"token": token})


def coach_with_clients():
    coach = sign_up("coach")
    verify(coach)
    call("POST", "/v1/auth/roles/coach", coach["session"]["access_token"])
    refreshed(coach)
    token = coach["session"]["access_token"]
    exercise = call("GET", "/v1/exercises?q=squat", token).json()["items"][0]
    workout = call("POST", "/v1/workouts", token, expect=(201,), json={"name": "Load week", "blocks": [
        {"exercise_id": exercise["id"], "sets": [{"reps": 8, "weight_kg": 40}, {"reps": 8, "weight_kg": 40}]}]}).json()
    today = datetime.datetime.now(datetime.timezone.utc).date()
    dates = [str(today + datetime.timedelta(days=n)) for n in (-1, 0, 1)]
    clients = []
    for index in range(CLIENTS_PER_COACH):
        address = f"load-client-{uuid.uuid4().hex[:12]}@example.com"
        entry = call("POST", "/v1/clients", token, expect=(201,), json={"name": f"Load Client {index + 1}", "email": address}).json()
        planned = call("POST", f"/v1/training/clients/{entry['id']}/assignments", token, expect=(201,),
                       json={"workout_id": workout["id"], "dates": dates}).json()["items"]
        code = re.search(r"/invite\?code=([A-Za-z0-9_-]{20,})", MAIL.wait(address, "invited")).group(1)
        client = sign_up("client", address)
        verify(client)
        refreshed(client)
        call("POST", f"/v1/invitations/{code}/accept", client["session"]["access_token"])
        refreshed(client)
        client.update(coach_id=coach["user_id"], entry_id=entry["id"], training_sessions=[s["id"] for s in planned])
        clients.append(client)
    coach.update(clients=[c["user_id"] for c in clients], entries=[c["entry_id"] for c in clients], workout_id=workout["id"])
    return [coach] + clients


def wait_until(what, condition, seconds=90):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not hold within {seconds}s")


def ready(account):
    """Every part the load touches answers for this account: what events make has been made."""
    token = account["session"]["access_token"]
    wait_until(f"{account['email']}'s profile", lambda: session().get(f"{GATEWAY}/v1/profiles/me", headers={"Authorization": f"Bearer {token}"},
                                                                      timeout=10).status_code == 200)
    for client in account.get("clients", []):
        wait_until(f"the coach's view of {client}",
                   lambda: session().get(f"{GATEWAY}/v1/nutrition/clients/{client}/meals", headers={"Authorization": f"Bearer {token}"},
                                         timeout=10).status_code == 200)
    if account["kind"] == "client":
        wait_until(f"{account['email']}'s planned sessions",
                   lambda: len(session().get(f"{GATEWAY}/v1/training/today", headers={"Authorization": f"Bearer {token}"},
                                             timeout=10).json().get("items", [])) > 0)


def main():
    path, users = sys.argv[1], int(sys.argv[2])
    accounts = json.load(open(path)) if os.path.exists(path) else []
    coaches_wanted = max(1, round(users / 20))
    have_coaches = sum(1 for a in accounts if a["kind"] == "coach")
    have_plain = sum(1 for a in accounts if a["kind"] == "plain")
    plain_wanted = max(0, users - coaches_wanted * (1 + CLIENTS_PER_COACH))
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        accounts = list(pool.map(refreshed, accounts))
        jobs = [pool.submit(coach_with_clients) for _ in range(coaches_wanted - have_coaches)]
        jobs += [pool.submit(sign_up, "plain") for _ in range(plain_wanted - have_plain)]
        for job in jobs:
            made = job.result()
            accounts.extend(made if isinstance(made, list) else [made])
        list(pool.map(ready, accounts))
    with open(path + ".part", "w") as f:
        json.dump(accounts, f)
    os.replace(path + ".part", path)
    kinds = {k: sum(1 for a in accounts if a["kind"] == k) for k in ("plain", "coach", "client")}
    print(f"accounts: {len(accounts)} ({kinds['plain']} on their own, {kinds['coach']} coaches, {kinds['client']} clients), "
          f"ready in {time.time() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
