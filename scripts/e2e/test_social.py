"""End-to-end: profiles and the follow graph through the gateway — profiles made from auth's
user.registered event, a follow request to a private profile and its notification, approval, a
block, and an account deletion that leaves no trace of the user in social's tables."""
import uuid

import requests

from conftest import problem, request_id


def signup(gw, name):
    address = f"e2e-social-{name}-{uuid.uuid4().hex[:10]}@example.com"
    response = requests.post(f"{gw}/v1/auth/signup", json={"email": address, "password": "e2e social password"},
                             headers={"X-Request-ID": request_id()}, timeout=10)
    assert response.status_code == 201, response.text
    body = response.json()
    return body["user"]["id"], body["session"]["access_token"]


def call(method, url, token, **kwargs):
    headers = {"Authorization": f"Bearer {token}", "X-Request-ID": request_id()}
    return requests.request(method, url, headers=headers, timeout=10, **kwargs)


def same(a, b):
    return a.lower() == b.lower()


def traces(stack, user_id):
    """Rows of social's tables that mention user_id, in any column that names a user."""
    u = f"'{user_id}'::uuid"
    return int(stack.psql("social", f"""SELECT
        (SELECT count(*) FROM social.profiles WHERE user_id = {u})
      + (SELECT count(*) FROM social.follows WHERE follower_id = {u} OR followee_id = {u})
      + (SELECT count(*) FROM social.follow_requests WHERE requester_id = {u} OR target_id = {u})
      + (SELECT count(*) FROM social.blocks WHERE blocker_id = {u} OR blocked_id = {u})
      + (SELECT count(*) FROM social.mutes WHERE muter_id = {u} OR muted_id = {u})
      + (SELECT count(*) FROM social.notifications WHERE user_id = {u} OR actor_id = {u})"""))


def test_follow_request_block_and_account_deletion_through_the_gateway(stack):
    gw = stack.gateway
    a_id, a = signup(gw, "a")
    b_id, b = signup(gw, "b")

    # The profile row comes from the user.registered event, before anyone asks for it.
    for user_id in (a_id, b_id):
        stack.wait_until(lambda: stack.psql("social", f"SELECT count(*) FROM social.profiles WHERE user_id = '{user_id}'") == "1",
                         seconds=20, what=f"a profile for {user_id} from user.registered")
    for user_id, token in ((a_id, a), (b_id, b)):
        stack.wait_until(lambda: call("GET", f"{gw}/v1/profiles/me", token).status_code == 200, seconds=20, what="GET /v1/profiles/me")
        me = call("GET", f"{gw}/v1/profiles/me", token).json()
        assert same(me["id"], user_id)
        assert me["followers_count"] == 0 and me["following_count"] == 0

    suffix = uuid.uuid4().hex[:8]
    for name, token in (("a", a), ("b", b)):
        patch = {"username": f"cook_{name}_{suffix}", "display_name": f"Cook {name.upper()}",
                 "dietary_preferences": ["vegetarian"], "allergies": [{"name": "peanut", "severity": "severe"}],
                 "favorite_cuisines": ["italian"]}
        edited = call("PATCH", f"{gw}/v1/profiles/me", token, json=patch)
        assert edited.status_code == 200, edited.text
        profile = edited.json()
        assert profile["username"] == patch["username"] and profile["display_name"] == patch["display_name"]
        assert profile["dietary_preferences"] == ["vegetarian"]
        assert profile["allergies"] == [{"name": "peanut", "severity": "severe"}]
    private = call("PATCH", f"{gw}/v1/profiles/me", b, json={"is_private": True})
    assert private.status_code == 200 and private.json()["is_private"] is True, private.text

    # A asks to follow private B; B sees the request and a notification naming A.
    follow = call("POST", f"{gw}/v1/profiles/{b_id}/follow", a)
    assert follow.status_code == 200, follow.text
    assert follow.json()["state"] == "requested"
    pending = call("GET", f"{gw}/v1/follow-requests", b)
    assert pending.status_code == 200, pending.text
    assert [same(item["id"], a_id) for item in pending.json()["items"]] == [True]
    stack.wait_until(lambda: any(n["type"] == "follow_request" and same(n["actor"]["id"], a_id)
                                 for n in call("GET", f"{gw}/v1/notifications", b).json()["items"]),
                     seconds=20, what="a follow_request notification for B")

    approved = call("POST", f"{gw}/v1/follow-requests/{a_id}/approve", b)
    assert approved.status_code == 200 and approved.json()["state"] == "following", approved.text
    assert call("GET", f"{gw}/v1/profiles/me", a).json()["following_count"] == 1
    assert call("GET", f"{gw}/v1/profiles/me", b).json()["followers_count"] == 1
    seen = call("GET", f"{gw}/v1/profiles/{b_id}", a).json()
    assert seen["relationship"]["following"] is True and seen["followers_count"] == 1

    # A mutes B (a row in mutes for the deletion check); then B blocks A, and B is gone for A.
    muted = call("POST", f"{gw}/v1/profiles/{b_id}/mute", a)
    assert muted.status_code == 200 and muted.json()["muting"] is True, muted.text
    blocked = call("POST", f"{gw}/v1/profiles/{a_id}/block", b)
    assert blocked.status_code == 200 and blocked.json()["blocking"] is True, blocked.text
    hidden = call("GET", f"{gw}/v1/profiles/{b_id}", a)
    assert hidden.status_code == 404, hidden.text
    problem(hidden)

    # A deletes the account: user.deleted reaches social, which forgets A everywhere.
    assert traces(stack, a_id) > 0
    deleted = call("DELETE", f"{gw}/v1/auth/account", a, json={"password": "e2e social password"})
    assert deleted.status_code == 202, deleted.text
    stack.wait_until(lambda: traces(stack, a_id) == 0, seconds=30, what=f"no row of social mentioning {a_id}")
    stack.wait_until(lambda: call("GET", f"{gw}/v1/profiles/me", b).json()["followers_count"] == 0,
                     seconds=20, what="B's followers_count back to 0")
    assert call("GET", f"{gw}/v1/profiles/me", b).json()["following_count"] == 0
