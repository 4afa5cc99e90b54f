"""Run scenario files through the real controller; exit non-zero if any expectation fails."""
import json as jsonlib
import sys

from django.core.management.base import BaseCommand, CommandError

from runtime.sim.scenario import EXPECT_FIELDS, ScenarioError, load_scenario, run_scenario

# The scenario contract's fields, stall_kind (null unless stalled) included.
FIELDS = EXPECT_FIELDS


class Command(BaseCommand):
    help = "Run scenario files (simulated capabilities and clock, scripted planner) and check their expectations."

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", metavar="FILE")
        parser.add_argument("--json", action="store_true", help="print one JSON array, an object per file")
        parser.add_argument("--mode", choices=["planning", "direct"], default="planning")

    def handle(self, *args, files, mode, **options):
        as_json = options["json"]
        results = []
        for path in files:
            try:
                result = run_scenario(load_scenario(path), mode=mode).to_dict()
            except FileNotFoundError:
                raise CommandError(f"{path}: no such file") from None
            except ScenarioError as exc:
                result = {"name": path, "passed": False, "failures": [f"invalid scenario: {exc}"],
                          **{field: None for field in FIELDS}}
            results.append(result)
        if as_json:
            self.stdout.write(_json_dumps(results))
        else:
            for result in results:
                mark = "PASS" if result["passed"] else "FAIL"
                self.stdout.write(f"{mark}  {result['name']}")
                summary = ", ".join(f"{f}={result[f]}" for f in FIELDS if result.get(f) is not None)
                self.stdout.write(f"      {summary}")
                for failure in result["failures"]:
                    self.stdout.write(f"      - {failure}")
            passed = sum(r["passed"] for r in results)
            self.stdout.write(f"{passed} passed, {len(results) - passed} failed")
        if not all(r["passed"] for r in results):
            sys.exit(1)


def _json_dumps(value) -> str:
    return jsonlib.dumps(value, indent=2, default=str)
