"""The chaos suite, reduced: bench/chaos.py on its own PostgreSQL cluster and Redis.

Ports come from CHAOS_PG_PORT (5441) and CHAOS_REDIS_PORT (6391), the cluster's name from
CHAOS_PG_CLUSTER (chaos). Reduced: 40 runs, 40 s of chaos, a threads, a gevent and a prefork
worker, late landings, SIGSTOPs, one worker killed in a stdio MCP call and one web process killed
inside an approval POST; no backlog. The full size is `.venv/bin/python bench/chaos.py` (300 runs,
120 s of chaos, 3 of each aimed kill, a backlog of 2,000 runs); see docs/operations.md.
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
    size = os.environ.get("CHAOS_SIZE", "--runs 40 --duration 40 --workers 3 --settle 240 "
                                        "--mcp-kills 1 --web-kills 1 --backlog 0").split()
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
    # The gevent worker took calls and met the faults the others meet.
    assert figures["executions_by_pool"].get("gevent", 0) >= 1, figures["executions_by_pool"]
    assert figures["faults_by_pool"].get("SIGSTOP gevent", 0) >= 1, figures["faults_by_pool"]
    assert figures["faults_by_pool"].get("SIGKILL gevent", 0) >= 1, figures["faults_by_pool"]
    assert list(figures["mcp_stdio_effects"].values()) == [1] and list(figures["web_kill_effects"].values()) == [1]
    assert figures["web_kill_posts_that_decided"] == 0 and figures["web_kill_decisions"] == 1
    assert figures["llm_runs"] >= 1 and figures["provider_calls"] <= figures["planner_calls_recorded"]
