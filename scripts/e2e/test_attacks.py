"""End-to-end attacks on the tokens and on the edge (the IDOR matrix is test_attacks_idor.py).

1. Forged and dead access tokens, on every service's own port and through the gateway: expired, a
   wrong signature, `alg: none`, HS256 keyed with the published public key, another audience or
   issuer, a signed-out session, a deleted account. Each forgery changes one thing in a token signed
   here with auth's own key, which is first shown to be accepted.
2. Hostile bodies through the gateway to every route that reads JSON (nested 10,000 deep, numbers
   past Double, invalid UTF-8, NUL in strings and keys, bodies over the limit, a 1 GB
   Content-Length), and slow clients (slowloris, a body a byte a second) against a gateway started
   here with a short CLIENT_TIMEOUT_MS: each is a 4xx or a closed connection, the gateway's memory
   stays bounded, and another client is served meanwhile.
docs/SECURITY.md, "Attack set", says what each attack gets."""
import base64
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import TABLE, problem
from test_invitations import bearer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METHODS = ("get", "put", "post", "patch", "delete")


def document():
    with open(os.path.join(ROOT, "docs", "openapi.json")) as f:
        return json.load(f)


def resolve(doc, node):
    while isinstance(node, dict) and "$ref" in node:
        target = doc
        for part in node["$ref"].split("/")[1:]:
            target = target[part]
        node = target
    return node


def operations(doc):
    """(METHOD, path, operation, its parameters resolved) for every operation of the document."""
    for path, item in sorted(doc["paths"].items()):
        shared = [resolve(doc, p) for p in item.get("parameters", [])]
        for method in METHODS:
            if method in item:
                op = item[method]
                yield method.upper(), path, op, shared + [resolve(doc, p) for p in op.get("parameters", [])]


def service_of(path):
    """The service whose prefix (whole segments, the longest) takes `path`, as the gateway routes."""
    best = None
    for service in TABLE:
        for prefix in service.prefixes:
            if (path == prefix or path.startswith(prefix + "/")) and (best is None or len(prefix) > len(best[1])):
                best = (service.name, prefix)
    return best and best[0]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signup(stack, tag):
    email = f"e2e-attack-{tag}-{uuid.uuid4().hex[:10]}@example.com"
    password = f"e2e attack {tag} password"
    response = requests.post(f"{stack.gateway}/v1/auth/signup", json={"email": email, "password": password}, timeout=10)
    assert response.status_code == 201, response.text
    body = response.json()
    return {"id": body["user"]["id"], "email": email, "password": password, **body["session"]}


def signature(token):
    return base64.urlsafe_b64decode(token.split(".")[2] + "==")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


# -- 1. Tokens -----------------------------------------------------------------------------------

class Forger:
    """Signs tokens with auth's own key (the stack's JWT_SIGNING_KEY), so that each forgery below
    differs from an accepted token in one thing only."""

    def __init__(self, stack):
        with open(os.path.join(stack.dir, "jwt-signing-key.pem"), "rb") as f:
            self.key = serialization.load_pem_private_key(f.read(), password=None)
        self.jwks = requests.get(f"{stack.gateway}/.well-known/jwks.json", timeout=10).json()
        self.kid = self.jwks["keys"][0]["kid"]

    def sign(self, claims, key=None, headers=None):
        return jwt.encode(claims, key or self.key, algorithm="ES256", headers={"kid": self.kid, **(headers or {})})

    @staticmethod
    def unsigned(header, claims, signature=b""):
        return f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}.{b64url(signature)}"

    def hs256(self, claims, secret):
        head_body = Forger.unsigned({"alg": "HS256", "typ": "JWT", "kid": self.kid}, claims).rsplit(".", 1)[0]
        return f"{head_body}.{b64url(hmac.new(secret, head_body.encode(), hashlib.sha256).digest())}"

    def public_key_spellings(self):
        """The public key as an HS256 secret in each spelling a confused verifier might use."""
        public = self.key.public_key()
        jwk = self.jwks["keys"][0]
        return {"PEM": public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
                "DER": public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo),
                "JWK": json.dumps(jwk).encode(),
                "X9.62 point": public.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)}


def token_probes(doc):
    """Every signed-in GET without a path parameter, by the service that serves it (the event stream
    is the gateway's own and answered separately)."""
    probes = {}
    for method, path, op, params in operations(doc):
        if method != "GET" or "{" in path or path == "/v1/events" or not any("bearer" in s for s in op.get("security", [])):
            continue
        probes.setdefault(service_of(path), []).append(path)
    return probes


def call_all(stack, probes, token, via_gateway=True, gateway_once=False):
    """{(where, path): response} for every probe, on the service's own port and through the gateway
    (or through it for the first probe of each service only: the service decides, the gateway passes
    the token on)."""
    answers = {}
    for service, paths in probes.items():
        for index, path in enumerate(paths):
            gateway = via_gateway and (index == 0 or not gateway_once)
            bases = [(service, stack.service_urls[service])] + ([("gateway", stack.gateway)] if gateway else [])
            for where, base in bases:
                answers[(where, path)] = requests.get(base + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    return answers


def assert_refused(answers, codes, what):
    wrong = {}
    for (where, path), response in answers.items():
        ok = response.status_code == 401 and response.headers.get("Content-Type") == "application/problem+json"
        if ok:
            body = problem(response)
            ok = body["code"] in codes and body["status"] == 401
        if not ok:
            wrong[f"{where} {path}"] = f"{response.status_code} {response.text[:120]}"
    assert not wrong, f"{what}: not a 401 problem with {sorted(codes)}:\n" + "\n".join(f"  {k}: {v}" for k, v in sorted(wrong.items()))


def events_refuse(stack, token, codes):
    with requests.get(f"{stack.gateway}/v1/events", headers={"Authorization": f"Bearer {token}"}, stream=True, timeout=10) as response:
        assert response.status_code == 401, f"/v1/events took {response.status_code}"
        assert problem(response)["code"] in codes


def test_forged_tokens_are_refused_by_every_service_and_the_gateway(stack):
    doc = document()
    probes = token_probes(doc)
    assert set(probes) == {s.name for s in TABLE}, f"a service without a signed-in GET to probe: {set(s.name for s in TABLE) - set(probes)}"
    forger = Forger(stack)
    user = signup(stack, "tokens")
    real = jwt.decode(user["access_token"], options={"verify_signature": False})
    now = int(time.time())

    # The control: a token signed here with the real key and a real session's claims passes the
    # token check everywhere (a probe may still want a role or a verified address: 403, never 401),
    # so each forgery below fails for its one change alone.
    control = forger.sign(real)
    refused = {k: r.status_code for k, r in call_all(stack, probes, control).items() if r.status_code == 401 or r.status_code >= 500}
    assert not refused, f"the control token was refused: {refused}"

    forgeries = {
        "expired (past the 30 s leeway)": (forger.sign({**real, "iat": now - 1000, "exp": now - 120}), {"token_expired"}),
        "not yet valid": (forger.sign({**real, "nbf": now + 600}), {"invalid_token"}),
        "signed by another key under auth's kid": (forger.sign(real, key=ec.generate_private_key(ec.SECP256R1())), {"invalid_token"}),
        "the payload changed under a real signature": (
            ".".join([user["access_token"].split(".")[0], b64url(json.dumps({**real, "sub": str(uuid.uuid4())}).encode()),
                      user["access_token"].split(".")[2]]), {"invalid_token"}),
        "alg none, no signature": (Forger.unsigned({"alg": "none", "typ": "JWT", "kid": forger.kid}, real), {"invalid_token"}),
        "alg none, the real signature kept": (
            Forger.unsigned({"alg": "none", "kid": forger.kid}, real, signature(user["access_token"])),
            {"invalid_token"}),
        "another audience": (forger.sign({**real, "aud": ["someone-else"]}), {"invalid_token"}),
        "another issuer": (forger.sign({**real, "iss": "https://issuer.example.com"}), {"invalid_token"}),
        "no kid": (jwt.encode(real, forger.key, algorithm="ES256"), {"invalid_token"}),
        "an unknown kid": (jwt.encode(real, forger.key, algorithm="ES256", headers={"kid": "not-a-key-of-auth"}), {"invalid_token"}),
        "sub not a user id": (forger.sign({**real, "sub": "admin"}), {"invalid_token"}),
    }
    # The real key's signature under a header whose alg is spelt otherwise (PyJWT writes alg itself).
    forgeries["alg spelt es256"] = (Forger.unsigned({"alg": "es256", "kid": forger.kid}, real, signature(forger.sign(real))), {"invalid_token"})
    for spelling, secret in forger.public_key_spellings().items():
        forgeries[f"HS256 keyed with the public key ({spelling})"] = (forger.hs256(real, secret), {"invalid_token"})
    for what, (token, codes) in forgeries.items():
        assert_refused(call_all(stack, probes, token, gateway_once=True), codes, what)
        events_refuse(stack, token, codes)


def gateway_hears_the_end(stack, token):
    """Waits until a route through the gateway refuses `token`: the end reaches the gateway on its
    live subscription, a moment after auth's answer, and it marks the token's requests from then on."""
    stack.wait_until(lambda: requests.get(f"{stack.gateway}/v1/profiles/me", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code == 401,
                     seconds=20, what="the gateway refusing the ended session's token")


def test_a_signed_out_session_and_a_deleted_account(stack):
    """auth refuses a signed-out session's or a deleted account's token at once, and every route
    through the gateway that needs a caller once the gateway has heard the end; straight to the
    services behind it a signed-out session's token is taken until it expires (SECURITY.md, Tokens). Each probe the token passed before (a 2xx) is compared
    after; one it did not pass (a role it lacks) stays refused."""
    probes = token_probes(document())
    gw = stack.gateway

    out = signup(stack, "signed-out")
    before = call_all(stack, probes, out["access_token"])
    assert requests.post(f"{gw}/v1/auth/logout", headers=bearer(out), timeout=10).status_code == 204
    gateway_hears_the_end(stack, out["access_token"])
    after = call_all(stack, probes, out["access_token"])
    at_auth = {k: r for k, r in after.items() if service_of(k[1]) == "auth"}
    assert_refused({k: r for k, r in at_auth.items() if before[k].ok}, {"session_revoked"}, "a signed-out session at auth")
    assert not [k for k, r in at_auth.items() if r.ok], at_auth
    through = {k: r for k, r in after.items() if k[0] == "gateway"}
    assert_refused({k: r for k, r in through.items() if before[k].ok}, {"session_revoked"}, "a signed-out session through the gateway")
    assert not [k for k, r in through.items() if r.ok], through
    changed = {f"{where} {path}": (before[(where, path)].status_code, r.status_code) for (where, path), r in after.items()
               if service_of(path) != "auth" and where != "gateway" and r.status_code != before[(where, path)].status_code}
    assert not changed, f"the other services answer a signed-out session's token as before, until it expires: {changed}"
    events_refuse(stack, out["access_token"], {"session_revoked"})
    # A route that needs no caller ignores the token, as an app that keeps its last one attached
    # signs in again with it.
    again = requests.post(f"{gw}/v1/auth/login", headers=bearer(out), json={"email": out["email"], "password": out["password"]}, timeout=10)
    assert again.status_code == 200, again.text

    gone = signup(stack, "deleted")
    stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/me", headers=bearer(gone), timeout=10).status_code == 200, seconds=20,
                     what="the profile of the account to delete")
    before = call_all(stack, probes, gone["access_token"])
    deleted = requests.delete(f"{gw}/v1/auth/account", headers=bearer(gone), json={"password": gone["password"]}, timeout=10)
    assert deleted.status_code == 202, deleted.text
    gateway_hears_the_end(stack, gone["access_token"])
    after = call_all(stack, probes, gone["access_token"])
    assert_refused({k: r for k, r in after.items() if service_of(k[1]) == "auth" and before[k].ok}, {"session_revoked"}, "a deleted account at auth")
    assert_refused({k: r for k, r in after.items() if k[0] == "gateway" and before[k].ok}, {"session_revoked"}, "a deleted account through the gateway")
    assert not [k for k, r in after.items() if r.status_code >= 500], after
    events_refuse(stack, gone["access_token"], {"session_revoked"})


def test_a_gateway_started_after_a_sign_out_refuses_its_token(stack):
    """What the gateway heard end it keeps in memory; a gateway started afterwards (a deploy, a
    crash) reads the last minutes' endings from the event stream before its port opens, so a
    signed-out session's token is refused from its first request on, and no other session is
    (SECURITY.md, Tokens)."""
    gw = stack.gateway
    out = signup(stack, "restart-signed-out")
    still = signup(stack, "restart-signed-in")
    assert requests.post(f"{gw}/v1/auth/logout", headers=bearer(out), timeout=10).status_code == 204
    gateway_hears_the_end(stack, out["access_token"])
    stack.terminate("gateway")
    stack.up()
    # The public port, not the internal one (which opens at once).
    stack.wait_until(lambda: requests.get(f"{gw}/healthz", timeout=5).status_code == 200, what="the gateway back")
    refused = requests.get(f"{gw}/v1/profiles/me", headers=bearer(out), timeout=10)
    assert refused.status_code == 401 and problem(refused)["code"] == "session_revoked", refused.text
    stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/me", headers=bearer(still), timeout=10).status_code == 200,
                     what="another session's token taken through the new gateway")


def test_a_deleted_accounts_token_leaves_nothing_behind(stack):
    """A deleted account's access token outlives it by up to 15 minutes straight to the services
    (through the gateway it is refused once the gateway hears of the deletion). Whatever it asks of a service after user.deleted has
    been handled there must not leave a row naming the account."""
    from test_journeys import rows_naming
    gw = stack.gateway
    gone = signup(stack, "ghost")
    other = signup(stack, "ghost-friend")
    stack.wait_until(lambda: requests.get(f"{gw}/v1/profiles/me", headers=bearer(gone), timeout=10).status_code == 200, seconds=20,
                     what="the profile of the account to delete")
    deleted = requests.delete(f"{gw}/v1/auth/account", headers=bearer(gone), json={"password": gone["password"]}, timeout=10)
    assert deleted.status_code == 202, deleted.text
    stack.wait_until(lambda: not rows_naming(stack, gone["id"]), seconds=30, what="every service forgetting the deleted account")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    attempts = [
        ("PATCH", "/v1/profiles/me", {"bio": "still here"}), ("POST", f"/v1/profiles/{other['id']}/follow", None),
        ("PUT", "/v1/nutrition/profile", {"diet": "keto", "daily_calorie_goal": 1800, "weight_unit": "kg", "time_zone": "UTC"}),
        ("POST", "/v1/meals", {"name": "Ghost toast", "eaten_at": now, "items": [
            {"name": "Toast", "grams": 50, "calories": 130, "protein_g": 4, "carbs_g": 24, "fat_g": 2}]}),
        ("POST", "/v1/metrics/weight", {"value": 70, "unit": "kg"}),
        ("GET", "/v1/entitlements/me", None), ("POST", "/v1/spaces", {"name": "Ghost space"}),
        ("POST", "/v1/usage/sources/acquire", {"amount": 1}),
        ("PUT", "/v1/training/settings", {"time_zone": "Europe/Paris", "weight_unit": "lbs"}),
        ("GET", "/v1/training/settings", None),
    ]
    # Straight to each service: through the gateway the token is refused once the gateway hears of
    # the deletion, and a caller inside the network reaches the services without it.
    answers = {f"{method} {path}": requests.request(method, stack.service_urls[service_of(path)] + path, headers=bearer(gone), json=body,
                                                    timeout=10).status_code
               for method, path, body in attempts}
    assert all(status < 500 for status in answers.values()), answers
    left = rows_naming(stack, gone["id"])
    assert not left, f"rows naming the deleted account after its token's requests {answers}: {left}"


# -- 2. The edge ---------------------------------------------------------------------------------

DEEP = 10_000
HOSTILE_BODIES = {
    "arrays nested 10,000 deep": b"[" * DEEP + b"]" * DEEP,
    "objects nested 10,000 deep": b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    "1e400": b'{"name": 1e400, "value": 1e400, "amount": 1e400}',
    "a 400-digit integer": b'{"name": ' + b"9" * 400 + b', "value": ' + b"9" * 400 + b"}",
    "invalid UTF-8": b'{"name": "\xff\xfe\xc0\xaf", "email": "\xed\xa0\x80@example.com"}',
    "a NUL escaped in a string": b'{"name": "a\\u0000b", "email": "a\\u0000@example.com", "text": "\\u0000"}',
    "a raw NUL in a string": b'{"name": "a\x00b"}',
    "a NUL in a key": b'{"na\\u0000me": "x", "email\\u0000": "x"}',
    "a lone surrogate": b'{"name": "\\ud800", "text": "\\udfff"}',
}


def json_routes(doc):
    """Every operation that reads a JSON body, with its path filled in (ids that name nothing)."""
    routes = []
    for method, path, op, params in operations(doc):
        body = resolve(doc, op.get("requestBody", {}))
        if "application/json" not in body.get("content", {}):
            continue
        filled = path
        for param in params:
            if param["in"] == "path":
                schema = resolve(doc, param.get("schema", {}))
                value = schema["enum"][0] if "enum" in schema else str(uuid.uuid4()) if schema.get("format") == "uuid" else "sources"
                filled = filled.replace("{" + param["name"] + "}", value)
        routes.append((method, path, filled))
    return routes


def test_hostile_json_gets_a_4xx_on_every_route_that_reads_json(stack):
    gw = stack.gateway
    user = signup(stack, "bodies")
    pid = stack.pid("gateway")
    rss_before = rss_kib(pid)
    wrong = {}
    for method, path, filled in json_routes(document()):
        for what, body in HOSTILE_BODIES.items():
            response = requests.request(method, gw + filled, data=body, timeout=10,
                                        headers={**bearer(user), "Content-Type": "application/json"})
            ok = 400 <= response.status_code < 500 and response.headers.get("Content-Type") == "application/problem+json"
            if not ok:
                wrong[f"{method} {path} with {what}"] = f"{response.status_code} {response.text[:100]}"
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in sorted(wrong.items()))
    # The session survived every body (none of them was taken for a sign-out or an edit).
    assert requests.get(f"{gw}/v1/auth/me", headers=bearer(user), timeout=10).status_code == 200
    assert rss_kib(pid) - rss_before < 64 * 1024, (rss_before, rss_kib(pid))


def test_hostile_values_in_real_fields_are_refused(stack):
    """Numbers past Double and NUL bytes where a route takes a number or a text: refused, never
    stored as infinity, zero, a truncated text or a password cut at its NUL."""
    gw = stack.gateway
    user = signup(stack, "values")
    big = "9" * 400
    cases = [
        ("POST", "/v1/metrics/weight", b'{"value": 1e400, "unit": "kg"}'),
        ("POST", "/v1/metrics/weight", b'{"value": -1e400, "unit": "kg"}'),
        ("POST", "/v1/metrics/weight", ('{"value": %s, "unit": "kg"}' % big).encode()),
        ("POST", "/v1/metrics/ketones", b'{"mmol_per_l": 1e400}'),
        ("PUT", "/v1/nutrition/profile", ('{"diet": "keto", "daily_calorie_goal": %s, "weight_unit": "kg", "time_zone": "UTC"}' % big).encode()),
        ("POST", "/v1/usage/sources/acquire", ('{"amount": %s}' % big).encode()),
        ("POST", "/v1/usage/sources/acquire", b'{"amount": 1e400}'),
        ("POST", "/v1/meals", b'{"name": "Big", "eaten_at": "2026-01-01T12:00:00Z", "items": [{"name": "x", "grams": 1e400, '
                              b'"calories": 1e400, "protein_g": 1, "carbs_g": 1, "fat_g": 1}]}'),
        ("PATCH", "/v1/profiles/me", b'{"bio": "a\\u0000b"}'),
        ("PATCH", "/v1/profiles/me", b'{"display_name": "\\u0000"}'),
        ("POST", "/v1/spaces", b'{"name": "lab\\u0000"}'),
        ("PUT", "/v1/training/settings", b'{"time_zone": "UTC\\u0000", "weight_unit": "kg"}'),
        ("POST", "/v1/auth/signup", b'{"email": "nul\\u0000@example.com", "password": "a long enough password"}'),
    ]
    wrong = {}
    for method, path, body in cases:
        response = requests.request(method, gw + path, data=body, headers={**bearer(user), "Content-Type": "application/json"}, timeout=10)
        if not (400 <= response.status_code < 500 and response.headers.get("Content-Type") == "application/problem+json"):
            wrong[f"{method} {path} {body[:60]!r}"] = f"{response.status_code} {response.text[:100]}"
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())
    assert not [d for d in requests.get(f"{gw}/v1/metrics/weight?days=7", headers=bearer(user), timeout=10).json()["days"] if d["value"] is not None]
    assert requests.get(f"{gw}/v1/entitlements/me", headers=bearer(user), timeout=10).json()["limits"]["sources"]["used"] == 0

    # A password with a NUL, where bcrypt would stop: refused.
    email = f"e2e-attack-nul-{uuid.uuid4().hex[:10]}@example.com"
    made = requests.post(f"{gw}/v1/auth/signup", json={"email": email, "password": "the same start\u0000one ending"}, timeout=10)
    assert made.status_code == 400 and problem(made)["code"] == "weak_password", made.text


def raw_exchange(port, head, body=b"", read_seconds=5):
    """Sends `head` and `body` on a fresh connection; returns what came back until the server closed
    it or `read_seconds` passed, and whether it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_seconds) as s:
        s.sendall(head + body)
        received, deadline = b"", time.time() + read_seconds
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError, socket.timeout):
                return received, True
            if not chunk:
                return received, True
            received += chunk
        return received, False


def status_of(raw):
    match = re.match(rb"HTTP/1\.1 (\d{3})", raw)
    return int(match.group(1)) if match else None


def test_bodies_over_the_limit_are_413_before_they_are_read(stack):
    gw = stack.gateway
    port = int(gw.rsplit(":", 1)[1])
    pid = stack.pid("gateway")
    user = signup(stack, "sizes")
    rss_before = rss_kib(pid)

    over = b'{"name": "' + b"x" * (300 * 1024) + b'"}'
    sized = requests.post(f"{gw}/v1/spaces", data=over, headers={**bearer(user), "Content-Type": "application/json"}, timeout=10)
    assert sized.status_code == 413 and problem(sized)["code"] == "payload_too_large", sized.text
    chunked = requests.post(f"{gw}/v1/spaces", data=iter([over[i:i + 16384] for i in range(0, len(over), 16384)]),
                            headers={**bearer(user), "Content-Type": "application/json"}, timeout=10)
    assert chunked.status_code == 413 and problem(chunked)["code"] == "payload_too_large", chunked.text

    # A 1 GB Content-Length with a body that trickles: 413 at once, from the header alone, and closed.
    auth = f"Authorization: Bearer {user['access_token']}\r\n".encode()
    for path in (b"/v1/spaces", b"/v1/profiles/me/avatar", b"/v1/auth/signup"):
        started = time.time()
        raw, closed = raw_exchange(port, b"POST " + path + b" HTTP/1.1\r\nHost: gw\r\n" + auth +
                                   b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n", b'{"name": "', read_seconds=5)
        assert status_of(raw) == 413 and closed and time.time() - started < 4, (path, raw[:200], closed)
    # Many such requests at once hold nothing: the gateway stays within bounds and serves others.
    sockets = []
    try:
        for _ in range(50):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            sockets.append(s)
            try:
                s.sendall(b"POST /v1/spaces HTTP/1.1\r\nHost: gw\r\n" + auth + b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n"
                          + b"x" * 65536)
            except OSError:
                pass  # refused and closed before the bytes went: as it should
        started = time.time()
        assert requests.get(f"{gw}/v1/auth/me", headers=bearer(user), timeout=5).status_code == 200
        assert time.time() - started < 4
    finally:
        for s in sockets:
            s.close()
    assert rss_kib(pid) - rss_before < 64 * 1024, (rss_before, rss_kib(pid))


def test_broken_framing_is_400_at_the_gateway_and_every_service(stack):
    """A request whose framing is not HTTP (a chunk size that is no number, halfway through a body;
    two lengths; a length and chunks; a negative length): a 4xx (400 once the body is read) and the
    connection closed, never a 5xx, on the gateway and on each service's own port."""
    user = signup(stack, "framing")
    routes = {}
    for method, path, filled in json_routes(document()):
        if method == "POST" and "{" not in path:
            routes.setdefault(service_of(path), filled)
    framings = {
        "a chunk size that is no number": b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
        "a chunk size past 64 bits": b"Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n",
        "a length and chunks": b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "two lengths": b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        "a negative length": b"Content-Length: -1\r\n\r\n",
    }
    wrong = {}
    for service, path in sorted(routes.items()):
        for where, url in (("gateway", stack.gateway), (service, stack.service_urls[service])):
            for what, framing in framings.items():
                head = f"POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {user['access_token']}\r\nContent-Type: application/json\r\n".encode()
                raw, closed = raw_exchange(int(url.rsplit(":", 1)[1]), head + framing, read_seconds=5)
                # A route that answers before it reads the body (a role it wants) answers so first.
                statuses = [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]
                if not statuses or not all(400 <= code < 500 for code in statuses) or not closed:
                    wrong[f"{where} POST {path} with {what}"] = f"{statuses} closed={closed} {raw[-120:]!r}"
    assert set(routes) == {s.name for s in TABLE}, routes
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in sorted(wrong.items()))


@pytest.fixture
def short_gateway(stack):
    """A second gateway in front of the same services, with CLIENT_TIMEOUT_MS=5000: what the
    stack's gateway does after its 75 s, in 5 s (seconds enough that a loaded machine does not
    make a served client look cut off)."""
    with open(os.path.join(stack.dir, "bin-path")) as f:
        binary = os.path.join(f.read().strip(), "gateway")
    ports = [int(subprocess.run(["python3", os.path.join(ROOT, "scripts", "lib", "ports.py")], capture_output=True, text=True, check=True).stdout)
             for _ in range(2)]
    settings = dict(item.split("=", 1) for item in os.environ.get("STACK_ENV", "").split() if "=" in item)
    env = {**os.environ, **settings, "APP_ENV": "development", "HTTP_HOST": "127.0.0.1", "HTTP_PORT": str(ports[0]), "ADMIN_HTTP_PORT": str(ports[1]),
           "REDIS_URL": f"redis://127.0.0.1:{stack.redis_port}", "JWT_ISSUER": stack.gateway, "EVENT_LOOP_THREADS": "1",
           "CLIENT_TIMEOUT_MS": "5000", **{f"{name.upper()}_URL": url for name, url in stack.service_urls.items()}}
    log = open(os.path.join(stack.dir, "logs", "gateway-short-timeout.log"), "ab")
    process = subprocess.Popen([binary], env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        stack.wait_until(lambda: requests.get(f"http://127.0.0.1:{ports[1]}/readyz", timeout=2).status_code == 200, seconds=30,
                         what="the short-timeout gateway ready")
        yield process, ports[0]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def test_slow_clients_are_cut_off_while_others_are_served(stack, short_gateway):
    process, port = short_gateway
    url = f"http://127.0.0.1:{port}"
    user = signup(stack, "slow")
    rss_before = rss_kib(process.pid)

    # Slowloris: many connections, each sending one byte of a request head a second.
    head = b"GET /v1/auth/me HTTP/1.1\r\nHost: gw\r\nX-Padding: " + b"a" * 64
    sockets = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setblocking(False)
        sockets.append(s)
    # And a body that trickles (its head whole, then a byte a second) and then stalls. A body's
    # parts need only come within the timeout of each other: one that kept trickling would be served.
    slow_body = socket.create_connection(("127.0.0.1", port), timeout=5)
    slow_body.sendall(b"POST /v1/auth/login HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
    slow_body.setblocking(False)
    sockets.append(slow_body)

    closed_at, slowest = {}, 0.0
    started = time.time()
    for second in range(14):
        for index, s in enumerate(sockets):
            if index in closed_at:
                continue
            try:
                data = s.recv(65536)
                if data == b"" or data.startswith(b"HTTP/1.1 408") or data.startswith(b"HTTP/1.1 4"):
                    closed_at[index] = time.time() - started
                    continue
            except BlockingIOError:
                pass
            except (ConnectionResetError, OSError):
                closed_at[index] = time.time() - started
                continue
            try:
                if s is not slow_body or second < 3:
                    s.send(head[second:second + 1] if s is not slow_body else b"{")
            except (BrokenPipeError, ConnectionResetError, OSError):
                closed_at[index] = time.time() - started
        # Another client meanwhile: served at once, signed in through the same gateway.
        asked = time.time()
        answer = requests.get(f"{url}/v1/auth/me", headers=bearer(user), timeout=5)
        slowest = max(slowest, time.time() - asked)
        assert answer.status_code == 200, answer.text
        if len(closed_at) == len(sockets):
            break
        time.sleep(max(0.0, started + second + 1 - time.time()))
    for s in sockets:
        s.close()
    assert len(closed_at) == len(sockets), f"{len(sockets) - len(closed_at)} slow connections still open after {time.time() - started:.1f}s"
    # The heads within the timeout of connecting, the stalled body within it of its last byte (at 2 s).
    assert max(v for k, v in closed_at.items() if sockets[k] is not slow_body) < 5 + 2, closed_at
    assert closed_at[len(sockets) - 1] < 2 + 5 + 2, closed_at[len(sockets) - 1]
    # Under the fixture's 5 s client timeout: one that waited for the slow ones to be cut off fails.
    assert slowest < 4.5, slowest
    assert rss_kib(process.pid) - rss_before < 64 * 1024, (rss_before, rss_kib(process.pid))
