"""A backlog through a real worker and a real scheduler, on the configured database and broker.

bench/backlog.py at a reduced size: 600 runs queued at once while the orphan sweep runs every 2 s
(lease 4 s), so every run waits in the queue longer than a lease. Waiting its turn is not being
lost: no run is sent again and the queue never grows past the runs queued.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = 600   # enough that the backlog outlasts a lease on a fast machine (300 drained in 3.9 s)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]  # flushes what the bench wrote


@pytest.mark.timeout(600)
def test_a_backlog_drains_without_its_runs_being_sent_again(worker_env):
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "backlog.py"), "--runs", str(RUNS), "--workers", "1",
         "--concurrency", "4", "--lease", "4", "--json"],
        cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=580)
    assert result.stdout.strip(), result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(figures, indent=1))
    assert figures["runs_completed"] == RUNS
    assert figures["drain_s"] > figures["lease_s"]  # runs waited longer than the old rule allowed
    assert figures["resent_tasks"] <= RUNS // 100
    # The scheduler's own tasks (sweeps, heartbeats) share the queue.
    assert figures["max_queue_length"] <= RUNS + figures["scheduler_tasks_sent"]
