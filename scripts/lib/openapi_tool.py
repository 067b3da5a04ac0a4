"""The merged OpenAPI document and its breaking changes, for scripts/openapi and the end-to-end tests.

The merge is Shared/OpenAPIMerge's, the code behind the gateway's GET /openapi.json: merged() runs
the OpenAPITool executable (built with `swift build --product OpenAPITool`) on the repository's
Services/*/openapi.yaml and returns its bytes, which are what docs/openapi.json holds. This module
only reads JSON: breaking_changes() lists what in a new document breaks a client written against an
old one.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SNAPSHOT = os.path.join(ROOT, "docs", "openapi.json")
PREVIOUS_RELEASE = os.path.join(ROOT, "deploy", "previous-release")
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


class MergeError(Exception):
    """The documents do not merge (or the tool could not be built): what it said."""


def merged():
    """The merge of Services/*/openapi.yaml as bytes, from the Swift merge (built first if it is not)."""
    build = ["swift", "build", "--product", "OpenAPITool"]
    result = subprocess.run(build, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise MergeError(f"{' '.join(build)} failed:\n{result.stdout}{result.stderr}")
    bin_path = subprocess.run(build[:2] + ["--show-bin-path"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    result = subprocess.run([os.path.join(bin_path, "OpenAPITool"), "merge", os.path.join(ROOT, "Services")], capture_output=True)
    if result.returncode != 0:
        raise MergeError(result.stderr.decode("utf-8", "replace").rstrip("\n"))
    return result.stdout


def _frozen(value):
    """A JSON value as something hashable and comparable, whole floats as integers (as the merge writes them)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    if isinstance(value, dict):
        return tuple(sorted((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


# ---------------------------------------------------------------------------------------------------
# Breaking changes.

def breaking_changes(old, new):
    """What in `new` breaks a client written against `old`, one line each: removed paths and
    operations, removed response fields (and response fields no longer always there), removed enum
    values (requests and responses), new required request fields, parameters or bodies, request fields
    removed where unknown ones are refused, removed success responses, and changed types (a type a
    request may no longer use, or a type a response may now carry). Path templates match whatever
    their parameters are called."""
    changes = []
    old_paths = {_template(path): path for path in old.get("paths") or {}}
    new_paths = {_template(path): path for path in new.get("paths") or {}}
    for template in sorted(old_paths):
        path = old_paths[template]
        if template not in new_paths:
            changes.append(f"removed path {path}")
            continue
        old_item = old["paths"][path]
        new_item = new["paths"][new_paths[template]]
        for method in sorted(m for m in old_item if m in METHODS):
            where = f"{method.upper()} {path}"
            if method not in new_item:
                changes.append(f"{where}: removed operation")
                continue
            _compare_operation(old, new, where, old_item, new_item, old_item[method], new_item[method], changes)
    return changes


def _template(path):
    return re.sub(r"\{[^}]*\}", "{}", path)


def _resolve(document, value):
    """`value` with its local `$ref`s followed (to {} when one leads nowhere)."""
    seen = set()
    while isinstance(value, dict) and isinstance(value.get("$ref"), str):
        ref = value["$ref"]
        if ref in seen or not ref.startswith("#/"):
            return {}
        seen.add(ref)
        target = document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
        value = target if target is not None else {}
    return value


def _parameters(document, item, operation):
    found = {}
    for parameter in (item.get("parameters") or []) + (operation.get("parameters") or []):
        parameter = _resolve(document, parameter)
        if isinstance(parameter, dict) and "name" in parameter:
            found[(parameter.get("in"), parameter["name"])] = parameter
    return found


def _compare_operation(old, new, where, old_item, new_item, old_op, new_op, changes):
    old_parameters = _parameters(old, old_item, old_op)
    new_parameters = _parameters(new, new_item, new_op)
    for key in sorted(new_parameters, key=str):
        location, name = key
        parameter = new_parameters[key]
        required = parameter.get("required", False) or location == "path"
        before = old_parameters.get(key)
        if required and (before is None or not (before.get("required", False) or location == "path")):
            changes.append(f"{where}: new required {location} parameter `{name}`")
        if before is not None:
            _compare_schema(old, new, before.get("schema"), parameter.get("schema"), "request", f"{where}: {location} parameter `{name}`", "", set(), changes)

    old_body = _resolve(old, old_op.get("requestBody")) or {}
    new_body = _resolve(new, new_op.get("requestBody")) or {}
    if new_body.get("required") and not (old_body and old_body.get("required")):
        changes.append(f"{where}: the request body is now required")
    old_content = old_body.get("content") or {}
    new_content = new_body.get("content") or {}
    for media in sorted(old_content):
        if new_body and media not in new_content:
            changes.append(f"{where}: the request body no longer takes {media}")
        elif media in new_content:
            _compare_schema(old, new, (old_content[media] or {}).get("schema"), (new_content[media] or {}).get("schema"), "request",
                            f"{where}: request body", "", set(), changes)

    old_responses = old_op.get("responses") or {}
    new_responses = new_op.get("responses") or {}
    for status in sorted(old_responses, key=str):
        success = str(status).startswith("2")
        if status not in new_responses:
            if success:
                changes.append(f"{where}: removed response {status}")
            continue
        old_response = _resolve(old, old_responses[status]) or {}
        new_response = _resolve(new, new_responses[status]) or {}
        old_media = old_response.get("content") or {}
        new_media = new_response.get("content") or {}
        for media in sorted(old_media):
            if media not in new_media:
                if success:
                    changes.append(f"{where}: response {status} is no longer {media}")
                continue
            _compare_schema(old, new, (old_media[media] or {}).get("schema"), (new_media[media] or {}).get("schema"), "response",
                            f"{where}: response {status}", "", set(), changes)


def _flattened(document, schema):
    """The schema with its `$ref` followed and its `allOf` parts' properties and requirements merged in."""
    schema = _resolve(document, schema)
    if not isinstance(schema, dict):
        return {}
    if "allOf" not in schema:
        return schema
    merged = {key: value for key, value in schema.items() if key != "allOf"}
    properties = dict(merged.get("properties") or {})
    required = list(merged.get("required") or [])
    for part in schema["allOf"]:
        part = _flattened(document, part)
        properties.update(part.get("properties") or {})
        required += [name for name in part.get("required") or [] if name not in required]
        for key in ("type", "enum", "items", "additionalProperties"):
            if key in part and key not in merged:
                merged[key] = part[key]
    if properties:
        merged["properties"] = properties
    if required:
        merged["required"] = required
    return merged


def _ref(schema):
    return schema.get("$ref") if isinstance(schema, dict) else None


def _types(schema):
    declared = schema.get("type")
    types = set(declared if isinstance(declared, list) else [declared] if isinstance(declared, str) else [])
    if types and schema.get("nullable") is True:
        types.add("null")
    return types


def _covered(kind, types):
    return kind in types or (kind == "integer" and "number" in types)


def _compare_schema(old, new, old_schema, new_schema, direction, label, field, seen, changes):
    if old_schema is None or new_schema is None:
        return
    # `seen` holds the pairs of references being compared further up: a schema that contains itself
    # (a tree) is compared once.
    refs = (_ref(old_schema), _ref(new_schema))
    if refs != (None, None):
        if refs in seen:
            return
        seen = seen | {refs}
    before = _flattened(old, old_schema)
    after = _flattened(new, new_schema)
    named = f" of `{field}`" if field else ""

    old_types, new_types = _types(before), _types(after)
    if old_types and new_types:
        if direction == "request" and not all(_covered(kind, new_types) for kind in old_types):
            changes.append(f"{label}: changed type{named}: {'|'.join(sorted(old_types))} -> {'|'.join(sorted(new_types))}")
        if direction == "response" and not all(_covered(kind, old_types) for kind in new_types):
            changes.append(f"{label}: changed type{named}: {'|'.join(sorted(old_types))} -> {'|'.join(sorted(new_types))}")

    if isinstance(before.get("enum"), list) and isinstance(after.get("enum"), list):
        remaining = {_frozen(value) for value in after["enum"]}
        for value in before["enum"]:
            if _frozen(value) not in remaining:
                changes.append(f"{label}: removed enum value {json.dumps(value)}{named}")

    old_properties = before.get("properties") or {}
    new_properties = after.get("properties") or {}
    old_required = set(before.get("required") or [])
    new_required = set(after.get("required") or [])
    prefix = f"{field}." if field else ""
    if direction == "response":
        for name in sorted(old_properties):
            if name not in new_properties:
                changes.append(f"{label}: removed field `{prefix}{name}`")
            elif name in old_required and name not in new_required:
                changes.append(f"{label}: field `{prefix}{name}` may now be absent")
    else:
        for name in sorted(new_required - old_required):
            changes.append(f"{label}: new required field `{prefix}{name}`")
        if after.get("additionalProperties") is False:
            for name in sorted(old_properties):
                if name not in new_properties:
                    changes.append(f"{label}: removed field `{prefix}{name}`, which is now refused")
    for name in sorted(old_properties):
        if name in new_properties:
            _compare_schema(old, new, old_properties[name], new_properties[name], direction, label, f"{prefix}{name}", seen, changes)

    if "items" in before and "items" in after:
        _compare_schema(old, new, before["items"], after["items"], direction, label, f"{field}[]", seen, changes)
    if isinstance(before.get("additionalProperties"), dict) and isinstance(after.get("additionalProperties"), dict):
        _compare_schema(old, new, before["additionalProperties"], after["additionalProperties"], direction, label, f"{prefix}*", seen, changes)

    for combinator in ("oneOf", "anyOf"):
        old_options = before.get(combinator)
        new_options = after.get(combinator)
        if not isinstance(old_options, list) or not isinstance(new_options, list):
            continue
        if direction == "request" and len(new_options) < len(old_options):
            changes.append(f"{label}: {combinator}{named} lost {len(old_options) - len(new_options)} of its alternatives")
        if direction == "response" and len(new_options) > len(old_options):
            changes.append(f"{label}: {combinator}{named} has {len(new_options) - len(old_options)} new alternatives")
        for old_option, new_option in zip(old_options, new_options):
            _compare_schema(old, new, old_option, new_option, direction, label, field, seen, changes)


# ---------------------------------------------------------------------------------------------------
# The command line (scripts/openapi).

USAGE = """usage: scripts/openapi merge | snapshot | check

  merge      print the merged document of Services/*/openapi.yaml (what the gateway serves at /openapi.json)
  snapshot   write it to docs/openapi.json
  check      list the breaking changes of the merge against docs/openapi.json; exit 1 if there are any,
             or if docs/openapi.json differs in other ways (then run scripts/openapi snapshot)"""


def main(arguments):
    if len(arguments) != 1 or arguments[0] not in ("merge", "snapshot", "check"):
        print(USAGE)
        return 2
    try:
        text = merged()
    except MergeError as error:
        print(error)
        return 2
    command = arguments[0]
    if command == "merge":
        sys.stdout.buffer.write(text)
        return 0
    document = json.loads(text)
    if command == "snapshot":
        with open(SNAPSHOT, "wb") as f:
            f.write(text)
        print(f"wrote {os.path.relpath(SNAPSHOT, ROOT)} ({len(document['paths'])} paths)")
        return 0
    try:
        with open(SNAPSHOT, "rb") as f:
            snapshot_text = f.read()
    except FileNotFoundError:
        print("there is no docs/openapi.json: run scripts/openapi snapshot")
        return 1
    code, lines = check(json.loads(snapshot_text), document, current=snapshot_text == text)
    try:
        previous = previous_release()
    except MergeError as error:
        print("\n".join(lines + [str(error)]))
        return 1
    if previous:
        release_code, release_lines = check_against_release(*previous, document)
        code = max(code, release_code)
        lines += release_lines
    print("\n".join(lines))
    return code


def previous_release():
    """(commit, document) of the release deploy/previous-release names, or None without one. The
    document is docs/openapi.json at that commit, read from the repository's history."""
    try:
        with open(PREVIOUS_RELEASE) as f:
            names = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        return None
    if not names:
        return None
    commit = names[0]
    # A shallow clone (some CI checkouts) may not hold the release's commit: said, not failed.
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True).returncode == 0
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if not known and shallow == "true":
        print(f"the previous release {commit[:12]} is not in this shallow clone: not compared with it", file=sys.stderr)
        return None
    result = subprocess.run(["git", "show", f"{commit}:docs/openapi.json"], cwd=ROOT, capture_output=True)
    if result.returncode != 0:
        raise MergeError(f"cannot read docs/openapi.json at {commit} (deploy/previous-release): "
                         + result.stderr.decode("utf-8", "replace").strip())
    return commit, json.loads(result.stdout)


def check_against_release(commit, released, document):
    """What `scripts/openapi check` says of `document` against the previous release's document:
    (exit code, lines). A client an app shipped with that release must keep working."""
    changes = breaking_changes(released, document)
    where = f"the previous release ({commit[:12]}, deploy/previous-release)"
    if changes:
        return 1, ([f"{len(changes)} breaking change{'s' if len(changes) != 1 else ''} against {where}:"]
                   + [f"  {change}" for change in changes]
                   + ["apps built against that release would break: keep what they use"])
    return 0, [f"no breaking changes against {where}"]


def check(snapshot, document, current=None):
    """What `scripts/openapi check` says of `document` against `snapshot`: (exit code, lines). `current`
    says whether the snapshot's bytes are the merge's; by default, whether the two are equal."""
    changes = breaking_changes(snapshot, document)
    if changes:
        return 1, ([f"{len(changes)} breaking change{'s' if len(changes) != 1 else ''} against docs/openapi.json:"]
                   + [f"  {change}" for change in changes]
                   + ["if they are meant, run scripts/openapi snapshot and say why in the change"])
    if not (current if current is not None else _frozen(snapshot) == _frozen(document)):
        return 1, ["no breaking changes, but the snapshot is out of date, run scripts/openapi snapshot"]
    return 0, ["no breaking changes; docs/openapi.json is up to date"]
