"""Probes, management commands an operator runs: what is typed wrong ends in one line (a CommandError: a
non-zero exit, no traceback) and writes nothing. Undecodable bytes on a command line reach Python as lone
surrogates (\\udcff), which neither database takes; NUL can come only through call_command."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from gateway.models import Agent

pytestmark = pytest.mark.django_db


def run(*args):
    return call_command(*args, stdout=StringIO(), stderr=StringIO())


@pytest.mark.parametrize("args", [
    ["a\udcff", "--owner", "{owner}"], ["x", "--owner", "ow\udcffner"], ["x\x00", "--owner", "{owner}"],
    ["x", "--owner", "{owner}", "--capability", "c\udcff"], ["x", "--owner", "{owner}", "--project", "p\udcff"],
    ["x", "--owner", "{owner}", "--budgets", "[" * 100_000], ["x", "--owner", "{owner}", "--completion", "{" * 100_000],
    ["x", "--owner", "{owner}", "--budgets", '{"max_tool_calls": NaN}'],
    ["x", "--owner", "{owner}", "--budgets", '{"max_tool_calls": 1e999}'],
    ["x", "--owner", "{owner}", "--budgets", '{"max_tool_calls": 100000000000000000000000}'],
    ["x", "--owner", "{owner}", "--budgets", "[]"], ["x", "--owner", "{owner}", "--budgets", '"s"'],
    ["x", "--owner", "{owner}", "--completion", "[]"], ["x", "--owner", "{owner}", "--completion", "0"],
    ["x", "--owner", "{owner}", "--completion", '{"capability": "c\\u0000"}'],
    ["x", "--owner", "{owner}", "--expires-in-days", "99999999999999999999"], ["x" * 10_000, "--owner", "{owner}"],
], ids=lambda args: repr(args)[:60])
def test_create_agent_refuses_in_one_line(operator, args):
    """Before: a surrogate in --owner, --capability or --project was a UnicodeEncodeError, deep JSON a
    RecursionError, and --completion '[]' made an agent whose every session failed to open."""
    args = [a.replace("{owner}", operator.username) for a in args]
    with pytest.raises(CommandError):
        run("create_agent", *args)
    assert not Agent.objects.exists()


@pytest.mark.parametrize("completion", [[], 0, "", False])
def test_the_agent_api_refuses_completion_criteria_that_are_not_an_object(api_for, registry_admin, operator,
                                                                          completion):
    """Before: a falsy non-object was saved, and each MCP session of the agent then failed at initialize."""
    response = api_for(registry_admin).post("/api/agents/", {"name": "a", "owner": operator.username,
                                                             "capabilities": [], "completion": completion},
                                            format="json")
    assert response.status_code == 400, response.content
    assert "completion" in response.json()["error"]["fields"]
    assert not Agent.objects.exists()


@pytest.mark.parametrize("args", [
    ["{owner}", "--name", "n\udcff"], ["{owner}", "--name", "n\x00"], ["u\udcff"], ["{owner}", "--project", "p\udcff"],
    ["{owner}", "--days", "99999999999999999999"],
])
def test_create_api_token_refuses_in_one_line(operator, args):
    from core.models import ApiToken

    with pytest.raises(CommandError):
        run("create_api_token", *[a.replace("{owner}", operator.username) for a in args])
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("args", [
    ["--older-than", "9999999999"], ["--older-than", "99999999999999999999999"], ["--older-than", "800000"],
    ["--older-than", "-1"], ["--older-than", "1", "--batch-size", "99999999999999999999999"],
    ["--older-than", "1", "--batch-size", "0"],
])
def test_purge_runs_refuses_in_one_line(args):
    """Before: --older-than past timedelta's range was an OverflowError, a huge --batch-size a database error."""
    with pytest.raises(CommandError):
        run("purge_runs", *args)


def test_purge_runs_goes_back_as_far_as_dates_go():
    run("purge_runs", "--older-than", "700000", "--dry-run")


@pytest.mark.parametrize("args", [["99999999999999999999999"], ["-1"]])
def test_export_scenario_of_no_run_refuses_in_one_line(args):
    with pytest.raises(CommandError):
        run("export_scenario", *args)


@pytest.mark.parametrize("args", [
    ["--suite", "s\udcff"], ["--suite", "s\x00"], ["--user", "u\udcff"], ["--label", "l\x00"],
    ["--label", "l\udcff"], ["--label", "l" * 10_000], ["--project", "p\x00"], ["--planner-config", "[" * 100_000],
    ["--planner-config", "[]"], ["--planner-config", '{"a": NaN}'], ["--planner-config", '{"a": "\\u0000"}'],
])
def test_evaluate_refuses_in_one_line(operator, args):
    """Before: a surrogate was a UnicodeEncodeError, deep JSON a RecursionError, a NaN in --planner-config an
    IntegrityError (SQLite's JSON_VALID) or a DataError (PostgreSQL)."""
    from evaluation.models import Evaluation

    with pytest.raises(CommandError):
        run("evaluate", *args)
    assert not Evaluation.objects.exists()


@pytest.mark.parametrize("content", [b"\xff\xfe{}", b"[" * 100_000, b"{\"name\": NaN"], ids=["latin-1", "deep", "broken"])
def test_run_scenario_reports_a_file_it_cannot_read_as_a_failed_scenario(tmp_path, content):
    """Before: a file not in UTF-8 was a UnicodeDecodeError, a deeply nested one a RecursionError."""
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("run_scenario", str(path), stdout=out)
    assert exited.value.code == 1
    assert "invalid scenario:" in out.getvalue() and "cannot read JSON" in out.getvalue()
