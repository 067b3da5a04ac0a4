"""End-to-end: a coach invites a client and plans their first sessions before the client has an
account; the client signs up, accepts, finds the sessions in Today, logs one; the coach sees the log
against the prescription and comments; the comment reaches the client's live stream."""
import datetime
import re
import time
import uuid

import requests

from test_auth import link_token, wait_for_mail
from test_invitations import bearer, refresh, roles, sign_up, verify_address
from test_journeys import LiveStream, same, user_id_of


def test_a_coach_plans_before_the_client_accepts_and_follows_the_log(stack):
    gw = stack.gateway
    coach_email = f"e2e-trainer-{uuid.uuid4().hex[:10]}@example.com"
    coach = sign_up(stack, coach_email, "e2e trainer password")
    verify = requests.post(f"{gw}/v1/auth/email/verify", headers=bearer(coach), json={"token": link_token(wait_for_mail(stack, coach_email)[0])}, timeout=10)
    assert verify.status_code == 200, verify.text
    assert requests.post(f"{gw}/v1/auth/roles/coach", headers=bearer(coach), timeout=10).status_code == 200
    coach = refresh(stack, coach)
    assert "coach" in roles(coach)

    # The coach's workout, from the library.
    found = requests.get(f"{gw}/v1/exercises", params={"q": "push ups"}, headers=bearer(coach), timeout=10)
    assert found.status_code == 200 and found.json()["items"], found.text
    exercise = found.json()["items"][0]
    workout = requests.post(f"{gw}/v1/workouts", headers=bearer(coach), timeout=10, json={
        "name": "Week one", "blocks": [{"exercise_id": exercise["id"], "sets": [{"reps": 10, "weight_kg": 20}, {"reps": 10, "weight_kg": 20}]}]})
    assert workout.status_code == 201, workout.text

    # Invited, and planned before the client has an account.
    client_email = f"e2e-trainee-{uuid.uuid4().hex[:10]}@example.com"
    entry = requests.post(f"{gw}/v1/clients", headers=bearer(coach), json={"name": "Tia Trainee", "email": client_email}, timeout=10)
    assert entry.status_code == 201, entry.text
    entry_id = entry.json()["id"]
    # The days are read here and again, after the sign-up and the acceptance, by PostgreSQL: not
    # across midnight in UTC (the client's zone until they set another), where the two would differ.
    clear_of_midnight()
    today = datetime.datetime.now(datetime.timezone.utc).date()
    days = [str(today + datetime.timedelta(days=n)) for n in (0, 2, 4)]
    planned = requests.post(f"{gw}/v1/training/clients/{entry_id}/assignments", headers=bearer(coach),
                            json={"workout_id": workout.json()["id"], "dates": days}, timeout=10)
    assert planned.status_code == 201, planned.text
    sessions = planned.json()["items"]
    assert [s["scheduled_on"] for s in sessions] == days and all(s["client_id"] is None for s in sessions)

    # The client signs up from the mail, accepts; today and My Workouts show the plan.
    message = wait_for_mail(stack, client_email)[0]
    code = re.search(r"/invite\?code=([A-Za-z0-9_-]{20,})", message.get_body(preferencelist=("plain",)).get_content()).group(1)
    client = sign_up(stack, client_email, "e2e trainee password")
    client = verify_address(stack, client, client_email)
    accepted = requests.post(f"{gw}/v1/invitations/{code}/accept", headers=bearer(client), timeout=30)
    assert accepted.status_code == 200, accepted.text
    assert same(accepted.json()["roster_entry_id"], entry_id), accepted.text
    client = refresh(stack, client)
    assert "client" in roles(client)
    stream = LiveStream(gw, client)
    try:
        # As the app reads right after accepting: naming the entry, so the read waits for its plan.
        def today_shows_the_plan():
            reply = requests.get(f"{gw}/v1/training/today", params={"roster_entry_id": entry_id}, headers=bearer(client), timeout=10)
            return reply.status_code == 200 and [s["id"] for s in reply.json()["items"]] == [sessions[0]["id"]]
        stack.wait_until(today_shows_the_plan, seconds=30, what="the planned session in the client's today")
        week = requests.get(f"{gw}/v1/training/sessions", params={"from": days[0], "to": days[2]}, headers=bearer(client), timeout=10)
        assert [s["id"] for s in week.json()["items"]] == [s["id"] for s in sessions], week.text
        # The coach's side is closed to the client.
        assert requests.get(f"{gw}/v1/training/clients/{entry_id}", headers=bearer(client), timeout=10).status_code == 403

        # Logged (offline, retried with its key): once.
        log = {"performed_at": f"{days[0]}T07:30:00+00:00", "sets": [
            {"block": 1, "set": 1, "reps": 10, "weight_lbs": 45, "done": True}, {"block": 1, "set": 2, "reps": 8, "weight_lbs": 45, "done": True}]}
        key = {"Idempotency-Key": f"log-{uuid.uuid4()}"}
        first = requests.post(f"{gw}/v1/training/sessions/{sessions[0]['id']}/log", headers={**bearer(client), **key}, json=log, timeout=10)
        assert first.status_code == 200 and first.json()["status"] == "completed", first.text
        retry = requests.post(f"{gw}/v1/training/sessions/{sessions[0]['id']}/log", headers={**bearer(client), **key}, json=log, timeout=10)
        assert retry.status_code == 200 and retry.headers.get("Idempotent-Replayed") == "true"

        # The coach sees the log against the prescription, and comments.
        progress = requests.get(f"{gw}/v1/training/clients/{entry_id}", headers=bearer(coach), timeout=10)
        assert progress.status_code == 200, progress.text
        body = progress.json()
        assert same(body["client"]["user_id"], user_id_of(client)) and body["client"]["status"] == "accepted"
        done = next(s for s in body["items"] if s["id"] == sessions[0]["id"])
        assert done["status"] == "completed" and len(done["logged_sets"]) == 2
        assert done["logged_sets"][0]["weight_kg"] == 20.41165665 and done["blocks"][0]["sets"][0]["reps"] == 10
        assert body["adherence"]["last_7_days"]["completed"] == 1
        comment = requests.post(f"{gw}/v1/training/sessions/{sessions[0]['id']}/comments", headers=bearer(coach), json={"text": "Strong start, add 5 lb"}, timeout=10)
        assert comment.status_code == 201, comment.text

        # The client hears of it on the live stream.
        heard = stream.next("workout_comment", seconds=30, where=lambda data: same(data["session_id"], sessions[0]["id"]))
        assert heard["text"] == "Strong start, add 5 lb" and heard["author_role"] == "coach"
        read = requests.get(f"{gw}/v1/training/sessions/{sessions[0]['id']}", headers=bearer(client), timeout=10)
        assert [c["text"] for c in read.json()["comments"]] == ["Strong start, add 5 lb"]
    finally:
        stream.close()


def clear_of_midnight(margin=180):
    """Waits out midnight in UTC when it is less than `margin` seconds away."""
    left = 86_400 - time.time() % 86_400
    if left < margin:
        time.sleep(left + 1)
