"""Journeys across the whole stack, through the gateway.

Account deletion: a user with something in every service (a profile and a follow in social, a coach
in invitations, usage in entitlements, meals, a weight, a share link and a diet profile in nutrition)
deletes the account; within seconds no table of any service's schema holds a row that names the user,
checked over every table of every schema as text (tombstones keep only a SHA-256 of the id)."""
import datetime
import re
import uuid

import requests

from test_auth import link_token, wait_for_mail
from test_invitations import bearer, refresh, sign_up

SCHEMAS = ["auth", "social", "invitations", "entitlements", "nutrition"]


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
    coach_email = f"e2e-journey-coach-{uuid.uuid4().hex[:10]}@example.com"
    coach = sign_up(stack, coach_email, "e2e journey coach password")
    verified = requests.post(f"{gw}/v1/auth/email/verify", headers=bearer(coach),
                             json={"token": link_token(wait_for_mail(stack, coach_email)[0])}, timeout=10)
    assert verified.status_code == 200, verified.text
    assert requests.post(f"{gw}/v1/auth/roles/coach", headers=bearer(coach), timeout=10).status_code == 200
    coach = refresh(stack, coach)
    created = requests.post(f"{gw}/v1/clients", headers=bearer(coach), json={"name": "Journey Client", "email": email}, timeout=10)
    assert created.status_code == 201, created.text
    invite = [m for m in wait_for_mail(stack, email, 2) if "invited" in m["Subject"]][0]
    code = re.search(r"/invite\?code=([A-Za-z0-9_-]{20,})", invite.get_body(preferencelist=("plain",)).get_content()).group(1)
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
