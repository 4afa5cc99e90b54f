"""Argument schemas (JSON Schema 2020-12), checked so that no schema can be used against the server.

One place for every schema check the product makes (registration, plan
validation, the executors' last check before a call, try it):

- `$ref`s resolve only inside the schema: the validators get a
  `referencing.Registry` with no retrieval, so an `http://`, `https://` or
  `file://` reference is never fetched (jsonschema fetches them by default,
  around any egress guard). Registration refuses references that point
  outside the schema or nowhere, and reference loops that never descend into
  the instance (`{"$ref": "#"}`), which would recurse without end.
- `pattern`, `patternProperties` and the pattern part of
  `additionalProperties` run on the `regex` engine with a time limit, so a
  catastrophic pattern (`^(a+)+$`) cannot hold a worker for seconds: a
  pattern that does not finish in PATTERN_TIMEOUT_S fails the argument.
- Validating never raises: a schema that still misbehaves (too deep, a
  reference that cannot be resolved) is reported as an error string.

Pure Python (jsonschema, referencing, regex): no Django.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import regex
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

# Per search: ample for any sane pattern on a bounded argument, far below what a worker notices.
PATTERN_TIMEOUT_S = 0.1
ROOT_URI = "urn:agentops:schema"
# Keywords whose schemas apply to the same instance: a $ref loop through only these never ends.
IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
IN_PLACE_ONE = ("not", "if", "then", "else", "$ref", "$dynamicRef")
# Values that are data, not schemas: a "$ref" key inside them is not a reference.
DATA_KEYWORDS = frozenset({"const", "enum", "examples", "default"})


class PatternTimeout(Exception):
    pass


def safe_search(pattern: str, text: str) -> bool:
    try:
        return regex.search(pattern, text, timeout=PATTERN_TIMEOUT_S) is not None
    except TimeoutError:
        raise PatternTimeout(pattern) from None


# -- keyword implementations on the safe engine --------------------------------------------------

def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        matched = safe_search(pattern, instance)
    except PatternTimeout:
        yield ValidationError(f"the pattern {pattern!r} took more than {PATTERN_TIMEOUT_S:g}s on this value")
        return
    except regex.error as exc:
        yield ValidationError(f"the pattern {pattern!r} is not a valid regular expression: {exc}")
        return
    if not matched:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _matches(pattern: str, key: str) -> bool:
    try:
        return safe_search(pattern, key)
    except regex.error:
        return False


def _pattern_properties(validator: Any, pattern_properties: dict[str, Any], instance: Any,
                        schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            try:
                matched = _matches(pattern, key)
            except PatternTimeout:
                yield ValidationError(f"the pattern {pattern!r} took more than {PATTERN_TIMEOUT_S:g}s on a key")
                return
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    for key in instance:
        if key in properties:
            continue
        try:
            if any(_matches(p, key) for p in patterns):
                continue
        except PatternTimeout:
            yield ValidationError("a patternProperties pattern took too long on a key")
            return
        extras.append(key)
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif not additional and extras:
        listed = ", ".join(repr(k) for k in sorted(extras))
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


SafeValidator = validators.extend(Draft202012Validator, {
    "pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties,
})

# No retrieve function: any reference that is not inside the schema is Unresolvable, never fetched.
NO_RETRIEVAL = Registry()


@lru_cache(maxsize=512)
def _validator_for_json(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    SafeValidator.check_schema(schema)
    return SafeValidator(schema, registry=NO_RETRIEVAL)


def validator(schema: dict[str, Any]) -> Any:
    return _validator_for_json(json.dumps(schema, sort_keys=True, default=str))


def errors(schema: dict[str, Any] | None, instance: Any) -> list[tuple[str, str]]:
    """(where, message) for each way `instance` fails `schema`; never raises."""
    if not schema:
        return []
    try:
        check = validator(schema)
        found = sorted(check.iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    except SchemaError as exc:
        return [("schema", f"the capability's schema is invalid: {exc.message}")]
    except Unresolvable as exc:
        return [("schema", f"the capability's schema has a reference that does not resolve: {exc}")]
    except Exception as exc:  # RecursionError, UnknownType...: a bad schema must not become a crash
        return [("schema", f"the capability's schema cannot be applied: {type(exc).__name__}")]
    return [("/".join(str(p) for p in e.absolute_path), e.message) for e in found]


# -- registration checks ------------------------------------------------------------------------

def problems(schema: Any) -> list[str]:
    """Why `schema` may not be registered ([] when it may): invalid, references, patterns."""
    if not isinstance(schema, dict):
        return ["The schema must be a JSON object."]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return [f"Not a valid JSON Schema (draft 2020-12): {exc.message}" + (f" (at {where})" if where else "")]
    except RecursionError:
        return ["The schema is nested too deeply."]
    found: list[str] = []
    try:
        found.extend(_pattern_problems(schema))
        found.extend(_reference_problems(schema))
    except RecursionError:
        return ["The schema is nested too deeply."]
    return found


def _walk(node: Any, path: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every subschema (dict) with its JSON pointer, skipping data-valued keywords."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            if key in DATA_KEYWORDS:
                continue
            yield from _walk(value, f"{path}/{_escape(key)}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}/{i}")


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _pattern_problems(schema: dict[str, Any]) -> list[str]:
    found = []
    for where, node in _walk(schema):
        patterns = []
        if isinstance(node.get("pattern"), str):
            patterns.append(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            patterns.extend(node["patternProperties"])
            if "unevaluatedProperties" in node:
                found.append(f"{where}: unevaluatedProperties together with patternProperties is not supported; "
                             "use additionalProperties.")
        for pattern in patterns:
            try:
                regex.compile(pattern)
            except regex.error as exc:
                found.append(f"{where}: the pattern {pattern!r} is not a valid regular expression ({exc}).")
    return found


def _reference_problems(schema: dict[str, Any]) -> list[str]:
    """References that leave the schema or lead nowhere, and loops that never descend."""
    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    registry = NO_RETRIEVAL.with_resource(ROOT_URI, resource)
    found: list[str] = []
    edges: dict[int, list[int]] = {}
    names: dict[int, str] = {}

    def visit(node: Any, path: str, resolver: Any) -> None:
        if isinstance(node, list):
            for i, value in enumerate(node):
                visit(value, f"{path}/{i}", resolver)
            return
        if not isinstance(node, dict):
            return
        if path != "#" and isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        names[id(node)] = path
        targets = edges.setdefault(id(node), [])
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                resolved = resolver.lookup(ref)
            except Unresolvable:
                found.append(f"{path}: the reference {ref!r} does not resolve inside the schema "
                             "(references to other documents or URLs are never fetched).")
                continue
            targets.append(id(resolved.contents))
        for key in IN_PLACE_LISTS:
            if isinstance(node.get(key), list):
                targets.extend(id(sub) for sub in node[key] if isinstance(sub, dict))
        for key in ("not", "if", "then", "else"):
            if isinstance(node.get(key), dict):
                targets.append(id(node[key]))
        for key, value in node.items():
            if key not in DATA_KEYWORDS:
                visit(value, f"{path}/{_escape(key)}", resolver)

    visit(schema, "#", registry.resolver(base_uri=ROOT_URI))
    loop = _find_loop(edges)
    if loop is not None:
        found.append(f"{names.get(loop, '#')}: the references loop back without descending into the arguments "
                     "(a schema that refers to itself in place can never be checked).")
    return found


def _find_loop(edges: dict[int, list[int]]) -> int | None:
    """A node on a cycle of in-place edges, or None (iterative DFS: schemas may be deep)."""
    state: dict[int, int] = {}
    for start in edges:
        if start in state:
            continue
        stack = [(start, iter(edges.get(start, ())))]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            for child in children:
                if state.get(child) == 1:
                    return child
                if child not in state:
                    state[child] = 1
                    stack.append((child, iter(edges.get(child, ()))))
                    break
            else:
                state[node] = 2
                stack.pop()
    return None
