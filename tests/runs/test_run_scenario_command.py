"""`manage.py run_scenario`: the public scenario contract from the command line."""
import io
import json
from pathlib import Path

from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "tests" / "scenarios").glob("*.json"))
FIELDS = {"name", "passed", "failures", "status", "stop_reason", "tool_calls", "revisions", "retries",
          "approvals_requested", "side_effects_committed", "tokens", "elapsed_s"}


def run(*args):
    """`manage.py run_scenario ARGS`, in this process: (exit status, stdout)."""
    out = io.StringIO()
    try:
        call_command("run_scenario", *args, stdout=out)
    except SystemExit as exit:
        return exit.code, out.getvalue()
    return 0, out.getvalue()


class TestRunScenarioCommand:
    def test_it_passes_every_bundled_scenario_and_prints_one_json_array(self):
        assert len(SCENARIOS) >= 30
        status, out = run("--json", *map(str, SCENARIOS))
        assert status == 0, out[-2000:]
        report = json.loads(out)
        assert len(report) == len(SCENARIOS)
        assert all(set(item) >= FIELDS and item["passed"] for item in report)
        by_name = {item["name"]: item for item in report}
        # stall_kind is null unless the run stalled, and says which kind when it did.
        assert all((item["stall_kind"] is None) == (item["stop_reason"] != "stalled") for item in report)
        assert by_name["a tool that keeps failing until the planner has nothing more stalls planner_exhausted"][
            "stall_kind"] == "planner_exhausted"

    def test_it_exits_non_zero_when_an_expectation_fails(self, tmp_path):
        scenario = json.loads((ROOT / "tests" / "scenarios" / "timeout_loop_stalls.json").read_text())
        scenario["expect"]["stop_reason"] = "completed"
        path = tmp_path / "wrong.json"
        path.write_text(json.dumps(scenario))
        status, out = run("--json", str(path))
        assert status == 1
        [item] = json.loads(out)
        assert item["passed"] is False and item["stop_reason"] == "stalled"
        assert any("stop_reason" in failure for failure in item["failures"])

    def test_it_reports_an_invalid_file_clearly(self, tmp_path):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({"name": "bad", "capabilities": "nope"}))
        status, out = run(str(path))
        assert status == 1
        assert "invalid scenario" in out
