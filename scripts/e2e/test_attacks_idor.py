"""End-to-end: the IDOR matrix. Every operation of docs/openapi.json with an id in its path (or an id
field in its body) is called by two other users with the ids of a first user's real resources, made
through the API: a coach who is nobody's coach of those (B) and a client of the same coach (B2).
Each answers 404 or 403, and every resource of the first user reads the same after as before.

The operations come from the document: a path parameter or body field that no factory fills and no
exception names fails the test, so a new route is covered or must say why it needs not be."""
import datetime
import json
import os
import re
import subprocess
import uuid

import pytest
import requests

from appstore import Issuer
from conftest import problem
from test_attacks import ROOT, operations, resolve
from test_auth import link_token, mails_to, wait_for_mail
from test_invitations import bearer, refresh

FIXTURE_PHOTO = os.path.join(ROOT, "Tests", "Fixtures", "avatars", "photo.jpg")

# Path parameters that do not name a resource of someone's: each is a word of the caller's own.
NOT_IDS = {
    "role": "a role's name (the admin routes are the admins')",
    "step": "an onboarding step of the caller's own profile",
    "counter": "the name of one of the caller's own usage counters",
    "date": "a day of the caller's own metrics",
    "username": "a public profile found by its username (GET /v1/profiles/by-username)",
    "ndb_number": "a food of the food composition table, the same for everyone (GET /v1/foods/{ndb_number})",
}

# Operations another user may call with the first user's id, by design; not called here.
EXCEPTIONS = {
    "GET /v1/profiles/{id}": "a profile is public to the signed in (a private one shows its details to followers only)",
    "GET /v1/profiles/{id}/avatar": "an avatar is public as its profile is",
    "GET /v1/profiles/{id}/followers": "a public profile's lists are public (a private one's answer 403 to others)",
    "GET /v1/profiles/{id}/following": "as the followers",
    "POST /v1/profiles/{id}/follow": "the caller's own follow of someone (a request, for a private profile)",
    "DELETE /v1/profiles/{id}/follow": "the caller's own unfollow",
    "POST /v1/profiles/{id}/block": "the caller's own block of someone",
    "DELETE /v1/profiles/{id}/block": "the caller's own unblock",
    "POST /v1/profiles/{id}/mute": "the caller's own mute of someone",
    "DELETE /v1/profiles/{id}/mute": "the caller's own unmute",
    "GET /v1/invitations/{code}": "the code is the invitation's secret: its preview is for whoever holds the mailed link",
    "GET /v1/shared/{token}": "a share link is public to whoever holds it (256 random bits)",
    "GET /v1/shared/{token}/card.png": "the share link's card, as the link",
    "GET /v1/shared/{token}/photo": "the share link's photo, as the link",
    "GET /shared/{token}": "the share link's page, as the link",
}

# Operations that refuse another user with another status than 404 or 403, and why that is no leak.
OTHER_REFUSALS = {
    "POST /v1/invitations/{code}/accept": ({409}, "the code is the invitation's secret, looked up first; another account is then "
                                           "409 email_mismatch (role_conflict for a coach)"),
}

# Body fields that are a mailed secret: holding it is the proof.
BODY_SECRETS = {
    "POST /v1/auth/password/reset token": "the reset link's 256 random bits: whoever holds the mail sets the password",
}

# Body fields that hold an id, and how each is tried: the attacker's own resource in the path, the
# first user's id in the body.
BODY_IDS = {
    "POST /v1/auth/email/verify token",
    "POST /v1/notifications/read ids",
    "POST /v1/spaces/{id}/members user_id",
    "POST /v1/spaces/{id}/transfer user_id",
    "POST /v1/training/clients/{client_id}/assignments workout_id",
    "POST /v1/usage/{counter}/release acquisition_ids",
    "POST /v1/workouts blocks[].exercise_id",
    "PUT /v1/workouts/{id} blocks[].exercise_id",
}


def is_id(name, schema):
    return schema.get("format") == "uuid" or name in ("id", "code", "token") or name.endswith("_id")


def id_fields(doc, schema, prefix=""):
    """The id fields of a request body schema, as `field`, `list[].field`."""
    schema = resolve(doc, schema)
    found = []
    for key in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(key, []):
            found += id_fields(doc, sub, prefix)
    for name, prop in schema.get("properties", {}).items():
        prop = resolve(doc, prop)
        items = resolve(doc, prop.get("items", {}))
        if is_id(name, prop) or (prop.get("type") == "array" and (items.get("format") == "uuid" or name.endswith("_ids") or name == "ids")):
            found.append(prefix + name)
        if prop.get("type") == "array" or "items" in prop:
            found += id_fields(doc, items, prefix + name + "[].")
        elif "properties" in prop:
            found += id_fields(doc, prop, prefix + name + ".")
    return found


def matrix(doc):
    """(operation, path parameters that are ids) for every operation with one, and the body id
    fields, as `METHOD path field`; unknown path parameters are named in `unknown`."""
    with_ids, body_ids, unknown = [], set(), []
    for method, path, op, params in operations(doc):
        ids = []
        for param in params:
            if param["in"] != "path":
                continue
            if param["name"] in NOT_IDS:
                continue
            if is_id(param["name"], resolve(doc, param.get("schema", {}))):
                ids.append(param["name"])
            else:
                unknown.append(f"{method} {path} {{{param['name']}}}")
        if ids:
            with_ids.append((method, path))
        content = resolve(doc, op.get("requestBody", {})).get("content", {})
        if "application/json" in content:
            for field in id_fields(doc, content["application/json"].get("schema", {})):
                body_ids.add(f"{method} {path} {field}")
    return with_ids, body_ids, unknown


# -- The world: real resources of A's, made through the API ----------------------------------------

def account(stack, tag, verified=True, coach=False):
    gw = stack.gateway
    email = f"e2e-idor-{tag}-{uuid.uuid4().hex[:10]}@example.com"
    password = f"e2e idor {tag} password"
    made = requests.post(f"{gw}/v1/auth/signup", json={"email": email, "password": password}, timeout=10)
    assert made.status_code == 201, made.text
    user = {"id": made.json()["user"]["id"], "email": email, "password": password, **made.json()["session"]}
    if verified:
        verify = requests.post(f"{gw}/v1/auth/email/verify", headers=bearer(user), json={"token": link_token(wait_for_mail(stack, email)[0])}, timeout=10)
        assert verify.status_code == 200, verify.text
    if coach:
        assert requests.post(f"{gw}/v1/auth/roles/coach", headers=bearer(user), timeout=10).status_code == 200
    if verified or coach:
        user.update(refresh(stack, user))
    return user


def ok(response, status=(200, 201, 204)):
    assert response.status_code in (status if isinstance(status, tuple) else (status,)), f"{response.request.method} {response.url}: {response.status_code} {response.text}"
    return response.json() if response.content and response.headers.get("Content-Type", "").startswith("application/json") else None


def invite(stack, coach, email):
    """A roster entry of `coach` for `email`, and the code its mail carries."""
    entry = ok(requests.post(f"{stack.gateway}/v1/clients", headers=bearer(coach), json={"name": "Idor Client", "email": email}, timeout=10), 201)
    stack.wait_until(lambda: [m for m in mails_to(stack, email) if "invited" in m["Subject"]], seconds=30, what=f"the invitation to {email}")
    mail = [m for m in mails_to(stack, email) if "invited" in m["Subject"]][-1]
    code = re.search(r"/invite\?code=([A-Za-z0-9_-]{20,})", mail.get_body(preferencelist=("plain",)).get_content()).group(1)
    return entry, code


def admin(stack):
    """An admin made with `auth create-admin`, as an operator makes the first one, signed in."""
    with open(os.path.join(stack.dir, "bin-path")) as f:
        binary = os.path.join(f.read().strip(), "auth")
    email, password = f"e2e-idor-admin-{uuid.uuid4().hex[:10]}@example.com", "e2e idor admin password"
    port = stack.service_urls["auth"].rsplit(":", 1)[1]
    env = {**os.environ, "APP_ENV": "development", "HTTP_HOST": "127.0.0.1", "HTTP_PORT": port,
           "DATABASE_URL": f"postgres://auth:auth@127.0.0.1:{stack.pg_port}/foodbackend", "REDIS_URL": f"redis://127.0.0.1:{stack.redis_port}",
           "JWT_SIGNING_KEY": os.path.join(stack.dir, "jwt-signing-key.pem"), "JWT_ISSUER": stack.gateway,
           "APP_BASE_URL": stack.gateway, "JWKS_URL": f"{stack.service_urls['auth']}/.well-known/jwks.json",
           "SMTP_URL": f"smtp://127.0.0.1:{os.environ['STACK_SMTP_PORT']}", "ADMIN_PASSWORD": password}
    done = subprocess.run([binary, "create-admin", email], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    login = ok(requests.post(f"{stack.gateway}/v1/auth/login", json={"email": email, "password": password}, timeout=10))
    return {"id": login["user"]["id"], **login["session"]}


class World:
    """A, a client of coach C, with something in every service, and AC, a coach (a coach is
    nobody's client), with a library, a workout and a roster: the first user's two sides. B, a
    coach of their own; B2, another client of C; P, a private profile A asked to follow."""

    def __init__(self, stack):
        gw = self.gw = stack.gateway
        self.stack = stack
        today = datetime.datetime.now(datetime.timezone.utc).date()
        self.today = str(today)
        c = self.c = account(stack, "coach-c", coach=True)
        a = self.a = account(stack, "a")
        ac = self.ac = account(stack, "a-coach", coach=True)
        b = self.b = account(stack, "b", coach=True)
        b2 = self.b2 = account(stack, "b2")
        p = self.p = account(stack, "p", verified=False)
        self.p_verify_token = link_token(wait_for_mail(stack, p["email"])[0])

        # C plans a week for A before A accepts; A and B2 accept C's invitations.
        library = ok(requests.get(f"{gw}/v1/exercises", params={"q": "push ups"}, headers=bearer(c), timeout=10))["items"][0]
        self.library_exercise = library["id"]
        c_workout = ok(requests.post(f"{gw}/v1/workouts", headers=bearer(c), timeout=10, json={
            "name": "C's plan", "blocks": [{"exercise_id": library["id"], "sets": [{"reps": 10}]}]}), 201)
        a_entry, a_code = invite(stack, c, a["email"])
        planned = ok(requests.post(f"{gw}/v1/training/clients/{a_entry['id']}/assignments", headers=bearer(c),
                                   json={"workout_id": c_workout["id"], "dates": [self.today]}, timeout=10), 201)
        self.session_id = planned["items"][0]["id"]
        b2_entry, b2_code = invite(stack, c, b2["email"])
        for user, code in ((a, a_code), (b2, b2_code)):
            ok(requests.post(f"{gw}/v1/invitations/{code}/accept", headers=bearer(user), timeout=30))
            user.update(refresh(stack, user))
        stack.wait_until(lambda: requests.get(f"{gw}/v1/training/sessions/{self.session_id}", headers=bearer(a), timeout=10).status_code == 200,
                         seconds=30, what="C's session given to A on the acceptance")
        stack.wait_until(lambda: requests.get(f"{gw}/v1/nutrition/clients/{a['id']}/meals", headers=bearer(c), timeout=10).status_code == 200,
                         seconds=30, what="C linked to A's diary")
        # A logs the session, so its log and comments are there to be touched.
        ok(requests.post(f"{gw}/v1/training/sessions/{self.session_id}/comments", headers=bearer(a), json={"text": "Ready"}, timeout=10), 201)

        # AC: an exercise of their own, a workout, a roster entry with its invitation.
        self.exercise = ok(requests.post(f"{gw}/v1/exercises", headers=bearer(ac), json={"name": f"Idor press {uuid.uuid4().hex[:6]}"}, timeout=10), 201)
        self.workout = ok(requests.post(f"{gw}/v1/workouts", headers=bearer(ac), timeout=10, json={
            "name": "AC's plan", "blocks": [{"exercise_id": self.exercise["id"], "sets": [{"reps": 5, "weight_kg": 40}]}]}), 201)
        self.entry, self.code = invite(stack, ac, f"e2e-idor-x-{uuid.uuid4().hex[:10]}@example.com")
        ok(requests.post(f"{gw}/v1/training/clients/{self.entry['id']}/assignments", headers=bearer(ac),
                         json={"workout_id": self.workout["id"], "dates": [self.today]}, timeout=10), 201)

        # B, as a coach: a workout and a roster entry of B's own (for the body ids).
        self.b_workout = ok(requests.post(f"{gw}/v1/workouts", headers=bearer(b), timeout=10, json={
            "name": "B's plan", "blocks": [{"exercise_id": library["id"], "sets": [{"reps": 10}]}]}), 201)
        self.b_entry, _ = invite(stack, b, f"e2e-idor-y-{uuid.uuid4().hex[:10]}@example.com")
        self.b_space = ok(requests.post(f"{gw}/v1/spaces", headers=bearer(b), json={"name": "B's lab"}, timeout=10), 201)

        # Nutrition: a meal with a photo and a share link, a weight, a ketone reading.
        now = datetime.datetime.now(datetime.timezone.utc)
        self.meal_body = {"name": "A's lunch", "eaten_at": (now - datetime.timedelta(minutes=5)).isoformat(), "items": [
            {"name": "Salmon", "grams": 150, "calories": 300, "protein_g": 30, "carbs_g": 0, "fat_g": 20}]}
        self.meal = ok(requests.post(f"{gw}/v1/meals", headers=bearer(a), json=self.meal_body, timeout=10), 201)
        with open(FIXTURE_PHOTO, "rb") as f:
            self.photo = f.read()
        ok(requests.post(f"{gw}/v1/meals/{self.meal['id']}/photo", headers={**bearer(a), "Content-Type": "image/jpeg"}, data=self.photo, timeout=30))
        self.share = ok(requests.post(f"{gw}/v1/meals/{self.meal['id']}/share", headers=bearer(a), timeout=30), 201)
        ok(requests.post(f"{gw}/v1/metrics/weight", headers=bearer(a), json={"value": 70, "unit": "kg"}, timeout=10), 201)

        # Social: A asks to follow private P, follows C; C follows A (a notification for A).
        ok(requests.patch(f"{gw}/v1/profiles/me", headers=bearer(p), json={"is_private": True}, timeout=10))
        for target in (p, c):
            stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/{target['id']}", headers=bearer(a), timeout=10).status_code == 200,
                             seconds=20, what="the profiles A follows")
        assert ok(requests.post(f"{gw}/v1/profiles/{p['id']}/follow", headers=bearer(a), timeout=10))["state"] == "requested"
        assert ok(requests.post(f"{gw}/v1/profiles/{c['id']}/follow", headers=bearer(a), timeout=10))["state"] == "following"
        stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/{a['id']}", headers=bearer(c), timeout=10).status_code == 200,
                         seconds=20, what="A's profile")
        ok(requests.post(f"{gw}/v1/profiles/{a['id']}/follow", headers=bearer(c), timeout=10))
        stack.wait_until(lambda: requests.get(f"{gw}/v1/notifications", headers=bearer(a), timeout=10).json()["items"], seconds=20,
                         what="a notification for A")
        self.notification = requests.get(f"{gw}/v1/notifications", headers=bearer(a), timeout=10).json()["items"][0]["id"]

        # Auth: A's session. Entitlements: usage, a purchase, an admin's grant of team, a space
        # with C as a member (by C's proven address, accepted).
        self.a_session = ok(requests.get(f"{gw}/v1/auth/sessions", headers=bearer(a), timeout=10))["items"][0]["id"]
        self.acquisition = ok(requests.post(f"{gw}/v1/usage/sources/acquire", headers=bearer(a), json={"amount": 1}, timeout=10))["acquisition_id"]
        issuer = Issuer(os.path.join(stack.dir, "appstore"))
        token = ok(requests.get(f"{gw}/v1/entitlements/me", headers=bearer(a), timeout=10))["app_account_token"]
        self.signed_purchase = issuer.sign(issuer.transaction(str(uuid.uuid4().int % 10**15), token=token))
        ok(requests.post(f"{gw}/v1/purchases/apple", headers=bearer(a), json={"signed_transaction": self.signed_purchase}, timeout=10))
        staff = admin(stack)
        until = (now + datetime.timedelta(days=30)).isoformat()
        self.grant = ok(requests.post(f"{gw}/v1/admin/entitlements/{a['id']}/grants", headers=bearer(staff),
                                      json={"tier": "team", "until": until, "reason": "IDOR matrix"}, timeout=10), 201)["id"]
        self.space = ok(requests.post(f"{gw}/v1/spaces", headers=bearer(a), json={"name": "A's lab"}, timeout=10), 201)
        ok(requests.post(f"{gw}/v1/spaces/{self.space['id']}/members", headers=bearer(a), json={"email": c["email"], "permission": "editor"}, timeout=10), 201)
        stack.wait_until(lambda: requests.post(f"{gw}/v1/spaces/{self.space['id']}/invitation/accept", headers=bearer(c), timeout=10).status_code == 200,
                         seconds=20, what="C accepting A's space invitation")

    def ids(self):
        """A's id for each path prefix that ends in a parameter: a new route under one of these is
        covered at once; a new kind of id needs a line here."""
        a = self.a
        return {
            "/v1/admin/entitlements/{user_id}": a["id"],
            "/v1/admin/entitlements/{user_id}/grants/{grant_id}": self.grant,
            "/v1/admin/users/{id}": a["id"],
            "/v1/auth/sessions/{id}": self.a_session,
            "/v1/clients/{id}": self.entry["id"],
            "/v1/exercises/{id}": self.exercise["id"],
            "/v1/follow-requests/{id}": a["id"],
            "/v1/invitations/{code}": self.code,
            "/v1/meals/{id}": self.meal["id"],
            "/v1/moderation/profiles/{id}": a["id"],
            "/v1/moderation/users/{id}": a["id"],
            "/v1/nutrition/clients/{client_user_id}": a["id"],
            "/v1/profiles/me/followers/{id}": a["id"],
            "/v1/profiles/{id}": a["id"],
            "/v1/shared/{token}": self.share["token"],
            "/shared/{token}": self.share["token"],
            "/v1/spaces/{id}": self.space["id"],
            "/v1/spaces/{id}/members/{user_id}": self.c["id"],
            "/v1/training/clients/{client_id}": self.entry["id"],
            "/v1/training/sessions/{id}": self.session_id,
            "/v1/workouts/{id}": self.workout["id"],
        }

    def fill(self, path):
        ids = self.ids()
        filled, missing = path, []
        for match in re.finditer(r"\{([^}]+)\}", path):
            name = match.group(1)
            if name in NOT_IDS:
                filled = filled.replace(match.group(0), {"role": "coach", "step": "name", "counter": "sources", "date": self.today}.get(name, "x"))
                continue
            prefix = path[:match.end()]
            if prefix not in ids:
                missing.append(prefix)
                continue
            filled = filled.replace(match.group(0), ids[prefix])
        return filled, missing

    def etag(self, path):
        owner = self.a if path.startswith("/v1/meals") else self.ac
        return requests.get(f"{self.gw}{path}", headers=bearer(owner), timeout=10).headers.get("ETag", '"x"')

    def request(self, method, path):
        """What an attacker sends: a body that would pass validation (so only ownership can refuse
        it), and A's current ETag where If-Match is asked for (as if the attacker had it)."""
        a_path, _ = self.fill(path)
        headers, body, data = {}, None, None
        if re.fullmatch(r"/v1/(exercises|workouts|meals)/[^/]+", a_path) and method in ("PUT", "PATCH", "DELETE"):
            headers["If-Match"] = self.etag(a_path)
        key = f"{method} {path}"
        bodies = {
            "POST /v1/admin/entitlements/{user_id}/grants": {"tier": "team", "until": "2030-01-01T00:00:00Z", "reason": "mine now"},
            "PATCH /v1/clients/{id}": {"name": "Taken"},
            "PATCH /v1/exercises/{id}": {"name": "Taken"},
            "PUT /v1/meals/{id}": {**self.meal_body, "name": "Taken"},
            "POST /v1/meals/{id}/consume": {},
            "POST /v1/moderation/users/{id}/warnings": {"reason": "spam", "message": "Taken"},
            "PATCH /v1/spaces/{id}": {"name": "Taken"},
            "POST /v1/spaces/{id}/members": {"email": self.b["email"], "permission": "editor"},
            "PATCH /v1/spaces/{id}/members/{user_id}": {"permission": "viewer"},
            "POST /v1/spaces/{id}/transfer": {"user_id": self.c["id"]},
            "POST /v1/training/clients/{client_id}/assignments": {"workout_id": self.b_workout["id"], "dates": [self.today]},
            "POST /v1/training/sessions/{id}/comments": {"text": "Taken"},
            "POST /v1/training/sessions/{id}/log": {"performed_at": f"{self.today}T07:00:00+00:00", "sets": [{"block": 1, "set": 1, "reps": 10, "done": True}]},
            "POST /v1/training/sessions/{id}/skip": {"reason": "Taken"},
            "POST /v1/invitations/{code}/accept": {"switch_coach": True},
            "PUT /v1/workouts/{id}": {"name": "Taken", "blocks": [{"exercise_id": self.library_exercise, "sets": [{"reps": 1}]}]},
        }
        if key == "POST /v1/meals/{id}/photo":
            headers["Content-Type"] = "image/jpeg"
            data = self.photo
        elif key in bodies:
            body = bodies[key]
        a_path += {"GET /v1/spaces/{id}/permissions": "?action=view"}.get(key, "")
        return a_path, headers, body, data

    def snapshot(self):
        """Everything of A's (and what A did) as A, C and P read it."""
        gw, a, ac = self.gw, self.a, self.ac

        def get(user, path):
            response = requests.get(gw + path, headers=bearer(user), timeout=10)
            body = response.json() if response.headers.get("Content-Type", "").startswith("application/json") else response.content
            return response.status_code, response.headers.get("ETag"), volatile_free(body)
        return {
            "meal": get(a, f"/v1/meals/{self.meal['id']}"),
            "meal photo": get(a, f"/v1/meals/{self.meal['id']}/photo"),
            "exercise": get(ac, f"/v1/exercises/{self.exercise['id']}"),
            "workout": get(ac, f"/v1/workouts/{self.workout['id']}"),
            "roster entry": get(ac, f"/v1/clients/{self.entry['id']}"),
            "planned client": get(ac, f"/v1/training/clients/{self.entry['id']}"),
            "invitation": get(ac, f"/v1/invitations/{self.code}"),
            "session": get(a, f"/v1/training/sessions/{self.session_id}"),
            "space": get(a, f"/v1/spaces/{self.space['id']}"),
            "space members": get(a, f"/v1/spaces/{self.space['id']}/members"),
            "entitlement": get(a, "/v1/entitlements/me"),
            "sessions": get(a, "/v1/auth/sessions"),
            "account": get(a, "/v1/auth/me"),
            "profile": get(a, "/v1/profiles/me"),
            "notifications": get(a, "/v1/notifications"),
            "P's requests": get(self.p, "/v1/follow-requests"),
            "P's account": get(self.p, "/v1/auth/me"),
            "C's followers": get(self.c, f"/v1/profiles/{self.c['id']}/followers"),
            "C's view of A's meals": get(self.c, f"/v1/nutrition/clients/{a['id']}/meals"),
            "A's weights": get(a, "/v1/metrics/weight?days=7"),
        }


def volatile_free(body):
    """The body without what changes by itself between two reads (a session's last use)."""
    if isinstance(body, dict):
        return {k: volatile_free(v) for k, v in body.items() if k not in ("last_used_at", "request_id")}
    if isinstance(body, list):
        return [volatile_free(v) for v in body]
    return body


@pytest.fixture(scope="module")
def world(stack):
    return World(stack)


def test_the_matrix_covers_every_operation_with_an_id(world):
    with_ids, body_ids, unknown = matrix(json.load(open(os.path.join(ROOT, "docs", "openapi.json"))))
    assert not unknown, f"path parameters neither an id nor in NOT_IDS: {unknown}"
    uncovered = [f"{method} {path}: no id for {missing}" for method, path in with_ids
                 if f"{method} {path}" not in EXCEPTIONS for missing in [world.fill(path)[1]] if missing]
    assert not uncovered, "operations with an id that no factory fills and no exception names:\n  " + "\n  ".join(uncovered)
    body_ids -= set(BODY_SECRETS)
    assert body_ids == BODY_IDS, f"body id fields not tried: {sorted(body_ids - BODY_IDS)}; tried but gone: {sorted(BODY_IDS - body_ids)}"
    assert len(with_ids) > 60


def test_another_user_gets_404_or_403_for_every_id_of_the_first(world):
    gw = world.gw
    with_ids, _, _ = matrix(json.load(open(os.path.join(ROOT, "docs", "openapi.json"))))
    before = world.snapshot()
    wrong, called = {}, 0
    # Reads first, then writes, deletions last: a deletion let through would hide what follows.
    order = {"GET": 0, "POST": 1, "PUT": 1, "PATCH": 1, "DELETE": 2}
    for method, path in sorted(with_ids, key=lambda op: (order[op[0]], op[1])):
        if f"{method} {path}" in EXCEPTIONS:
            continue
        a_path, headers, body, data = world.request(method, path)
        for name, attacker in (("B", world.b), ("B2", world.b2)):
            response = requests.request(method, gw + a_path, headers={**bearer(attacker), **headers}, json=body, data=data, timeout=30)
            called += 1
            expected = {403, 404} | OTHER_REFUSALS.get(f"{method} {path}", (set(), ""))[0]
            if response.status_code not in expected or response.headers.get("Content-Type") != "application/problem+json":
                wrong[f"{name}: {method} {path}"] = f"{response.status_code} {response.text[:160]}"
    assert not wrong, f"{len(wrong)} of {called} calls with A's ids were not 404 or 403:\n  " + "\n  ".join(f"{k}: {v}" for k, v in sorted(wrong.items()))

    # The body ids: A's id in a request about the attacker's own things.
    b = bearer(world.b)
    tries = {
        "POST /v1/auth/email/verify token": requests.post(f"{gw}/v1/auth/email/verify", headers=b, json={"token": world.p_verify_token}, timeout=10),
        "POST /v1/notifications/read ids": requests.post(f"{gw}/v1/notifications/read", headers=b, json={"ids": [world.notification]}, timeout=10),
        "POST /v1/spaces/{id}/members user_id": requests.post(f"{gw}/v1/spaces/{world.b_space['id']}/members", headers=b,
                                                              json={"user_id": world.a["id"], "permission": "viewer"}, timeout=10),
        "POST /v1/spaces/{id}/transfer user_id": requests.post(f"{gw}/v1/spaces/{world.b_space['id']}/transfer", headers=b,
                                                               json={"user_id": world.a["id"]}, timeout=10),
        "POST /v1/training/clients/{client_id}/assignments workout_id": requests.post(
            f"{gw}/v1/training/clients/{world.b_entry['id']}/assignments", headers=b, json={"workout_id": world.workout["id"], "dates": [world.today]}, timeout=10),
        "POST /v1/usage/{counter}/release acquisition_ids": requests.post(f"{gw}/v1/usage/sources/release", headers=b,
                                                                          json={"acquisition_ids": [world.acquisition]}, timeout=10),
        "POST /v1/workouts blocks[].exercise_id": requests.post(f"{gw}/v1/workouts", headers=b, json={
            "name": "B's copy", "blocks": [{"exercise_id": world.exercise["id"], "sets": [{"reps": 1}]}]}, timeout=10),
        "PUT /v1/workouts/{id} blocks[].exercise_id": requests.put(f"{gw}/v1/workouts/{world.b_workout['id']}", headers={
            **b, "If-Match": requests.get(f"{gw}/v1/workouts/{world.b_workout['id']}", headers=b, timeout=10).headers["ETag"]}, json={
            "name": "B's copy", "blocks": [{"exercise_id": world.exercise["id"], "sets": [{"reps": 1}]}]}, timeout=10),
    }
    # Two act only on the caller's own (A's ids are left out, and A's reads below show it).
    quiet = {"POST /v1/notifications/read ids", "POST /v1/usage/{counter}/release acquisition_ids"}
    wrong = {}
    for what, response in tries.items():
        expected = (200, 204) if what in quiet else (400, 401, 403, 404, 422) if "exercise_id" in what else (401, 403, 404)
        if response.status_code not in expected:
            wrong[what] = f"{response.status_code} {response.text[:160]}"
    assert not wrong, wrong
    # Another coach's exercise is refused as one that does not exist.
    unknown = requests.post(f"{gw}/v1/workouts", headers=b, json={"name": "B's copy", "blocks": [{"exercise_id": str(uuid.uuid4()), "sets": [{"reps": 1}]}]},
                            timeout=10)
    for what in ("POST /v1/workouts blocks[].exercise_id", "PUT /v1/workouts/{id} blocks[].exercise_id"):
        assert (tries[what].status_code, problem(tries[what])["errors"]) == (unknown.status_code, problem(unknown)["errors"]), tries[what].text
    assert tries["POST /v1/usage/{counter}/release acquisition_ids"].json()["released"] == []

    # B presents A's signed purchase: it stays A's.
    taken = requests.post(f"{gw}/v1/purchases/apple", headers=b, json={"signed_transaction": world.signed_purchase}, timeout=10)
    assert taken.status_code == 409 and problem(taken)["code"] == "purchase_owned_elsewhere", taken.text
    restored = requests.post(f"{gw}/v1/purchases/apple/restore", headers=b, json={"signed_transactions": [world.signed_purchase]}, timeout=10)
    assert restored.status_code == 409 and problem(restored)["code"] == "purchase_owned_elsewhere", restored.text

    after = world.snapshot()
    changed = {what: (before[what], after[what]) for what in before if before[what] != after[what]}
    assert not changed, "A's things changed under the other users' calls:\n" + "\n".join(f"  {k}:\n    before {v[0]}\n    after  {v[1]}" for k, v in changed.items())
    # And the share link still opens for whoever holds it.
    assert requests.get(f"{gw}/v1/shared/{world.share['token']}", timeout=10).status_code == 200
