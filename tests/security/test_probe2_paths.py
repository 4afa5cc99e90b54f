"""Probes, dotted paths a person writes (completion criteria, volatile paths, evaluation tasks): a part that
str.isdigit() takes but int() refuses ("²", "--1", 5,000 digits) is a key that is not there, never a
ValueError in the controller (an internal_error run, a failed evaluation)."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

ODD_PARTS = ["²", "--1", "-²", "9" * 5000, "①"]


def scenario(part: str) -> dict:
    return {
        "name": "odd index", "goal": "Find the id",
        "completion": {"capability": "search", "path": f"items.{part}.id", "exists": True},
        "capabilities": [{"name": "search", "side_effect": "none", "volatile_paths": [f"items.{part}.etag"],
                          "responses": [{"return": {"items": [{"id": "a", "etag": "1"}]}}]}],
        "planner": {"plans": [[{"capability": "search", "arguments": {"q": "x"}}]]},
    }


@pytest.mark.parametrize("part", ODD_PARTS, ids=["superscript", "double-minus", "minus-superscript", "5000-digits",
                                                 "circled"])
def test_a_path_with_an_odd_index_resolves_to_nothing_through_the_controller(tmp_path, part):
    """Before: resolve_path and without_paths called int("²"): the pass raised ValueError."""
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(scenario(part)))
    out = StringIO()
    call_command("run_scenario", str(path), "--json", stdout=out)   # no expectations: it passes if it runs
    result = json.loads(out.getvalue())[0]
    assert result["stop_reason"] not in (None, "internal_error"), result
    assert result["status"] != "completed"   # items.<part>.id names no element


def test_a_plain_index_still_resolves():
    from runtime.completion import resolve_path
    from runtime.signatures import without_paths

    assert resolve_path({"a": [1, 2]}, "a.-1") == (True, 2)
    assert resolve_path({"a": [1, 2]}, "a.0") == (True, 1)
    assert without_paths({"a": [{"x": 1}]}, ["a.0.x"]) == {"a": [{}]}
