"""Completion and `until` checks use JSON semantics (design.md "Corners, decided")."""
import pytest

from runtime.completion import CompletionCriteria, condition_errors, json_equal, until_condition


def check(expected_form, output):
    return CompletionCriteria.from_dict({"capability": "c", "path": "v", **expected_form}).is_met_by({"v": output})


@pytest.mark.parametrize("a, b", [(1, 1.0), (0, 0.0), (True, True), ("a", "a"), (None, None), ([1, {"x": 2}], [1.0, {"x": 2.0}]),
                                  ({"a": [True]}, {"a": [True]})])
def test_json_equal_values(a, b):
    assert json_equal(a, b) and json_equal(b, a)


@pytest.mark.parametrize("a, b", [(True, 1), (False, 0), (True, 1.0), ("1", 1), ("", None), (0, None), ([], {}),
                                  ([1, 2], [2, 1]), ({"a": 1}, {"a": 1, "b": 2}), ("A", "a"), ([True], [1])])
def test_json_unequal_values(a, b):
    assert not json_equal(a, b) and not json_equal(b, a)


def test_equals_true_is_not_met_by_one():
    assert not check({"equals": True}, 1)
    assert check({"equals": True}, True)


def test_equals_one_is_met_by_one_point_zero():
    assert check({"equals": 1}, 1.0)


def test_exists_needs_a_non_null_value():
    assert not check({"exists": True}, None)
    assert check({"exists": True}, 0) and check({"exists": True}, False) and check({"exists": True}, "")
    assert not CompletionCriteria.from_dict({"capability": "c", "path": "missing", "exists": True}).is_met_by({})


@pytest.mark.parametrize("value", [None, "", [], {}])
def test_not_empty_fails_only_for_null_and_empty_containers(value):
    assert not check({"not_empty": True}, value)


@pytest.mark.parametrize("value", [0, False, " ", [None], {"tags": []}, {"total": 0}])
def test_not_empty_holds_for_anything_else(value):
    assert check({"not_empty": True}, value)


def test_in_uses_json_equality():
    assert check({"in": ["done", 1]}, 1.0)
    assert not check({"in": [1]}, True)
    assert not check({"in": []}, "done")


def test_until_is_a_condition_on_the_capability_itself():
    until = until_condition("job_status", {"path": "state", "in": ["done", "failed"]})
    assert until.capability == "job_status" and until.is_met_by({"state": "failed"})
    assert until_condition("job_status", None) is None


def test_until_errors_are_listed():
    errors = condition_errors({"path": 1, "in": "done", "colour": "red"}, "polling.until")
    assert "polling.until.path must be a string" in errors
    assert "polling.until.in must be a list of values" in errors
    assert "unknown polling.until fields: colour" in errors
    with pytest.raises(ValueError):
        until_condition("job_status", {"path": "state"})
