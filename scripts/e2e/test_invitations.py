"""End-to-end: a coach invites a client through the gateway; the invitation mail arrives at the
stack's SMTP sink; the client signs up with the invited address, opens the mail, previews and accepts
the invitation; auth grants `client` on the event, so the client's next refresh carries it; the
coach's roster shows the acceptance and the client's last sign-in."""
import re
import uuid

import jwt
import requests

from conftest import problem
from test_auth import link_token, mails_to, wait_for_mail


def sign_up(stack, email, password):
    response = requests.post(f"{stack.gateway}/v1/auth/signup", json={"email": email, "password": password}, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()["session"]


def refresh(stack, session):
    response = requests.post(f"{stack.gateway}/v1/auth/token/refresh", json={"refresh_token": session["refresh_token"]}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def bearer(session):
    return {"Authorization": f"Bearer {session['access_token']}"}


def verify_address(stack, session, email):
    """Proves `email` from the app with its verification mail, and returns the session refreshed so its
    token says so: an invitation is accepted only by a verified address."""
    def confirmations():
        return [m for m in mails_to(stack, email) if m["Subject"].startswith("Confirm")]
    stack.wait_until(lambda: confirmations(), seconds=30, what=f"the verification mail to {email}")
    verify = requests.post(f"{stack.gateway}/v1/auth/email/verify", headers=bearer(session), json={"token": link_token(confirmations()[-1])}, timeout=10)
    assert verify.status_code == 200, verify.text
    return refresh(stack, session)


def roles(session):
    return jwt.decode(session["access_token"], options={"verify_signature": False})["roles"]


def test_a_coach_invites_and_the_client_accepts_from_the_mail(stack):
    gw = stack.gateway
    coach_email = f"e2e-coach-{uuid.uuid4().hex[:10]}@example.com"
    coach = sign_up(stack, coach_email, "e2e coach password")
    # Invitation mail goes out only for a coach whose address is proven: verify it from the app.
    verify = requests.post(f"{gw}/v1/auth/email/verify", headers=bearer(coach), json={"token": link_token(wait_for_mail(stack, coach_email)[0])}, timeout=10)
    assert verify.status_code == 200, verify.text
    assert requests.post(f"{gw}/v1/auth/roles/coach", headers=bearer(coach), timeout=10).status_code == 200
    coach = refresh(stack, coach)
    assert "coach" in roles(coach)

    client_email = f"e2e-client-{uuid.uuid4().hex[:10]}@example.com"
    created = requests.post(f"{gw}/v1/clients", headers=bearer(coach), json={"name": "Ana Lima", "email": client_email}, timeout=10)
    assert created.status_code == 201, created.text
    assert created.json()["invitation"]["status"] == "pending"
    typo = requests.post(f"{gw}/v1/clients", headers=bearer(coach), json={"name": "Gus", "email": "gus@gmial.com"}, timeout=10)
    assert typo.status_code == 400 and problem(typo)["code"] == "email_suspicious"

    message = wait_for_mail(stack, client_email)[0]
    assert message["Subject"].startswith("You're invited to")
    assert message["Reply-To"] == coach_email
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    text = message.get_body(preferencelist=("plain",)).get_content()
    code = re.search(r"/invite\?code=([A-Za-z0-9_-]{20,})", text).group(1)
    assert f"pfa://invite?code={code}" in text

    preview = requests.get(f"{gw}/v1/invitations/{code}", timeout=10)
    assert preview.status_code == 200, preview.text
    assert preview.json()["client_name"] == "Ana Lima" and preview.json()["status"] == "pending"
    # The code never reaches the logs.
    assert code not in stack.log("invitations") and code not in stack.log("gateway")

    client = sign_up(stack, client_email, "e2e client password")
    refused = requests.post(f"{gw}/v1/invitations/{code}/accept", headers=bearer(client), timeout=30)
    assert refused.status_code == 403 and problem(refused)["code"] == "email_unverified", refused.text
    client = verify_address(stack, client, client_email)
    accepted = requests.post(f"{gw}/v1/invitations/{code}/accept", headers=bearer(client), timeout=30)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["role"] == "granted"
    client = refresh(stack, client)
    assert "client" in roles(client)
    coach_card = requests.get(f"{gw}/v1/coach", headers=bearer(client), timeout=10)
    assert coach_card.status_code == 200 and coach_card.json()["since"]

    def roster_shows_the_sign_in():
        items = requests.get(f"{gw}/v1/clients?status=accepted", headers=bearer(coach), timeout=10).json()["items"]
        return len(items) == 1 and items[0]["last_sign_in_at"] is not None
    stack.wait_until(roster_shows_the_sign_in, seconds=30, what="the roster showing the accepted client's last sign-in")
    entry = requests.get(f"{gw}/v1/clients", headers=bearer(coach), timeout=10).json()["items"][0]
    assert entry["email"] == client_email and entry["invitation"]["delivery"] == "sent"

    # Leaving the coach: auth takes `client` away on the event.
    assert requests.delete(f"{gw}/v1/coach", headers=bearer(client), timeout=10).status_code == 204
    stack.wait_until(lambda: "client" not in roles(refresh_into(stack, client)), seconds=30, what="client role removed after leaving")


def refresh_into(stack, session):
    """Refreshes `session` in place (each refresh token works once) and returns it."""
    fresh = refresh(stack, session)
    session.update(fresh)
    return session
