"""Application-owned completion criteria, checked against capability output.

Model confidence is never proof: a run completes only when the latest ok output
of the named capability passes the check at the given path.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_MISSING = object()
Check = Callable[[Any, dict[str, Any]], bool]
_CHECKS: dict[str, Check] = {}
BUILTIN_CHECKS = ("equals", "exists", "not_empty", "in")


def register_check(name: str) -> Callable[[Check], Check]:
    """Register a named check: fn(value_at_path, params) -> bool. Checks live in code, not in data."""
    if name in BUILTIN_CHECKS:
        raise ValueError(f"{name!r} is a built-in check")

    def decorator(fn: Check) -> Check:
        _CHECKS[name] = fn
        return fn
    return decorator


def is_empty(value: Any) -> bool:
    """None, "", [], {} or a dict whose every value is empty.

    Inside a dict a zero counts as empty too: {"documents": [], "total": 0} is a
    search that found nothing, while a bare 0 is a real answer.
    """
    if value is None or value == "" or value == [] or value == {}:
        return True
    if isinstance(value, dict):
        return all(is_empty(v) or (v == 0 and not isinstance(v, bool)) for v in value.values())
    return False


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON means it: booleans are not numbers (true != 1), 1 == 1.0,
    strings compare exactly, arrays in order, objects by key; no other coercion."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return False


def is_blank(value: Any) -> bool:
    """What `not_empty` rejects, and only that: null, "", [] and {} (design.md)."""
    return value is None or (isinstance(value, (str, list, dict)) and len(value) == 0)


def resolve_path(value: Any, path: str) -> tuple[bool, Any]:
    """Follow "documents.0.id"; numeric parts index lists. Returns (found, value)."""
    if not path:
        return True, value
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and is_index(part) and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def is_index(part: str) -> bool:
    """A path part int() reads as a list index: str.isdigit() also takes "²" and "--1", which int() refuses, and
    int() refuses 5,000 digits (a ValueError in the worker, on a path a person wrote)."""
    digits = part[1:] if part.startswith("-") else part
    return 0 < len(digits) <= 18 and digits.isascii() and digits.isdigit()


@dataclass(frozen=True)
class CompletionCriteria:
    capability: str
    path: str = ""
    check: str = "not_empty"   # equals | exists | not_empty | in | a registered check name
    expected: Any = None       # the value for equals, the list of values for in
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"capability": self.capability, "path": self.path}
        if self.check in ("equals", "in"):
            data[self.check] = self.expected
        elif self.check in ("exists", "not_empty"):
            data[self.check] = True
        else:
            data["check"] = self.check
            if self.params:
                data["params"] = self.params
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompletionCriteria:
        errors = completion_errors(data)
        if errors:
            raise ValueError("; ".join(errors))
        common = {"capability": data["capability"], "path": data.get("path", "")}
        for name in ("equals", "in"):
            if name in data:
                return cls(**common, check=name, expected=data[name])
        for name in ("exists", "not_empty"):
            if data.get(name) is True:
                return cls(**common, check=name)
        return cls(**common, check=data["check"], params=dict(data.get("params") or {}))

    def is_met_by(self, output: Any) -> bool:
        found, value = resolve_path(output, self.path)
        if self.check == "exists":
            return found and value is not None
        if not found:
            return False
        if self.check == "equals":
            return json_equal(value, self.expected)
        if self.check == "in":
            return any(json_equal(value, candidate) for candidate in self.expected)
        if self.check == "not_empty":
            return not is_blank(value)
        return bool(_CHECKS[self.check](value, self.params))


def completion_errors(data: Any) -> list[str]:
    """Every problem with a completion criteria dict (empty list when valid)."""
    if not isinstance(data, dict):
        return ["completion must be an object"]
    errors = []
    if not isinstance(data.get("capability"), str) or not data.get("capability"):
        errors.append("completion.capability must be a non-empty string")
    return errors + condition_errors({k: v for k, v in data.items() if k != "capability"}, "completion")


def condition_errors(data: Any, where: str) -> list[str]:
    """Problems with a path + check condition: completion criteria without the
    capability, or a polling policy's `until`."""
    if not isinstance(data, dict):
        return [f"{where} must be an object"]
    errors = []
    if not isinstance(data.get("path", ""), str):
        errors.append(f"{where}.path must be a string")
    given = [k for k in ("equals", "exists", "not_empty", "in", "check") if k in data]
    if len(given) != 1:
        errors.append(f"{where} needs exactly one of equals, in, exists: true, not_empty: true, check")
    elif given[0] in ("exists", "not_empty") and data[given[0]] is not True:
        errors.append(f"{where}.{given[0]} must be true")
    elif given[0] == "in" and not isinstance(data["in"], list):
        errors.append(f"{where}.in must be a list of values")
    elif given[0] == "check" and data["check"] not in _CHECKS:
        errors.append(f"{where}.check {data['check']!r} is not a registered check")
    unknown = set(data) - {"path", "equals", "exists", "not_empty", "in", "check", "params"}
    if unknown:
        errors.append(f"unknown {where} fields: {', '.join(sorted(unknown))}")
    return errors


def until_condition(capability: str, data: dict[str, Any] | None) -> CompletionCriteria | None:
    """A polling policy's `until` ({"path", "equals" | "in" | "exists" | "not_empty"}) as
    criteria on that capability's own output; None when absent."""
    if data is None:
        return None
    errors = condition_errors(data, "polling.until")
    if errors:
        raise ValueError("; ".join(errors))
    return CompletionCriteria.from_dict({**data, "capability": capability})


def completion_met(criteria: CompletionCriteria, latest_ok_outputs: dict[str, Any]) -> bool:
    if criteria.capability not in latest_ok_outputs:
        return False
    return criteria.is_met_by(latest_ok_outputs[criteria.capability])
