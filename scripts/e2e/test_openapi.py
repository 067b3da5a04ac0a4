"""The whole API in one document: the gateway's GET /openapi.json merges what every service serves,
which is the repository's Services/*/openapi.yaml (the merge is one code, Shared/OpenAPIMerge, which
scripts/openapi runs on the files), every operation in it reaches a route, docs/openapi.json is up to
date, and the breaking-change check finds what it should (on small documents of its own)."""
import copy
import json
import os
import re
import subprocess
import sys

import pytest
import requests

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))

import openapi_tool  # noqa: E402

SCRIPT = os.path.join(ROOT, "scripts", "openapi")


def run_script(*arguments):
    # It builds the OpenAPITool executable first: a no-op once the debug build is there.
    return subprocess.run([sys.executable, SCRIPT, *arguments], capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.fixture(scope="module")
def merged():
    result = run_script("merge")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_the_gateway_merges_every_services_document(stack, merged):
    """The gateway fetches each upstream's document, its own first: the same merge as of the files."""
    response = requests.get(f"{stack.gateway}/openapi.json", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "public, max-age=60"
    assert response.json() == merged
    # Each service's own document, as the gateway fetched it.
    for name, url in stack.service_urls.items():
        own = requests.get(f"{url}/openapi.yaml", timeout=5)
        assert own.status_code == 200 and own.headers["Content-Type"].startswith("application/yaml"), name
        with open(os.path.join(ROOT, "Services", name.capitalize(), "openapi.yaml"), encoding="utf-8") as f:
            assert own.text == f.read(), name


def test_every_documented_operation_reaches_a_route(stack, merged):
    """A request to each documented method and path (parameters filled with a UUID, no credentials,
    no body) is answered by a route, the gateway's own or a service's: never the router's
    `404 No route for …` (the gateway's for a path no service claims, or a service's for a path it
    does not serve), nor a 405."""
    filler = "00000000-0000-4000-8000-000000000000"
    unrouted = []
    for path, item in sorted(merged["paths"].items()):
        target = re.sub(r"\{[^}]*\}", filler, path)
        for method in sorted(m for m in item if m in openapi_tool.METHODS):
            # Streamed, and only a problem's body read: a response that streams (live events) ends here.
            with requests.request(method.upper(), f"{stack.gateway}{target}", timeout=30, allow_redirects=False, stream=True) as response:
                detail = ""
                if response.headers.get("Content-Type") == "application/problem+json":
                    detail = response.json().get("detail") or ""
            if response.status_code == 405 or (response.status_code == 404 and detail.startswith("No route for")):
                unrouted.append(f"{method.upper()} {path}: {response.status_code} {detail}")
    assert not unrouted, "\n".join(unrouted)


def test_the_snapshot_is_up_to_date():
    result = run_script("check")
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------------
# The breaking-change check on small documents.

BASE = {
    "openapi": "3.1.0",
    "info": {"title": "t", "version": "1"},
    "paths": {
        "/v1/meals": {
            "get": {
                "parameters": [{"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MealPage"}}}}},
            },
            "post": {
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MealInput"}}}},
                "responses": {"201": {"description": "made", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Meal"}}}}},
            },
        },
        "/v1/meals/{id}": {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "delete": {"responses": {"204": {"description": "gone"}}},
        },
    },
    "components": {
        "schemas": {
            "Kind": {"type": "string", "enum": ["breakfast", "lunch", "dinner"]},
            "Meal": {
                "type": "object",
                "required": ["id", "kind"],
                "properties": {"id": {"type": "string"}, "kind": {"$ref": "#/components/schemas/Kind"}, "score": {"type": "number"}},
            },
            "MealPage": {"type": "object", "required": ["items"], "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Meal"}}}},
            "MealInput": {
                "type": "object",
                "additionalProperties": False,
                "required": ["kind"],
                "properties": {"kind": {"$ref": "#/components/schemas/Kind"}, "note": {"type": "string"}},
            },
        }
    },
}


def changed(edit):
    new = copy.deepcopy(BASE)
    edit(new)
    return openapi_tool.breaking_changes(BASE, new)


def test_the_same_document_has_no_breaking_changes():
    assert openapi_tool.breaking_changes(BASE, copy.deepcopy(BASE)) == []
    assert openapi_tool.check(BASE, copy.deepcopy(BASE)) == (0, ["no breaking changes; docs/openapi.json is up to date"])


def test_a_removed_route_is_breaking():
    assert changed(lambda d: d["paths"].pop("/v1/meals/{id}")) == ["removed path /v1/meals/{id}"]
    assert changed(lambda d: d["paths"]["/v1/meals"].pop("post")) == ["POST /v1/meals: removed operation"]
    # A path parameter renamed is the same route.
    assert changed(lambda d: d["paths"].__setitem__("/v1/meals/{meal_id}", d["paths"].pop("/v1/meals/{id}"))) == []


def test_a_removed_response_field_is_breaking_followed_through_refs():
    changes = changed(lambda d: d["components"]["schemas"]["Meal"]["properties"].pop("score"))
    assert "GET /v1/meals: response 200: removed field `items[].score`" in changes
    assert "POST /v1/meals: response 201: removed field `score`" in changes
    assert changed(lambda d: d["components"]["schemas"]["Meal"]["required"].remove("kind")) == [
        "GET /v1/meals: response 200: field `items[].kind` may now be absent",
        "POST /v1/meals: response 201: field `kind` may now be absent",
    ]


def test_a_removed_enum_value_is_breaking_in_requests_and_responses():
    changes = changed(lambda d: d["components"]["schemas"]["Kind"]["enum"].remove("lunch"))
    assert 'POST /v1/meals: request body: removed enum value "lunch" of `kind`' in changes
    assert 'GET /v1/meals: response 200: removed enum value "lunch" of `items[].kind`' in changes
    # A value added is not breaking.
    assert changed(lambda d: d["components"]["schemas"]["Kind"]["enum"].append("snack")) == []


def test_a_new_required_request_field_or_parameter_is_breaking():
    def required_field(d):
        d["components"]["schemas"]["MealInput"]["properties"]["calories"] = {"type": "integer"}
        d["components"]["schemas"]["MealInput"]["required"].append("calories")

    assert changed(required_field) == ["POST /v1/meals: request body: new required field `calories`"]
    assert changed(lambda d: d["paths"]["/v1/meals"]["get"]["parameters"].append({"name": "day", "in": "query", "required": True})) == [
        "GET /v1/meals: new required query parameter `day`"]
    assert changed(lambda d: d["paths"]["/v1/meals"]["get"]["parameters"][0].__setitem__("required", True)) == [
        "GET /v1/meals: new required query parameter `limit`"]


def test_a_changed_type_is_breaking():
    changes = changed(lambda d: d["components"]["schemas"]["Meal"]["properties"]["id"].__setitem__("type", "integer"))
    assert "POST /v1/meals: response 201: changed type of `id`: string -> integer" in changes
    assert changed(lambda d: d["paths"]["/v1/meals"]["get"]["parameters"][0]["schema"].__setitem__("type", "string")) == [
        "GET /v1/meals: query parameter `limit`: changed type: integer -> string"]
    # A request that may now also send null is not broken; a response that may now be null is.
    assert changed(lambda d: d["components"]["schemas"]["MealInput"]["properties"]["note"].__setitem__("type", ["string", "null"])) == []
    assert changed(lambda d: d["components"]["schemas"]["Meal"]["properties"]["score"].__setitem__("type", ["number", "null"])) != []


def test_an_optional_field_or_a_new_route_is_not_breaking():
    def additions(d):
        d["components"]["schemas"]["MealInput"]["properties"]["servings"] = {"type": "integer"}
        d["components"]["schemas"]["Meal"]["properties"]["photo"] = {"type": "string"}
        d["paths"]["/v1/meals"]["get"]["parameters"].append({"name": "day", "in": "query"})
        d["paths"]["/v1/trends"] = {"get": {"responses": {"200": {"description": "ok"}}}}

    assert changed(additions) == []
    new = copy.deepcopy(BASE)
    additions(new)
    # Not breaking, but the snapshot no longer says what is served.
    code, lines = openapi_tool.check(BASE, new)
    assert code == 1 and any("snapshot is out of date, run scripts/openapi snapshot" in line for line in lines)


def test_the_check_exits_1_and_lists_breaking_changes():
    new = copy.deepcopy(BASE)
    new["paths"].pop("/v1/meals/{id}")
    code, lines = openapi_tool.check(BASE, new)
    assert code == 1 and "  removed path /v1/meals/{id}" in lines


def test_a_request_field_removed_where_unknown_ones_are_refused_is_breaking():
    assert changed(lambda d: d["components"]["schemas"]["MealInput"]["properties"].pop("note")) == [
        "POST /v1/meals: request body: removed field `note`, which is now refused"]


def test_the_check_compares_with_the_previous_release():
    """A change that is not breaking against the snapshot can still break what an app built against
    the previous release uses: the release's document is checked too."""
    released = copy.deepcopy(BASE)
    new = copy.deepcopy(BASE)
    new["paths"].pop(next(iter(new["paths"])))
    code, lines = openapi_tool.check_against_release("0123456789abcdef", released, new)
    assert code == 1 and "against the previous release (0123456789ab, deploy/previous-release)" in lines[0], lines
    assert openapi_tool.check_against_release("0123456789abcdef", released, copy.deepcopy(BASE))[0] == 0
    # The release deploy/previous-release names is in the history and its document reads.
    previous = openapi_tool.previous_release()
    if previous is None:
        pytest.skip("a shallow clone without the previous release's commit")
    commit, document = previous
    assert len(commit) == 40 and document["paths"], commit

