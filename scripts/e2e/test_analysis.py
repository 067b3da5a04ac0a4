"""End-to-end: a user signs up, sets a diet, analyses a photo of a plate (the stack's nutrition
service asks the e2e's own vision stand-in, scripts/e2e/vision.py), corrects one item by a search of
the food table, eats the meal, sees it in the trend, shares it, and opens the share card with the photo
on it."""
import datetime
import os
import struct
import time
import uuid

import requests

PHOTO = os.path.join(os.path.dirname(__file__), "..", "..", "Tests", "Fixtures", "meals", "plate.heic")


def test_a_photo_analysed_corrected_eaten_and_shared(stack):
    gw = stack.gateway
    signup = requests.post(f"{gw}/v1/auth/signup", json={"email": f"e2e-photo-{uuid.uuid4().hex[:10]}@example.com",
                           "password": "e2e photo password"}, timeout=10)
    assert signup.status_code == 201, signup.text
    user = {"Authorization": f"Bearer {signup.json()['session']['access_token']}"}
    profile = requests.put(f"{gw}/v1/nutrition/profile", headers=user, json={"diet": "mediterranean", "daily_calorie_goal": 2000,
                           "weight_unit": "kg", "time_zone": "Europe/Paris", "day_starts_at": 0}, timeout=10)
    assert profile.status_code == 200, profile.text

    eaten_at = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20)).isoformat()
    with open(PHOTO, "rb") as photo:
        analysed = requests.post(f"{gw}/v1/meals/analyze", headers={**user, "Idempotency-Key": f"analyze-{uuid.uuid4()}"},
                                 files={"photo": ("plate.heic", photo, "image/heic")}, data={"hint": "no sauce", "eaten_at": eaten_at}, timeout=60)
    assert analysed.status_code == 201, analysed.text
    meal = analysed.json()
    assert meal["consumed"] is False and meal["photo_url"] == f"/v1/meals/{meal['id']}/photo"
    assert meal["analysis"]["provider"] == "openai" and [i["name"] for i in meal["analysis"]["items"]] == ["grilled chicken breast", "white rice, cooked"]
    photo = requests.get(f"{gw}{meal['photo_url']}", headers=user, timeout=10)
    assert photo.status_code == 200 and photo.headers["Content-Type"] == "image/jpeg" and b"iPhone" not in photo.content

    # The rice took the food table's values: "white rice, cooked" names a food of it.
    source = meal["analysis"]["items"][1]["source"]
    assert source["kind"] == "usda_sr" and source["description"].startswith("Rice, white"), source
    assert meal["items"][1]["ndb_number"] == source["ndb_number"]

    # The rice was brown: in the edit screen the user searches the table, misspelt, and picks the
    # first cooked brown rice; the server fills in its amounts for the grams.
    found = requests.get(f"{gw}/v1/foods", params={"q": "brwn rice, cooked", "limit": 5}, headers=user, timeout=10)
    assert found.status_code == 200, found.text
    brown = found.json()["items"][0]
    assert brown["description"].startswith("Rice, brown") and "cooked" in brown["description"], found.text
    items = [{k: v for k, v in item.items() if k != "totals"} for item in meal["items"]]
    items[1] = {"ndb_number": brown["ndb_number"], "grams": 200}
    corrected = requests.put(f"{gw}/v1/meals/{meal['id']}", headers=user, json={"name": "Chicken with brown rice", "eaten_at": eaten_at,
                             "items": items}, timeout=10)
    assert corrected.status_code == 200 and corrected.json()["edited"] is True, corrected.text
    assert corrected.json()["photo_url"] == meal["photo_url"]
    rice = corrected.json()["items"][1]
    assert rice["name"] == brown["description"] and rice["ndb_number"] == brown["ndb_number"]
    assert abs(rice["calories"] - 2 * brown["per_100g"]["calories"]) < 1e-6 and "whole_grain" in rice["tags"]

    eaten = requests.post(f"{gw}/v1/meals/{meal['id']}/consume", headers=user, timeout=10)
    assert eaten.status_code == 200 and eaten.json()["consumed"] is True
    trend = requests.get(f"{gw}/v1/trends?period=7d", headers=user, timeout=10)
    assert trend.status_code == 200, trend.text
    day = [d for d in trend.json()["days"] if d["date"] == corrected.json()["local_date"]]
    assert day and day[0]["calories"] == corrected.json()["totals"]["calories"], trend.text

    share = requests.post(f"{gw}/v1/meals/{meal['id']}/share", headers=user, timeout=10)
    assert share.status_code == 201, share.text
    token = share.json()["token"]
    opened = requests.get(f"{gw}/v1/shared/{token}", timeout=10).json()
    assert opened["photo_url"] == f"/v1/shared/{token}/photo"
    shared_photo = requests.get(f"{gw}{opened['photo_url']}", timeout=10)
    assert shared_photo.status_code == 200 and shared_photo.content == photo.content
    card = requests.get(f"{gw}/v1/shared/{token}/card.png", timeout=10)
    assert card.status_code == 200 and card.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", card.content[16:24]) == (1200, 630)


def test_a_phone_sized_photo_passes_the_gateway(stack):
    """A phone's photo is megabytes: the gateway lets a meal photo through up to nutrition's own
    limit, where a JSON body stops at 256 KiB. The photo here is a JPEG (the one the first
    analysis kept) grown past 4 MB with comment segments, which decoders skip."""
    gw = stack.gateway
    signup = requests.post(f"{gw}/v1/auth/signup", json={"email": f"e2e-photo-big-{uuid.uuid4().hex[:10]}@example.com",
                           "password": "e2e photo password"}, timeout=10)
    assert signup.status_code == 201, signup.text
    user = {"Authorization": f"Bearer {signup.json()['session']['access_token']}"}
    with open(PHOTO, "rb") as photo:
        heic = photo.read()
    # Until nutrition has heard the new account's tier it answers 503 allowance_unknown, Retry-After 5.
    deadline = time.monotonic() + 20
    while True:
        first = requests.post(f"{gw}/v1/meals/analyze", headers=user, files={"photo": ("plate.heic", heic, "image/heic")}, timeout=60)
        if first.status_code != 503 or first.json().get("code") != "allowance_unknown" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert first.status_code == 201, first.text
    jpeg = requests.get(f"{gw}{first.json()['photo_url']}", headers=user, timeout=10).content
    assert jpeg[:2] == b"\xff\xd8"
    comment = b"\xff\xfe" + struct.pack(">H", 65535) + b" " * 65533
    big = jpeg[:2] + comment * 64 + jpeg[2:]
    assert len(big) > 4_000_000
    second = requests.post(f"{gw}/v1/meals/analyze", headers=user, files={"photo": ("plate.jpg", big, "image/jpeg")}, timeout=60)
    assert second.status_code == 201, second.text
    kept = requests.get(f"{gw}{second.json()['photo_url']}", headers=user, timeout=10)
    assert kept.status_code == 200 and kept.content[:2] == b"\xff\xd8" and len(kept.content) < 1_000_000
    # A JSON body of the same size is still refused at the edge.
    refused = requests.post(f"{gw}/v1/meals", headers={**user, "Content-Type": "application/json"}, data=b"{" + b" " * 300_000 + b"}", timeout=10)
    assert refused.status_code == 413 and refused.json()["code"] == "payload_too_large", refused.text
