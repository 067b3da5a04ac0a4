"""End-to-end: accounts through the gateway, mail through the stack's SMTP sink, tokens checked with
PyJWT against the published JWKS, events on the Redis stream. Runs before test_foundation.py
(which kills and restarts services)."""
import email
import email.policy
import glob
import os
import re
import uuid

import jwt
import requests

from conftest import request_id


def mails_to(stack, address):
    found = []
    for path in sorted(glob.glob(os.path.join(stack.dir, "mail", "*.eml"))):
        with open(path, "rb") as f:
            message = email.message_from_binary_file(f, policy=email.policy.default)
        if message["To"] and address.lower() in message["To"].lower():
            found.append(message)
    return found


def link_token(message):
    text = message.get_body(preferencelist=("plain",)).get_content()
    match = re.search(r"token=([A-Za-z0-9_-]{20,})", text)
    assert match, text
    return match.group(1)


def wait_for_mail(stack, address, count=1):
    stack.wait_until(lambda: len(mails_to(stack, address)) >= count, seconds=30, what=f"{count} mail(s) to {address}")
    return mails_to(stack, address)


def events_for(stack, user_id):
    out = stack.redis("XRANGE", "events", "-", "+")
    types = []
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line == "type" and i + 1 < len(lines):
            types.append((lines[i + 1], i))
    found = []
    for event_type, i in types:
        window = "\n".join(lines[i:i + 6]).lower()
        if user_id.lower() in window:
            found.append(event_type)
    return found


def test_account_lifecycle_through_the_gateway(stack):
    gw = stack.gateway
    address = f"e2e-{uuid.uuid4().hex[:10]}@example.com"
    password = "e2e pantry password"

    signup = requests.post(f"{gw}/v1/auth/signup", json={"email": address, "password": password, "display_name": "E2E Cook"},
                           headers={"X-Request-ID": request_id()}, timeout=10)
    assert signup.status_code == 201, signup.text
    body = signup.json()
    user_id = body["user"]["id"]
    session = body["session"]

    # A third-party library verifies the token with the JWKS the gateway serves.
    jwks = jwt.PyJWKClient(f"{gw}/.well-known/jwks.json")
    key = jwks.get_signing_key_from_jwt(session["access_token"])
    claims = jwt.decode(session["access_token"], key.key, algorithms=["ES256"], audience="foodbackend")
    assert claims["sub"] == user_id  # the same text as the id in JSON bodies
    assert claims["email_verified"] is False
    assert claims["roles"] == ["user"]
    assert jwt.get_unverified_header(session["access_token"])["kid"] == key.key_id

    # The verification mail arrives over SMTP. Its link alone proves only the mailbox: the page that
    # opens it also asks for the account's password (the app would send its access token instead).
    message = wait_for_mail(stack, address)[0]
    assert "Confirm your email" in message["Subject"]
    bare = requests.post(f"{gw}/v1/auth/email/verify", json={"token": link_token(message)}, timeout=10)
    assert bare.status_code == 401 and bare.json()["code"] == "proof_required", bare.text
    verify = requests.post(f"{gw}/v1/auth/email/verify", json={"token": link_token(message), "password": password}, timeout=10)
    assert verify.status_code == 200, verify.text

    refreshed = requests.post(f"{gw}/v1/auth/token/refresh", json={"refresh_token": session["refresh_token"]}, timeout=10)
    assert refreshed.status_code == 200, refreshed.text
    tokens = refreshed.json()
    claims = jwt.decode(tokens["access_token"], key.key, algorithms=["ES256"], audience="foodbackend")
    assert claims["email_verified"] is True
    # The first token again: within the grace, while what it was exchanged for is unused, it is a
    # lost answer asked for again; once the session has moved on past it, a thief's.
    again = requests.post(f"{gw}/v1/auth/token/refresh", json={"refresh_token": session["refresh_token"]}, timeout=10)
    assert again.status_code == 200 and again.json()["refresh_token"] != tokens["refresh_token"], again.text
    moved_on = requests.post(f"{gw}/v1/auth/token/refresh", json={"refresh_token": again.json()["refresh_token"]}, timeout=10)
    assert moved_on.status_code == 200, moved_on.text
    reused = requests.post(f"{gw}/v1/auth/token/refresh", json={"refresh_token": session["refresh_token"]}, timeout=10)
    assert reused.status_code == 401 and reused.json()["code"] == "refresh_token_reused"
    assert reused.headers["Content-Type"] == "application/problem+json"

    # The reuse ended the session; sign in again and read the account.
    login = requests.post(f"{gw}/v1/auth/login", json={"email": address.upper(), "password": password}, timeout=10)
    assert login.status_code == 200, login.text
    access = login.json()["session"]["access_token"]
    me = requests.get(f"{gw}/v1/auth/me", headers={"Authorization": f"Bearer {access}"}, timeout=10)
    assert me.status_code == 200
    assert me.json()["email_verified"] is True
    assert me.json()["display_name"] == "E2E Cook"

    # Password reset by mail ends every session.
    assert requests.post(f"{gw}/v1/auth/password/forgot", json={"email": address}, timeout=10).status_code == 202
    reset_mail = [m for m in wait_for_mail(stack, address, 2) if "Reset" in m["Subject"]][0]
    reset = requests.post(f"{gw}/v1/auth/password/reset", json={"token": link_token(reset_mail), "password": "a brand new e2e secret"}, timeout=10)
    assert reset.status_code == 204, reset.text
    assert requests.get(f"{gw}/v1/auth/me", headers={"Authorization": f"Bearer {access}"}, timeout=10).json()["code"] == "session_revoked"
    login = requests.post(f"{gw}/v1/auth/login", json={"email": address, "password": "a brand new e2e secret"}, timeout=10)
    assert login.status_code == 200
    access = login.json()["session"]["access_token"]

    # The events reached the stream every service reads.
    stack.wait_until(lambda: {"user.registered", "user.email_verified", "user.password_changed"} <= set(events_for(stack, user_id)),
                     seconds=20, what="auth events on the stream")

    # Deletion: the account goes, user.deleted goes out, the address is free again.
    deleted = requests.delete(f"{gw}/v1/auth/account", json={"password": "a brand new e2e secret"},
                              headers={"Authorization": f"Bearer {access}"}, timeout=10)
    assert deleted.status_code == 202, deleted.text
    stack.wait_until(lambda: "user.deleted" in events_for(stack, user_id), seconds=20, what="user.deleted on the stream")
    assert stack.psql("auth", f"SELECT count(*) FROM users WHERE id = '{user_id}'") == "0"
    again = requests.post(f"{gw}/v1/auth/signup", json={"email": address, "password": password}, timeout=10)
    assert again.status_code == 201


def test_unknown_and_wrong_logins_look_alike_through_the_gateway(stack):
    gw = stack.gateway
    unknown = requests.post(f"{gw}/v1/auth/login", json={"email": f"nobody-{uuid.uuid4().hex}@example.com", "password": "whatever it is"}, timeout=10)
    assert unknown.status_code == 401
    assert unknown.json()["code"] == "invalid_credentials"
    malformed = requests.post(f"{gw}/v1/auth/login", data="{", headers={"Content-Type": "application/json"}, timeout=10)
    assert malformed.status_code == 400 and malformed.json()["code"] == "malformed_json"
