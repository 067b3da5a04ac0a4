"""End-to-end: a free user of the research app hits the 50-source limit, buys Pro with a signed
StoreKit transaction, the limit lifts; Apple's EXPIRED notification brings it back. A notification
that arrives while PostgreSQL is stopped is refused with 503 and applied when Apple retries."""
import os
import time
import uuid

import requests

from appstore import Issuer
from conftest import SERVICES, problem


def sign_up(stack):
    response = requests.post(f"{stack.gateway}/v1/auth/signup", json={"email": f"e2e-research-{uuid.uuid4().hex[:10]}@example.com",
                             "password": "e2e research password"}, timeout=10)
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['session']['access_token']}"}


def test_the_limit_lifts_with_pro_and_returns_when_it_expires(stack):
    gw = stack.gateway
    issuer = Issuer(os.path.join(stack.dir, "appstore"))
    user = sign_up(stack)
    me = requests.get(f"{gw}/v1/entitlements/me", headers=user, timeout=10).json()
    assert me["tier"] == "free" and me["limits"]["sources"] == {"limit": 50, "used": 0}
    for index in range(50):
        response = requests.post(f"{gw}/v1/usage/sources/acquire", headers={**user, "Idempotency-Key": f"source-{index}"}, json={"amount": 1}, timeout=10)
        assert response.status_code == 200, response.text
    refused = requests.post(f"{gw}/v1/usage/sources/acquire", headers=user, json={"amount": 1}, timeout=10)
    assert refused.status_code == 403 and problem(refused)["code"] == "limit_exceeded"
    assert problem(refused)["detail"] == "You've reached the limit of 50 sources. Upgrade to Pro for unlimited."

    original = str(uuid.uuid4().int % 10**15)
    # A short period, so that it runs out during the test as a month would, long enough that the
    # purchase and the use after it come within it on a loaded machine.
    bought = issuer.transaction(original, token=me["app_account_token"], expires_ms=issuer.now_ms() + 20000)
    purchase = requests.post(f"{gw}/v1/purchases/apple", headers=user, json={"signed_transaction": issuer.sign(bought)}, timeout=10)
    assert purchase.status_code == 200, purchase.text
    assert purchase.json()["tier"] == "pro" and purchase.json()["limits"]["sources"]["limit"] is None
    lifted = requests.post(f"{gw}/v1/usage/sources/acquire", headers=user, json={"amount": 1}, timeout=10)
    assert lifted.status_code == 200 and lifted.json()["used"] == 51

    # The period runs out without a renewal; Apple's EXPIRED carries the same transaction, signed now.
    time.sleep(max(0, (bought["expiresDate"] - issuer.now_ms()) / 1000 + 0.5))
    lapsed = dict(bought, signedDate=issuer.now_ms())
    expired = requests.post(f"{gw}/v1/webhooks/app-store", json={"signedPayload": issuer.notification("EXPIRED", lapsed, subtype="VOLUNTARY", renews=False)},
                            timeout=10)
    assert expired.status_code == 200 and expired.json()["applied"] is True, expired.text
    after = requests.get(f"{gw}/v1/entitlements/me", headers=user, timeout=10).json()
    assert after["tier"] == "free" and after["state"] == "expired" and after["limits"]["sources"] == {"limit": 50, "used": 51}
    again = requests.post(f"{gw}/v1/usage/sources/acquire", headers=user, json={"amount": 1}, timeout=10)
    assert again.status_code == 403 and problem(again)["code"] == "limit_exceeded"


def test_a_notification_during_a_database_outage_is_503_and_applied_on_apples_retry(stack):
    gw = stack.gateway
    issuer = Issuer(os.path.join(stack.dir, "appstore"))
    user = sign_up(stack)
    token = requests.get(f"{gw}/v1/entitlements/me", headers=user, timeout=10).json()["app_account_token"]
    payload = issuer.notification("SUBSCRIBED", issuer.transaction(str(uuid.uuid4().int % 10**15), token=token), subtype="INITIAL_BUY")
    stack.stop_postgres("entitlements")
    try:
        stack.wait_until(lambda: requests.post(f"{gw}/v1/webhooks/app-store", json={"signedPayload": payload}, timeout=10).status_code == 503,
                         seconds=15, what="the webhook refusing with 503 while the database is down")
        refused = requests.post(f"{gw}/v1/webhooks/app-store", json={"signedPayload": payload}, timeout=10)
        assert refused.status_code == 503 and refused.headers["Retry-After"], refused.text
    finally:
        stack.start_postgres("entitlements")
    # Apple retries; the same payload is now recorded and applied, once.
    stack.wait_until(lambda: requests.post(f"{gw}/v1/webhooks/app-store", json={"signedPayload": payload}, timeout=10).status_code == 200,
                     seconds=90, what="the webhook accepting Apple's retry after PostgreSQL came back")
    assert requests.get(f"{gw}/v1/entitlements/me", headers=user, timeout=10).json()["tier"] == "pro"
    assert stack.psql("entitlements", "SELECT count(*) FROM entitlements.notifications WHERE notification_type = 'SUBSCRIBED' "
                      f"AND original_transaction_id IN (SELECT original_transaction_id FROM entitlements.subscriptions WHERE app_account_token = '{token}')") == "1"
    # Every other process comes back before the tests after this one run.
    for name in SERVICES:
        stack.wait_until(lambda: requests.get(f"{stack.admin_urls[name]}/readyz", timeout=5).status_code == 200, seconds=90,
                         what=f"{name} ready again after PostgreSQL came back")
