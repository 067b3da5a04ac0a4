"""End-to-end in a real browser: the pages the mails and share links open, served by the service that
owns their data and routed by the gateway, loaded in headless Chromium (Debian's package, driven by
Selenium). Each page renders with its security headers, its buttons carry the right links, and its
forms work: a password reset in the page, then a sign-in with the new password; an address confirmed
in the page; the invitation page's app links; the shared meal's card."""
import datetime
import re
import struct
import uuid

import pytest
import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.support.ui import WebDriverWait

from test_auth import link_token, wait_for_mail
from test_invitations import bearer, refresh, sign_up


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=390,844"]:
        options.add_argument(argument)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


def assert_page_headers(url, status):
    """What every page answers with: HTML, never cached, no referrer, not indexed, a strict CSP."""
    response = requests.get(url, timeout=10, allow_redirects=False)
    assert response.status_code == status, (url, response.status_code, response.text[:500])
    assert response.headers["Content-Type"].startswith("text/html")
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert "no-store" in response.headers["Cache-Control"]
    assert response.headers["X-Robots-Tag"] == "noindex"
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    return response


def submit_form_with(browser, field):
    """Submits the form holding the input named `field` with a click on its submit button, and waits
    for the response's page to replace it (until then the old page's elements are still found)."""
    form = browser.find_element(By.XPATH, f"//form[.//input[@name='{field}']]")
    form.find_element(By.CSS_SELECTOR, "button[type=submit], input[type=submit], button:not([type])").click()
    WebDriverWait(browser, 20).until(lambda _: replaced(form))


def replaced(element):
    """Whether `element`'s page is gone. Chromium reports a node of a replaced page either as stale
    or, while the new page is being attached, as one that "does not belong to the document"."""
    try:
        element.is_enabled()
        return False
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "does not belong to the document" in str(error):
            return True
        raise


def body_text(browser):
    return browser.find_element(By.TAG_NAME, "body").text


def test_the_verification_page_confirms_only_with_the_password_and_never_on_load(stack, browser):
    gw = stack.gateway
    address = f"e2e-page-verify-{uuid.uuid4().hex[:10]}@example.com"
    password = "e2e page verify password"
    session = sign_up(stack, address, password)
    message = wait_for_mail(stack, address)[0]
    url = re.search(r"https?://\S+/verify-email\?token=[A-Za-z0-9_-]+", message.get_body(preferencelist=("plain",)).get_content()).group(0)
    assert url.startswith(gw), url
    assert_page_headers(url, 200)

    browser.get(url)
    assert browser.find_elements(By.CSS_SELECTOR, "input[name=password]"), body_text(browser)
    # Opening the link (as a mail scanner would) confirmed nothing.
    me = requests.get(f"{gw}/v1/auth/me", headers=bearer(session), timeout=10)
    assert me.json()["email_verified"] is False

    browser.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys("not the password")
    submit_form_with(browser, "password")
    assert browser.find_elements(By.CSS_SELECTOR, "input[name=password]"), "the form is shown again after a wrong password"
    assert "wrong" in body_text(browser).lower(), body_text(browser)
    assert requests.get(f"{gw}/v1/auth/me", headers=bearer(session), timeout=10).json()["email_verified"] is False

    browser.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys(password)
    submit_form_with(browser, "password")
    assert "confirmed" in body_text(browser).lower(), body_text(browser)
    assert requests.get(f"{gw}/v1/auth/me", headers=bearer(session), timeout=10).json()["email_verified"] is True

    # The link is spent: opening it again says so, kindly.
    browser.get(url)
    assert not browser.find_elements(By.CSS_SELECTOR, "input[name=password]")
    assert_page_headers(url, 410)


def test_a_password_reset_in_the_page_then_a_sign_in_with_the_new_password(stack, browser):
    gw = stack.gateway
    address = f"e2e-page-reset-{uuid.uuid4().hex[:10]}@example.com"
    sign_up(stack, address, "the old e2e page password")
    assert requests.post(f"{gw}/v1/auth/password/forgot", json={"email": address}, timeout=10).status_code == 202
    reset_mail = [m for m in wait_for_mail(stack, address, 2) if "Reset" in m["Subject"]][0]
    token = link_token(reset_mail)
    url = f"{gw}/reset-password?token={token}"
    assert url in reset_mail.get_body(preferencelist=("plain",)).get_content()
    assert_page_headers(url, 200)

    browser.get(url)
    # Two different passwords: the page says so and changes nothing.
    browser.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys("a new e2e page password")
    browser.find_element(By.CSS_SELECTOR, "input[name=password_confirmation]").send_keys("another e2e page password")
    submit_form_with(browser, "password")
    assert browser.find_elements(By.CSS_SELECTOR, "input[name=password]"), body_text(browser)
    # A password the API refuses is refused here with the same rule.
    browser.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys("short")
    browser.find_element(By.CSS_SELECTOR, "input[name=password_confirmation]").send_keys("short")
    submit_form_with(browser, "password")
    assert browser.find_elements(By.CSS_SELECTOR, "input[name=password]"), body_text(browser)
    login = requests.post(f"{gw}/v1/auth/login", json={"email": address, "password": "the old e2e page password"}, timeout=10)
    assert login.status_code == 200, "the old password still works until a reset succeeds"

    browser.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys("a new e2e page password")
    browser.find_element(By.CSS_SELECTOR, "input[name=password_confirmation]").send_keys("a new e2e page password")
    submit_form_with(browser, "password")
    assert not browser.find_elements(By.CSS_SELECTOR, "input[name=password_confirmation]"), body_text(browser)
    assert "changed" in body_text(browser).lower(), body_text(browser)

    login = requests.post(f"{gw}/v1/auth/login", json={"email": address, "password": "a new e2e page password"}, timeout=10)
    assert login.status_code == 200, login.text
    old = requests.post(f"{gw}/v1/auth/login", json={"email": address, "password": "the old e2e page password"}, timeout=10)
    assert old.status_code == 401


def verified_coach(stack):
    gw = stack.gateway
    email = f"e2e-page-coach-{uuid.uuid4().hex[:10]}@example.com"
    coach = sign_up(stack, email, "e2e page coach password")
    verify = requests.post(f"{gw}/v1/auth/email/verify", headers=bearer(coach), json={"token": link_token(wait_for_mail(stack, email)[0])}, timeout=10)
    assert verify.status_code == 200, verify.text
    assert requests.post(f"{gw}/v1/auth/roles/coach", headers=bearer(coach), timeout=10).status_code == 200
    return refresh(stack, coach)


def test_the_invitation_page_opens_the_app_or_its_store_page(stack, browser):
    gw = stack.gateway
    coach = verified_coach(stack)
    client_email = f"e2e-page-client-{uuid.uuid4().hex[:10]}@example.com"
    created = requests.post(f"{gw}/v1/clients", headers=bearer(coach), json={"name": "Page Client", "email": client_email}, timeout=10)
    assert created.status_code == 201, created.text
    text = wait_for_mail(stack, client_email)[0].get_body(preferencelist=("plain",)).get_content()
    url = re.search(r"https?://\S+/invite\?code=[A-Za-z0-9_-]+", text).group(0)
    code = url.split("code=")[1]
    assert url.startswith(gw), url
    assert_page_headers(url, 200)

    browser.get(url)
    assert "invited" in body_text(browser).lower(), body_text(browser)
    hrefs = [link.get_attribute("href") for link in browser.find_elements(By.TAG_NAME, "a")]
    assert any(href and href.endswith(f"://invite?code={code}") and not href.startswith("http") for href in hrefs), hrefs
    assert any(href and href.startswith("https://apps.apple.com/") for href in hrefs), hrefs
    banner = browser.find_elements(By.CSS_SELECTOR, "meta[name=apple-itunes-app]")
    if banner:
        assert f"app-argument={url}" in banner[0].get_attribute("content")

    # A revoked invitation, and a code never issued: a friendly page, never a 500.
    client_id = created.json()["id"]
    revoked = requests.post(f"{gw}/v1/clients/{client_id}/invitation/revoke", headers=bearer(coach), timeout=10)
    assert revoked.status_code == 200, revoked.text
    assert_page_headers(url, 410)
    browser.get(url)
    assert "invited" not in body_text(browser).lower() or "no longer" in body_text(browser).lower(), body_text(browser)
    assert_page_headers(f"{gw}/invite?code={'x' * 32}", 404)
    assert_page_headers(f"{gw}/invite", 404)


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_a_shared_meal_page_with_its_card_then_gone(stack, browser):
    gw = stack.gateway
    email = f"e2e-page-share-{uuid.uuid4().hex[:10]}@example.com"
    user = bearer(sign_up(stack, email, "e2e page share password"))
    profile = requests.put(f"{gw}/v1/nutrition/profile", headers=user, json={"diet": "keto", "daily_calorie_goal": 1800, "weight_unit": "kg",
                           "time_zone": "Europe/Paris", "day_starts_at": 0}, timeout=10)
    assert profile.status_code == 200, profile.text
    eaten_at = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)).isoformat()
    meal = requests.post(f"{gw}/v1/meals", headers=user, json={
        "name": "Salmon & <avocado> bowl", "eaten_at": eaten_at,
        "items": [{"name": "salmon", "grams": 150, "calories": 310, "protein_g": 31, "carbs_g": 0, "fat_g": 20},
                  {"name": "avocado", "grams": 100, "calories": 160, "protein_g": 2, "carbs_g": 9, "fat_g": 15}],
    }, timeout=10)
    assert meal.status_code == 201, meal.text
    share = requests.post(f"{gw}/v1/meals/{meal.json()['id']}/share", headers=user, timeout=10)
    assert share.status_code == 201, share.text
    url = share.json()["url"]
    assert url.startswith(f"{gw}/shared/"), url
    assert_page_headers(url, 200)

    browser.get(url)
    assert "Salmon & <avocado> bowl" in body_text(browser)
    image = browser.find_element(By.CSS_SELECTOR, "meta[property='og:image']").get_attribute("content")
    assert browser.find_element(By.CSS_SELECTOR, "meta[name='twitter:card']").get_attribute("content") == "summary_large_image"
    card = requests.get(image, timeout=20)
    assert card.status_code == 200 and card.headers["Content-Type"] == "image/png"
    assert png_size(card.content) == (1200, 630)

    assert requests.delete(f"{gw}/v1/meals/{meal.json()['id']}/share", headers=user, timeout=10).status_code == 204
    assert_page_headers(url, 410)
    assert_page_headers(f"{gw}/shared/{'y' * 32}", 404)
