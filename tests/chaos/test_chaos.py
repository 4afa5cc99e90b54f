"""The chaos suite, reduced: bench/chaos.py on its own PostgreSQL cluster and Redis.

Ports come from CHAOS_PG_PORT (5441) and CHAOS_REDIS_PORT (6391). The full size is
`.venv/bin/python bench/chaos.py` (300 runs, 120 s of chaos); see docs/operations.md.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


@pytest.mark.skipif(not (shutil.which("pg_createcluster") and shutil.which("redis-server")),
                    reason="needs PostgreSQL's cluster tools and redis-server")
@pytest.mark.timeout(900)
def test_no_run_is_lost_and_no_effect_is_repeated_while_everything_crashes():
    size = os.environ.get("CHAOS_SIZE", "--runs 40 --duration 40 --workers 3 --settle 240").split()
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), *size, "--json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=880)
    assert result.stdout.strip(), result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(figures, indent=1))
    assert figures["failures"] == [], figures
    assert figures["not_finished"] == 0 and figures["internal_error"] == 0
    assert figures["duplicate_effects"] == {} and figures["executions_missing_from_trace"] == 0
    assert figures["slow_call_executions"] == 1
    assert figures["concurrent_approvals"].get("won") == 1 and figures["contested_audit_rows"] == 1
    assert figures["worker_kills"] >= 3 and figures["redis_restarts"] >= 1 and figures["pg_restarts"] >= 1
    assert figures["worker_pauses"] >= 1 and figures["late_landing_items"] >= 1   # SIGSTOP and late landings
    assert figures["late_landing_effects"] == figures["late_landing_items"]
    assert figures["llm_runs"] >= 1 and figures["provider_calls"] <= figures["planner_calls_recorded"]
