"""The event contracts (docs/EVENTS.md), checked with Python's jsonschema against what the run made.

Runs after every other test (scripts/e2e/stack.sh), so that it sees every event they caused: each
envelope on the stream `events` and each one still in a service's outbox must be valid against the
envelope's schema and against `<type>.v<version>.json`, which must exist. The schemas themselves are
checked against draft 2020-12, and the fixtures of Tests/Fixtures/events against them. In a stack of
one release no consumer meets a type or a version it does not know: `events_ignored_total` stays 0.
"""
import glob
import json
import os

import requests
from jsonschema import Draft202012Validator, FormatChecker

from conftest import SERVICES

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCHEMAS = os.path.join(ROOT, "Shared", "Models", "Events", "schemas")
FIXTURES = os.path.join(ROOT, "Tests", "Fixtures", "events")


def load_schemas():
    schemas = {}
    for path in sorted(glob.glob(os.path.join(SCHEMAS, "*.json"))):
        with open(path) as f:
            schemas[os.path.basename(path)[:-len(".json")]] = json.load(f)
    return schemas


SCHEMA_FILES = load_schemas()
VALIDATORS = {name: Draft202012Validator(schema, format_checker=FormatChecker()) for name, schema in SCHEMA_FILES.items()}


def problems(envelope):
    """What is wrong with one envelope (a dict), as text; empty when it keeps the contract."""
    found = [f"envelope: {error.json_path}: {error.message}" for error in VALIDATORS["envelope"].iter_errors(envelope)]
    name = f"{envelope.get('type')}.v{envelope.get('version', 1)}"
    if name not in VALIDATORS:
        return found + [f"no schema {name}.json for this type and version"]
    return found + [f"{name}: {error.json_path}: {error.message}" for error in VALIDATORS[name].iter_errors(envelope.get("data"))]


def test_the_schemas_are_valid_draft_2020_12():
    assert "envelope" in SCHEMA_FILES and len(SCHEMA_FILES) > 20
    for name, schema in SCHEMA_FILES.items():
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", name


def test_every_fixture_keeps_the_contract():
    paths = sorted(glob.glob(os.path.join(FIXTURES, "*.json")))
    assert paths
    for path in paths:
        with open(path) as f:
            assert problems(json.load(f)) == [], os.path.basename(path)


def stream_envelopes(stack):
    """Every envelope on the stream `events`: redis-cli prints an entry's fields one a line, and an
    envelope is one line of JSON."""
    lines = stack.redis("XRANGE", "events", "-", "+").split("\n")
    return [json.loads(lines[i + 1]) for i, line in enumerate(lines[:-1]) if line == "envelope"]


def outbox_envelopes(stack):
    envelopes = []
    for name in SERVICES:
        out = stack.psql(name, f"SELECT envelope FROM {name}.outbox")
        envelopes += [json.loads(line) for line in out.split("\n") if line.strip()]
    return envelopes


def test_every_event_the_run_published_keeps_the_contract(stack):
    envelopes = stream_envelopes(stack) + outbox_envelopes(stack)
    types = {envelope.get("type") for envelope in envelopes}
    # The run signs people up, follows, coaches, buys and trains: a stream without most types would
    # mean this check read nothing.
    assert len(envelopes) > 100 and len(types) >= 15, sorted(types)
    failures = {}
    for envelope in envelopes:
        found = problems(envelope)
        if found:
            failures.setdefault(envelope.get("type"), (envelope, found))
    assert failures == {}, json.dumps(failures, indent=2, default=str)[:4000]


def test_no_consumer_met_a_type_or_version_it_does_not_know(stack):
    for process, url in stack.admin_urls.items():
        if process == "gateway":
            continue
        try:
            metrics = requests.get(f"{url}/metrics", timeout=5)
        except requests.ConnectionError:
            continue  # a replica the stack does not run
        ignored = [line for line in metrics.text.split("\n") if line.startswith("events_ignored_total{") and float(line.rsplit(" ", 1)[1]) > 0]
        assert ignored == [], (process, ignored)
