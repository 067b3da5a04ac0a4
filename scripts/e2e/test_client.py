"""The Swift client (Clients/Swift) against the whole stack: the ClientJourneys executable runs the
apps' flows through the client only, and every route of the merged API document (the gateway's
GET /openapi.json) must have been called by them: the uncalled ones are listed and fail the test.

What an app cannot do through the API, the journeys ask of a small local fixtures server run here:
the mail the stack's SMTP sink caught, App Store transactions signed by the e2e issuer
(appstore.py), and a first admin made with `auth create-admin`, as an operator would."""
import json
import os
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from appstore import Issuer
from test_auth import mails_to

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def fixtures(stack):
    issuer = Issuer(os.path.join(stack.dir, "appstore"))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, status, value):
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            try:
                self.answer(200, self.fixture(self.path, request))
            except Exception as error:  # the journey reports it
                self.answer(500, {"error": repr(error)})

        def fixture(self, path, request):
            if path == "/mail":
                # Every mail to the address whose subject starts so, oldest first, once there are at
                # least `count`: its subject and List-Unsubscribe headers, a blank line, its plain text.
                def matching():
                    return [f"Subject: {m['Subject']}\nList-Unsubscribe: {m['List-Unsubscribe'] or ''}\n\n"
                            + m.get_body(preferencelist=("plain",)).get_content()
                            for m in mails_to(stack, request["to"]) if m["Subject"].startswith(request.get("subject", ""))]
                deadline = time.time() + 30
                while len(matching()) < request.get("count", 1) and time.time() < deadline:
                    time.sleep(0.1)
                return {"texts": matching()}
            if path == "/appstore/transaction":
                payload = issuer.transaction(request["original"], product=request.get("product", "com.researchapp.pro.monthly"),
                                             token=request.get("token"), expires_ms=issuer.now_ms() + request.get("expires_in_ms", 3_600_000))
                return {"signed": issuer.sign(payload), "payload": payload}
            if path == "/appstore/notification":
                return {"signed": issuer.notification(request["type"], request["payload"], subtype=request.get("subtype"))}
            if path == "/admin":
                with open(os.path.join(stack.dir, "bin-path")) as f:
                    binary = os.path.join(f.read().strip(), "auth")
                port = stack.service_urls["auth"].rsplit(":", 1)[1]
                env = {**os.environ, "APP_ENV": "development", "HTTP_HOST": "127.0.0.1", "HTTP_PORT": port,
                       "DATABASE_URL": f"postgres://auth:auth@127.0.0.1:{stack.pg_ports['auth']}/foodbackend",
                       "REDIS_URL": f"redis://127.0.0.1:{stack.redis_port}", "JWT_SIGNING_KEY": os.path.join(stack.dir, "jwt-signing-key.pem"),
                       "JWT_ISSUER": stack.gateway, "APP_BASE_URL": stack.gateway,
                       "JWKS_URL": f"{stack.service_urls['auth']}/.well-known/jwks.json",
                       "SMTP_URL": f"smtp://127.0.0.1:{os.environ['STACK_SMTP_PORT']}", "ADMIN_PASSWORD": request["password"]}
                done = subprocess.run([binary, "create-admin", request["email"]], env=env, capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stdout + done.stderr
                return {"said": done.stdout.strip()}
            raise ValueError(f"no fixture at {path}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def operations(document):
    return {f"{method}{path}" for path, item in document["paths"].items() for method in item if method in METHODS}


def journeys_binary():
    """ClientJourneys from the debug build, with the client's assertions: the stack runs the
    release build of the server, which does not hold the client (scripts/lib/build-executables).
    A no-op where scripts/test's debug build is there."""
    subprocess.run(["swift", "build", "--product", "ClientJourneys"], cwd=ROOT, check=True, capture_output=True)
    bin_path = subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    return os.path.join(bin_path, "ClientJourneys")


def test_the_apps_flows_through_the_swift_client_call_every_route(stack, tmp_path):
    server = fixtures(stack)
    coverage = tmp_path / "called.txt"
    try:
        run = subprocess.run([journeys_binary()], cwd=ROOT, capture_output=True, text=True, timeout=600, env={
            **os.environ, "FOODBACKEND_URL": stack.gateway, "FIXTURES_URL": f"http://127.0.0.1:{server.server_address[1]}",
            "CLIENT_COVERAGE_FILE": str(coverage)})
    finally:
        server.shutdown()
    print(run.stdout)
    # A stack mixing two releases (scripts/release-matrix) cannot serve the operations new in this
    # release whose process is the previous release's: E2E_UNSERVED_OPERATIONS lists them. Nor can
    # it answer as this release does where the previous release's answer differs in a way this
    # release's client relies on (a field added as always there): E2E_CHANGED_OPERATIONS. There a
    # journey may stop on one of the first, answered 404, or on one of the second, however
    # answered, and nowhere else; the route coverage, which such a journey cannot complete, is
    # checked on a stack of one release.
    unserved = set(os.environ.get("E2E_UNSERVED_OPERATIONS", "").split())
    changed = set(os.environ.get("E2E_CHANGED_OPERATIONS", "").split())
    if unserved or changed:
        failed = [line for line in run.stdout.splitlines() if line.startswith("FAIL")]
        unexpected = [line for line in failed
                      if not any(line.endswith(f"(after {operation} answered 404)") for operation in unserved)
                      and not any(re.search(rf"\(after {re.escape(operation)} answered \d+\)$", line) for operation in changed)]
        assert not unexpected and (run.returncode == 0) == (not failed), f"the journeys failed:\n{run.stdout[-6000:]}\n{run.stderr[-6000:]}"
        return
    assert run.returncode == 0, f"the journeys failed:\n{run.stdout[-6000:]}\n{run.stderr[-6000:]}"
    assert re.search(r"^journeys: \d+ passed, 0 failed$", run.stdout, re.M), run.stdout[-3000:]

    # Every route of the merged document, as the gateway serves it now, was called by the client.
    document = requests.get(f"{stack.gateway}/openapi.json", timeout=10).json()
    called = set(coverage.read_text().split())
    uncalled = sorted(operations(document) - called)
    assert not uncalled, f"{len(uncalled)} of {len(operations(document))} routes no journey of the Swift client called:\n  " + "\n  ".join(uncalled)
