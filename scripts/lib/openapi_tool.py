"""The merged OpenAPI document and its breaking changes, for scripts/openapi and the end-to-end tests.

merge() follows the rules of Shared/OpenAPIMerge/OpenAPIMerge.swift, which the gateway uses for its
GET /openapi.json (scripts/e2e/test_openapi.py checks that both give the same document):

- `openapi` is the first document's (the gateway's); `info` is the title, the first document's
  version and a description naming the documents; there is no `servers`.
- `paths` is the union. One method on one path in two documents is an error, as is one path whose
  path-level fields (`parameters` ...) differ between documents. A path in SHARED_PATHS (`/healthz`,
  which every process serves for itself) comes from the first document that has it.
- `components`, kind by kind, and `webhooks`: entries of one name that are structurally equal are
  one entry; different ones are an error naming both documents.
- An `operationId` used twice is an error.
- `tags` is the union by name, the first of each name winning.
- Root `security` stays at the root when every document has the same (or none); otherwise each
  document's goes onto those of its operations that have none.

breaking_changes() lists what in a new document breaks a client written against an old one.
"""
import glob
import json
import os
import re

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SNAPSHOT = os.path.join(ROOT, "docs", "openapi.json")
TITLE = "Food backend API"
SHARED_PATHS = {"/healthz"}
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


# ---------------------------------------------------------------------------------------------------
# Reading YAML as the Swift side does (Shared/OpenAPIMerge/OpenAPIYAML.swift): YAML 1.1 scalars,
# timestamps left as text, mapping keys as written.

class _Loader(yaml.SafeLoader):
    pass


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _mapping(loader, node):
    mapping = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(None, None, "a mapping key that is not a scalar", key_node.start_mark)
        mapping[key_node.value] = loader.construct_object(value_node, deep=True)
    return mapping


_Loader.add_constructor("tag:yaml.org,2002:map", _mapping)


def load_yaml(text):
    return yaml.load(text, Loader=_Loader)


# ---------------------------------------------------------------------------------------------------
# The merge.

class MergeError(Exception):
    """Why documents do not merge: every problem, one line each."""

    def __init__(self, problems):
        super().__init__("\n".join(problems))
        self.problems = problems


def normalized(value):
    """Whole floats as integers, as the Swift side keeps numbers (YAML's 1 and 1.0 are one number)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    if isinstance(value, dict):
        return {key: normalized(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalized(item) for item in value]
    return value


def canonical(value):
    return json.dumps(normalized(value), sort_keys=True, ensure_ascii=False)


def source(service, text):
    """(service, document) from YAML text, checked to be an OpenAPI 3 document."""
    try:
        document = load_yaml(text)
    except yaml.YAMLError as error:
        raise MergeError([f"the {service} document is not readable YAML: {error}"])
    if not isinstance(document, dict):
        raise MergeError([f"the {service} document is not an OpenAPI 3 document: it is not a mapping"])
    version = document.get("openapi")
    if not isinstance(version, str) or not version.startswith("3."):
        raise MergeError([f"the {service} document is not an OpenAPI 3 document: its `openapi` field does not say 3.x"])
    for key in ("paths", "components", "webhooks"):
        if key in document and not isinstance(document[key], dict):
            raise MergeError([f"the {service} document is not an OpenAPI 3 document: its `{key}` is not a mapping"])
    return service, document


def repository_sources(root=ROOT):
    """Every Services/*/openapi.yaml, the gateway's first (as the gateway merges), named in lower case."""
    files = sorted(glob.glob(os.path.join(root, "Services", "*", "openapi.yaml")))
    files.sort(key=lambda path: os.path.basename(os.path.dirname(path)) != "Gateway")
    result = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            result.append(source(os.path.basename(os.path.dirname(path)).lower(), f.read()))
    return result


def merge(sources, title=TITLE, version=None, shared_paths=SHARED_PATHS):
    if not sources:
        raise MergeError(["there are no documents to merge"])
    errors = []
    first = sources[0][1]
    securities = [canonical(document.get("security")) for _, document in sources]
    security_agreed = all(security == securities[0] for security in securities)

    paths, path_owners, operation_owners, operation_ids = {}, {}, {}, {}
    for service, document in sources:
        for path in sorted(document.get("paths") or {}):
            item = document["paths"][path]
            if not isinstance(item, dict):
                errors.append(f"the {service} document is not an OpenAPI 3 document: the path {path} is not a mapping")
                continue
            if path in shared_paths and path in paths:
                continue
            item = dict(item)
            if not security_agreed and "security" in document:
                for method in item:
                    if method in METHODS and isinstance(item[method], dict) and "security" not in item[method]:
                        item[method] = dict(item[method], security=document["security"])
            for method in sorted(item):
                if method not in METHODS or not isinstance(item[method], dict):
                    continue
                operation_id = item[method].get("operationId")
                if not isinstance(operation_id, str):
                    continue
                if operation_id in operation_ids:
                    errors.append(f"operationId {operation_id} is used by both {operation_ids[operation_id]} and {service}")
                else:
                    operation_ids[operation_id] = service
            if path not in paths:
                paths[path] = item
                path_owners[path] = service
                for method in item:
                    if method in METHODS:
                        operation_owners[(method, path)] = service
                continue
            merged = paths[path]
            if canonical(_path_level(merged)) != canonical(_path_level(item)):
                errors.append(f"the path {path} has different path-level fields in {path_owners[path]} and {service}")
                continue
            for method in sorted(item):
                if method not in METHODS:
                    continue
                if (method, path) in operation_owners:
                    errors.append(f"{method.upper()} {path} is in both {operation_owners[(method, path)]} and {service}")
                else:
                    merged[method] = item[method]
                    operation_owners[(method, path)] = service

    components, component_owners, webhooks, webhook_owners = {}, {}, {}, {}
    for service, document in sources:
        kinds = document.get("components") or {}
        for kind in sorted(kinds):
            if not isinstance(kinds[kind], dict):
                errors.append(f"the {service} document is not an OpenAPI 3 document: components.{kind} is not a mapping")
                continue
            for name in sorted(kinds[kind]):
                entry = kinds[kind][name]
                existing = components.get(kind, {}).get(name)
                if name in components.get(kind, {}):
                    if canonical(existing) != canonical(entry):
                        errors.append(f"components.{kind}.{name} differs between {component_owners[(kind, name)]} and {service}: "
                                      "one name with two definitions; rename one or make them the same")
                else:
                    components.setdefault(kind, {})[name] = entry
                    component_owners[(kind, name)] = service
        hooks = document.get("webhooks") or {}
        for name in sorted(hooks):
            if name in webhooks:
                if canonical(webhooks[name]) != canonical(hooks[name]):
                    errors.append(f"components.webhooks.{name} differs between {webhook_owners[name]} and {service}: "
                                  "one name with two definitions; rename one or make them the same")
            else:
                webhooks[name] = hooks[name]
                webhook_owners[name] = service

    tags, tag_names = [], set()
    for _, document in sources:
        listed = document.get("tags")
        if not isinstance(listed, list):
            continue
        for tag in listed:
            name = tag.get("name") if isinstance(tag, dict) else None
            if isinstance(name, str) and name not in tag_names:
                tag_names.add(name)
                tags.append(tag)

    if errors:
        raise MergeError(errors)

    names = ", ".join(service for service, _ in sources)
    info = {"title": title, "description": f"The whole API in one document, merged from the OpenAPI documents of {names}."}
    first_version = (first.get("info") or {}).get("version")
    if version is not None or isinstance(first_version, str):
        info["version"] = version if version is not None else first_version
    merged = {"openapi": first["openapi"], "info": info, "paths": paths}
    if components:
        merged["components"] = components
    if webhooks:
        merged["webhooks"] = webhooks
    if tags:
        merged["tags"] = tags
    if security_agreed and first.get("security") is not None:
        merged["security"] = first["security"]
    return normalized(merged)


def _path_level(item):
    return {key: value for key, value in item.items() if key not in METHODS}


def dumps(document):
    """As docs/openapi.json is written: two spaces of indent, sorted keys, UTF-8, a final newline."""
    return json.dumps(normalized(document), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


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
        remaining = {canonical(value) for value in after["enum"]}
        for value in before["enum"]:
            if canonical(value) not in remaining:
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
        document = merge(repository_sources())
    except MergeError as error:
        print("the documents do not merge:")
        for problem in error.problems:
            print(f"  {problem}")
        return 2
    command = arguments[0]
    if command == "merge":
        print(dumps(document), end="")
        return 0
    if command == "snapshot":
        with open(SNAPSHOT, "w", encoding="utf-8") as f:
            f.write(dumps(document))
        print(f"wrote {os.path.relpath(SNAPSHOT, ROOT)} ({len(document['paths'])} paths)")
        return 0
    try:
        with open(SNAPSHOT, encoding="utf-8") as f:
            snapshot = json.load(f)
    except FileNotFoundError:
        print("there is no docs/openapi.json: run scripts/openapi snapshot")
        return 1
    code, lines = check(snapshot, document)
    print("\n".join(lines))
    return code


def check(snapshot, document):
    """What `scripts/openapi check` says of `document` against `snapshot`: (exit code, lines)."""
    changes = breaking_changes(snapshot, document)
    if changes:
        return 1, ([f"{len(changes)} breaking change{'s' if len(changes) != 1 else ''} against docs/openapi.json:"]
                   + [f"  {change}" for change in changes]
                   + ["if they are meant, run scripts/openapi snapshot and say why in the change"])
    if canonical(snapshot) != canonical(document):
        return 1, ["no breaking changes, but the snapshot is out of date, run scripts/openapi snapshot"]
    return 0, ["no breaking changes; docs/openapi.json is up to date"]
