"""schemathesis against the gateway's merged API document (`GET /openapi.json`, every service's
operations and the gateway's own), signed in: no 5xx anywhere, every answer (status, headers, body)
as the document says, every method a path does not have answered 405. Bounded: SCHEMATHESIS_EXAMPLES
examples per operation (default 15) and a time limit. The seed is fixed (SCHEMATHESIS_SEED, default
20261126) and printed; the only exceptions are in schemathesis.toml, each with its reason."""
import os
import subprocess
import sys
import tempfile
import uuid

import pytest
import requests

SEED = os.environ.get("SCHEMATHESIS_SEED", "20261126")
EXAMPLES = os.environ.get("SCHEMATHESIS_EXAMPLES", "15")


@pytest.fixture(scope="module")
def token(stack):
    email = f"contract-{uuid.uuid4().hex[:12]}@example.com"
    response = requests.post(f"{stack.gateway}/v1/auth/signup", json={"email": email, "password": "contract test password 1"}, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()["session"]["access_token"]


def test_the_api_answers_as_its_merged_document_says(stack, token):
    document = requests.get(f"{stack.gateway}/openapi.json", timeout=30)
    assert document.status_code == 200, document.text
    # In a folder of its own: schemathesis keeps a cache of past runs in its working directory, which
    # would make one run depend on the ones before it.
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "openapi.json")
        with open(path, "w") as f:
            f.write(document.text)
        command = [sys.executable, "-m", "schemathesis.cli", "--config-file", os.path.join(os.path.dirname(__file__), "schemathesis.toml"), "run", path,
                   "--url", stack.gateway, "-H", f"Authorization: Bearer {token}", "--checks", "all",
                   "--max-examples", EXAMPLES, "--seed", SEED, "--no-color"]
        print(f"schemathesis seed {SEED} (SCHEMATHESIS_SEED={SEED} repeats it)")
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=scratch)
    assert result.returncode == 0, f"schemathesis found failures (seed {SEED}):\n{result.stdout[-12000:]}\n{result.stderr[-2000:]}"
