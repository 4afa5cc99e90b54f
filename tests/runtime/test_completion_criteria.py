import pytest

from runtime.completion import (
    CompletionCriteria,
    completion_errors,
    completion_met,
    is_empty,
    register_check,
    resolve_path,
)

OUTPUT = {"documents": [{"id": "POL-7", "tags": []}], "total": 0}


def test_it_follows_dotted_paths_with_list_indexes():
    assert resolve_path(OUTPUT, "documents.0.id") == (True, "POL-7")
    assert resolve_path(OUTPUT, "documents.-1.id") == (True, "POL-7")
    assert resolve_path(OUTPUT, "documents.1.id") == (False, None)
    assert resolve_path(OUTPUT, "documents.x") == (False, None)
    assert resolve_path(OUTPUT, "") == (True, OUTPUT)


def test_equals_compares_the_value_at_the_path():
    assert CompletionCriteria.from_dict({"capability": "s", "path": "documents.0.id", "equals": "POL-7"}).is_met_by(OUTPUT)
    assert not CompletionCriteria.from_dict({"capability": "s", "path": "documents.0.id", "equals": "POL-8"}).is_met_by(OUTPUT)


def test_equals_null_is_distinct_from_a_missing_path():
    criteria = CompletionCriteria.from_dict({"capability": "s", "path": "a", "equals": None})
    assert criteria.is_met_by({"a": None})
    assert not criteria.is_met_by({})


def test_exists_and_not_empty():
    exists = CompletionCriteria.from_dict({"capability": "s", "path": "total", "exists": True})
    not_empty = CompletionCriteria.from_dict({"capability": "s", "path": "documents.0.tags", "not_empty": True})
    assert exists.is_met_by(OUTPUT) and not exists.is_met_by({})
    assert not not_empty.is_met_by(OUTPUT)


def test_a_registered_check_runs_on_the_value_at_the_path():
    @register_check("at_least")
    def at_least(value, params):
        return isinstance(value, int) and value >= params["n"]

    criteria = CompletionCriteria.from_dict({"capability": "s", "path": "count", "check": "at_least", "params": {"n": 3}})
    assert criteria.is_met_by({"count": 3}) and not criteria.is_met_by({"count": 2})
    assert CompletionCriteria.from_dict(criteria.to_dict()) == criteria


def test_it_is_checked_against_the_named_capabilitys_latest_ok_output():
    criteria = CompletionCriteria(capability="search", path="documents.0.id", check="equals", expected="POL-7")
    assert completion_met(criteria, {"search": OUTPUT})
    assert not completion_met(criteria, {"other": OUTPUT})


def test_invalid_criteria_list_every_problem():
    errors = completion_errors({"path": 3, "exists": "yes", "colour": "red"})
    assert len(errors) == 4
    assert completion_errors({"capability": "s", "equals": 1, "exists": True})
    assert completion_errors({"capability": "s", "check": "never_registered"})
    with pytest.raises(ValueError):
        CompletionCriteria.from_dict({"capability": "s"})


def test_empty_means_nothing_useful():
    for value in (None, "", [], {}, {"documents": [], "next": None}):
        assert is_empty(value)
    for value in (0, False, "x", [0], {"documents": [1]}):
        assert not is_empty(value)


def test_builtin_check_names_cannot_be_overridden():
    with pytest.raises(ValueError):
        register_check("equals")


def test_a_dict_of_empty_collections_and_zero_counts_is_empty():
    from runtime.completion import is_empty

    assert is_empty({"documents": [], "total": 0})
    assert not is_empty({"documents": [{"id": "POL-1"}], "total": 1})
    assert not is_empty(0)
    assert not is_empty({"ok": False})
