"""End-to-end: a user of the nutrition tracker signs up, sets a keto profile, logs and eats meals,
logs a weight, reads the 7-day trend, shares a meal and opens the link signed out (the snapshot and
its 1200x630 card), then revokes it."""
import datetime
import struct
import uuid

import requests

from conftest import problem


def test_a_day_of_keto_logged_trended_and_shared(stack):
    gw = stack.gateway
    signup = requests.post(f"{gw}/v1/auth/signup", json={"email": f"e2e-keto-{uuid.uuid4().hex[:10]}@example.com",
                           "password": "e2e keto password"}, timeout=10)
    assert signup.status_code == 201, signup.text
    user = {"Authorization": f"Bearer {signup.json()['session']['access_token']}"}

    profile = requests.put(f"{gw}/v1/nutrition/profile", headers=user, json={"diet": "keto", "daily_calorie_goal": 1800, "weight_unit": "lbs",
                           "time_zone": "Europe/Paris", "day_starts_at": 0}, timeout=10)
    assert profile.status_code == 200 and profile.json()["diet"] == "keto", profile.text

    now = datetime.datetime.now(datetime.timezone.utc)
    breakfast = {"name": "Eggs and avocado", "eaten_at": (now - datetime.timedelta(minutes=30)).isoformat(), "items": [
        {"name": "Scrambled eggs", "grams": 150, "calories": 300, "protein_g": 20, "carbs_g": 2, "fat_g": 23, "sodium_mg": 300, "tags": ["egg"]},
        {"name": "Avocado", "grams": 100, "calories": 160, "protein_g": 2, "carbs_g": 9, "fat_g": 15, "fiber_g": 7, "tags": ["fruit"]}]}
    logged = requests.post(f"{gw}/v1/meals", headers={**user, "Idempotency-Key": f"breakfast-{uuid.uuid4()}"}, json=breakfast, timeout=10)
    assert logged.status_code == 201, logged.text
    meal = logged.json()
    assert meal["totals"]["calories"] == 460 and meal["score_band"] in ("great", "ok", "poor") and meal["consumed"] is False
    assert {c["part"] for c in meal["score_explanation"]["components"]} == {"fit", "quality"}
    eaten = requests.post(f"{gw}/v1/meals/{meal['id']}/consume", headers=user, json={"notes": "tasty"}, timeout=10)
    assert eaten.status_code == 200 and eaten.json()["consumed"] is True

    weight = requests.post(f"{gw}/v1/metrics/weight", headers=user, json={"value": 180, "unit": "lbs"}, timeout=10)
    assert weight.status_code == 201, weight.text
    weights = requests.get(f"{gw}/v1/metrics/weight?days=7", headers=user, timeout=10).json()
    assert weights["unit"] == "lbs" and weights["days"][-1]["value"] == 180

    trend = requests.get(f"{gw}/v1/trends?period=7d", headers=user, timeout=10)
    assert trend.status_code == 200, trend.text
    days = trend.json()["days"]
    assert len(days) == 7 and trend.json()["days_logged"] == 1 and trend.json()["streak"] == 1
    # The breakfast's day in Paris: today, or yesterday when it was eaten just before midnight there.
    # The goal set today counts from today: a day before it keeps the default (2000).
    eaten_on = [day for day in days if day["date"] == meal["local_date"]]
    goal = 1800 if meal["local_date"] == days[-1]["date"] else 2000
    assert eaten_on and eaten_on[0]["calories"] == 460 and eaten_on[0]["calorie_goal"] == goal, (meal["local_date"], days)
    assert meal["local_date"] in (days[-1]["date"], days[-2]["date"]) and days[0]["calories"] is None

    share = requests.post(f"{gw}/v1/meals/{meal['id']}/share", headers=user, timeout=10)
    assert share.status_code == 201, share.text
    token = share.json()["token"]
    opened = requests.get(f"{gw}/v1/shared/{token}", timeout=10)
    assert opened.status_code == 200 and opened.json()["name"] == "Eggs and avocado" and "user_id" not in opened.json()
    card = requests.get(f"{gw}/v1/shared/{token}/card.png", timeout=10)
    assert card.status_code == 200 and card.headers["Content-Type"] == "image/png"
    assert card.content[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", card.content[16:24]) == (1200, 630)
    assert requests.delete(f"{gw}/v1/meals/{meal['id']}/share", headers=user, timeout=10).status_code == 204
    gone = requests.get(f"{gw}/v1/shared/{token}", timeout=10)
    assert gone.status_code == 410 and problem(gone)["code"] == "share_gone"
