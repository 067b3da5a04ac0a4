"""Journeys across the whole stack, through the gateway, with the live stream (`GET /v1/events`)
read as an app reads it.

1. Sign up, confirm the address in the browser page, the profile appears, another user follows:
   the follow's notification arrives on the stream.
2. A coach invites; the client opens the mailed link's page, signs up and accepts; both tokens carry
   the new roles, `client_accepted` reaches the coach's stream, and the coach reads the client's
   7-day trend.
3. A free user hits the source limit, buys with a signed transaction, the gate opens, and
   `entitlement_changed` arrives on the stream.
4. Account deletion: a user with something in every service (a profile and a follow in social, a coach
in invitations, usage in entitlements, meals, a weight, a share link and a diet profile in nutrition)
deletes the account; within seconds no table of any service's schema holds a row that names the user,
checked over every table of every schema as text (tombstones keep only a SHA-256 of the id)."""
import datetime
import json
import os
import queue
import re
import threading
import uuid

import jwt
import requests
from selenium.webdriver.common.by import By

from appstore import Issuer
from conftest import SERVICES
from test_auth import wait_for_mail
from test_invitations import bearer, refresh, roles, sign_up, verify_address
from test_pages import browser, submit_form_with, verified_coach  # noqa: F401 (browser is a fixture)

# Every service's schema, as services.txt lists them: a new service's tables are searched too.
SCHEMAS = SERVICES


def rows_naming(stack, user_id):
    """Every table, in every service's schema, with rows whose text holds `user_id` (any case), and how many."""
    found = {}
    for schema in SCHEMAS:
        tables = stack.psql(schema, f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema}' "
                                    "AND table_type = 'BASE TABLE' ORDER BY 1").split()
        assert tables, f"no tables seen in schema {schema}"
        union = " UNION ALL ".join(
            f"SELECT '{table}' AS t, count(*) AS n FROM {schema}.{table} AS r WHERE r::text ILIKE '%{user_id}%'" for table in tables)
        for line in stack.psql(schema, f"SELECT t || '=' || n FROM ({union}) AS counts WHERE n > 0").splitlines():
            table, count = line.split("=")
            found[f"{schema}.{table}"] = int(count)
    return found


def test_a_deleted_account_leaves_no_row_naming_it_in_any_service(stack):
    gw = stack.gateway
    password = "e2e journey deletion password"
    email = f"e2e-journey-gone-{uuid.uuid4().hex[:10]}@example.com"
    session = sign_up(stack, email, password)
    user = bearer(session)
    user_id = requests.get(f"{gw}/v1/auth/me", headers=user, timeout=10).json()["id"]

    # Social: a profile (from user.registered) and a follow of someone else.
    friend = sign_up(stack, f"e2e-journey-friend-{uuid.uuid4().hex[:10]}@example.com", "e2e journey friend password")
    friend_id = requests.get(f"{gw}/v1/auth/me", headers=bearer(friend), timeout=10).json()["id"]
    stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/me", headers=user, timeout=10).status_code == 200, seconds=30,
                     what="the profile made from user.registered")
    stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/{friend_id}", headers=user, timeout=10).status_code == 200, seconds=30,
                     what="the friend's profile")
    assert requests.post(f"{gw}/v1/profiles/{friend_id}/follow", headers=user, timeout=10).status_code == 200

    # Invitations: a coach invites the user's address, and the user accepts.
    coach = verified_coach(stack)
    created = requests.post(f"{gw}/v1/clients", headers=bearer(coach), json={"name": "Journey Client", "email": email}, timeout=10)
    assert created.status_code == 201, created.text
    invite = [m for m in wait_for_mail(stack, email, 2) if "invited" in m["Subject"]][0]
    code = re.search(r"/invite\?code=([A-Za-z0-9_-]{20,})", invite.get_body(preferencelist=("plain",)).get_content()).group(1)
    session = verify_address(stack, session, email)
    user = bearer(session)
    accepted = requests.post(f"{gw}/v1/invitations/{code}/accept", headers=user, timeout=30)
    assert accepted.status_code == 200, accepted.text

    # Entitlements: usage counted against the free tier.
    acquired = requests.post(f"{gw}/v1/usage/sources/acquire", headers=user, json={"amount": 1}, timeout=10)
    assert acquired.status_code in (200, 201), acquired.text

    # Nutrition: a diet profile, a meal eaten and shared, a weight.
    profile = requests.put(f"{gw}/v1/nutrition/profile", headers=user, json={"diet": "keto", "daily_calorie_goal": 1800, "weight_unit": "kg",
                           "time_zone": "Europe/Paris", "day_starts_at": 0}, timeout=10)
    assert profile.status_code == 200, profile.text
    eaten_at = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20)).isoformat()
    meal = requests.post(f"{gw}/v1/meals", headers=user, json={"name": "Journey omelette", "eaten_at": eaten_at, "items": [
        {"name": "Eggs", "grams": 120, "calories": 180, "protein_g": 15, "carbs_g": 1, "fat_g": 12}]}, timeout=10)
    assert meal.status_code == 201, meal.text
    assert requests.post(f"{gw}/v1/meals/{meal.json()['id']}/consume", headers=user, json={}, timeout=10).status_code == 200
    assert requests.post(f"{gw}/v1/meals/{meal.json()['id']}/share", headers=user, timeout=10).status_code == 201
    assert requests.post(f"{gw}/v1/metrics/weight", headers=user, json={"value": 70.5, "unit": "kg"}, timeout=10).status_code == 201

    before = rows_naming(stack, user_id)
    for schema in SCHEMAS:
        assert any(table.startswith(f"{schema}.") for table in before), f"nothing of the user's in {schema} before deletion: {before}"

    deleted = requests.delete(f"{gw}/v1/auth/account", headers=user, json={"password": password}, timeout=10)
    assert deleted.status_code == 202, deleted.text

    left = {}

    def nothing_left():
        left.clear()
        left.update(rows_naming(stack, user_id))
        return not left
    try:
        stack.wait_until(nothing_left, seconds=20, what="no row naming the deleted user in any schema")
    except AssertionError as error:
        raise AssertionError(f"{error}; rows still naming the user: {left}") from None
    # The friend and the coach are untouched.
    assert requests.get(f"{gw}/v1/profiles/me", headers=bearer(friend), timeout=10).status_code == 200
    assert requests.get(f"{gw}/v1/clients", headers=bearer(coach), timeout=10).status_code == 200


class LiveStream:
    """`GET /v1/events` read on a thread, as an app's SSE client: each message (id, event, data)
    is queued as it arrives; comments (heartbeats) are skipped."""

    def __init__(self, gateway, session):
        self.response = requests.get(f"{gateway}/v1/events", headers={**bearer(session), "Accept": "text/event-stream"},
                                     stream=True, timeout=(5, 60))
        assert self.response.status_code == 200, self.response.text
        assert self.response.headers["Content-Type"].startswith("text/event-stream")
        self.messages = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        message = {}
        try:
            for line in self.response.iter_lines(decode_unicode=True):
                if line == "":
                    if "event" in message or "data" in message:
                        self.messages.put(message)
                    message = {}
                elif not line.startswith(":"):
                    field, _, value = line.partition(":")
                    message[field] = value[1:] if value.startswith(" ") else value
        except Exception:  # the stream closed under the reader
            pass

    def next(self, event, seconds=20, where=lambda data: True):
        """The next message named `event` whose data satisfies `where`; others are passed over."""
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=seconds)
        while True:
            left = (deadline - datetime.datetime.now()).total_seconds()
            assert left > 0, f"no `{event}` on the stream within {seconds}s"
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                continue
            if message.get("event") == event:
                data = json.loads(message["data"])
                if where(data):
                    assert message.get("id"), message
                    return data

    def close(self):
        self.response.close()


def user_id_of(session):
    return jwt.decode(session["access_token"], options={"verify_signature": False})["sub"]


def same(a, b):
    return str(a).lower() == str(b).lower()


def test_a_new_account_confirmed_in_the_page_hears_of_its_first_follower(stack, browser):  # noqa: F811
    gw = stack.gateway
    email = f"e2e-journey-cook-{uuid.uuid4().hex[:10]}@example.com"
    password = "e2e journey cook password"
    cook = sign_up(stack, email, password)
    cook_id = user_id_of(cook)
    url = re.search(r"https?://\S+/verify-email\?token=[A-Za-z0-9_-]+",
                    wait_for_mail(stack, email)[0].get_body(preferencelist=("plain",)).get_content()).group(0)
    browser.get(url)
    browser.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys(password)
    submit_form_with(browser, "password")
    assert "confirmed" in browser.find_element(By.TAG_NAME, "body").text.lower()
    stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/me", headers=bearer(cook), timeout=10).status_code == 200,
                     seconds=30, what="the profile made from user.registered")

    stream = LiveStream(gw, cook)
    try:
        fan = sign_up(stack, f"e2e-journey-fan-{uuid.uuid4().hex[:10]}@example.com", "e2e journey fan password")
        stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/{cook_id}", headers=bearer(fan), timeout=10).status_code == 200,
                         seconds=30, what="the cook's profile, seen by the fan")
        followed = requests.post(f"{gw}/v1/profiles/{cook_id}/follow", headers=bearer(fan), timeout=10)
        assert followed.status_code == 200, followed.text
        notification = stream.next("notification", where=lambda data: data.get("kind") == "follow")
        assert same(notification["actor_id"], user_id_of(fan)) and same(notification["user_id"], cook_id), notification
    finally:
        stream.close()


def test_a_coach_hears_the_client_accept_and_reads_the_clients_week(stack, browser):  # noqa: F811
    gw = stack.gateway
    coach = verified_coach(stack)
    assert "coach" in roles(coach)
    stream = LiveStream(gw, coach)
    try:
        client_email = f"e2e-journey-client2-{uuid.uuid4().hex[:10]}@example.com"
        created = requests.post(f"{gw}/v1/clients", headers=bearer(coach), json={"name": "Journey Client", "email": client_email}, timeout=10)
        assert created.status_code == 201, created.text
        text = wait_for_mail(stack, client_email)[0].get_body(preferencelist=("plain",)).get_content()
        url = re.search(r"https?://\S+/invite\?code=[A-Za-z0-9_-]+", text).group(0)
        code = url.split("code=")[1]
        # The client opens the mailed link's page in a browser, as someone without the app would.
        browser.get(url)
        assert "invited" in browser.find_element(By.TAG_NAME, "body").text.lower()
        client = verify_address(stack, sign_up(stack, client_email, "e2e journey client password"), client_email)
        accepted = requests.post(f"{gw}/v1/invitations/{code}/accept", headers=bearer(client), timeout=30)
        assert accepted.status_code == 200, accepted.text
        heard = stream.next("client_accepted")
        assert same(heard["client_id"], user_id_of(client)) and same(heard["coach_id"], user_id_of(coach)), heard
        client = refresh(stack, client)
        assert "client" in roles(client)
        assert "coach" in roles(refresh(stack, coach))

        profile = requests.put(f"{gw}/v1/nutrition/profile", headers=bearer(client), json={
            "diet": "balanced", "daily_calorie_goal": 2000, "weight_unit": "kg", "time_zone": "UTC", "day_starts_at": 0}, timeout=10)
        assert profile.status_code == 200, profile.text
        eaten_at = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=10)).isoformat()
        meal = requests.post(f"{gw}/v1/meals", headers=bearer(client), json={"name": "Journey lunch", "eaten_at": eaten_at, "items": [
            {"name": "Rice", "grams": 200, "calories": 260, "protein_g": 5, "carbs_g": 56, "fat_g": 1}]}, timeout=10)
        assert meal.status_code == 201, meal.text
        assert requests.post(f"{gw}/v1/meals/{meal.json()['id']}/consume", headers=bearer(client), json={}, timeout=10).status_code == 200
        client_id = user_id_of(client)

        def coachs_view():
            return requests.get(f"{gw}/v1/nutrition/clients/{client_id}/trends?period=7d", headers=bearer(coach), timeout=10)
        # The link reaches nutrition by the same event: wait for it there.
        stack.wait_until(lambda: coachs_view().status_code == 200, seconds=30, what="the coach's view of the client's trend")
        week = coachs_view().json()
        # Summed over the week: ten minutes ago may be yesterday just after midnight.
        assert len(week["days"]) == 7 and sum(day["calories"] or 0 for day in week["days"]) == 260, week
    finally:
        stream.close()


def test_a_purchase_opens_the_gate_and_the_stream_says_so(stack):
    gw = stack.gateway
    issuer = Issuer(os.path.join(stack.dir, "appstore"))
    session = sign_up(stack, f"e2e-journey-buyer-{uuid.uuid4().hex[:10]}@example.com", "e2e journey buyer password")
    user = bearer(session)
    me = requests.get(f"{gw}/v1/entitlements/me", headers=user, timeout=10).json()
    limit = me["limits"]["sources"]["limit"]
    for index in range(limit):
        response = requests.post(f"{gw}/v1/usage/sources/acquire", headers=user, json={"amount": 1}, timeout=10)
        assert response.status_code == 200, response.text
    refused = requests.post(f"{gw}/v1/usage/sources/acquire", headers=user, json={"amount": 1}, timeout=10)
    assert refused.status_code == 403, refused.text

    stream = LiveStream(gw, session)
    try:
        original = str(uuid.uuid4().int % 10**15)
        bought = issuer.transaction(original, token=me["app_account_token"], expires_ms=issuer.now_ms() + 3_600_000)
        purchase = requests.post(f"{gw}/v1/purchases/apple", headers=user, json={"signed_transaction": issuer.sign(bought)}, timeout=10)
        assert purchase.status_code == 200 and purchase.json()["tier"] == "pro", purchase.text
        changed = stream.next("entitlement_changed")
        assert same(changed["user_id"], user_id_of(session)), changed
        assert requests.post(f"{gw}/v1/usage/sources/acquire", headers=user, json={"amount": 1}, timeout=10).status_code == 200
    finally:
        stream.close()
