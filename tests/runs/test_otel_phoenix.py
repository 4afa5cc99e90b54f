"""A run's trace read back from Arize Phoenix (a real OTel backend on SQLite, loopback only).

Phoenix is large (about 850 MB installed), so it is not a test dependency: install it in a
separate environment and point AGENTOPS_TEST_PHOENIX at its `phoenix` executable, e.g.

    python3.11 -m venv /opt/phoenix && /opt/phoenix/bin/pip install arize-phoenix
    AGENTOPS_TEST_PHOENIX=/opt/phoenix/bin/phoenix .venv/bin/python -m pytest tests/runs/test_otel_phoenix.py

Without it the test is skipped; tests/runs/test_otel_export.py checks the same export
against an OTLP receiver built on opentelemetry-proto, always.
"""
import json
import os
import shutil
import subprocess
import sys
import urllib.request

import pytest

from runs import otel, services
from runs.models import Attempt, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUEUE = "agentops-phoenix-test"


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _up(url):
    try:
        _get(url)
        return True
    except OSError:
        return False

# The project the spans land in (AGENTOPS_OTEL_PROJECT), not Phoenix's "default".
PROJECT = "agentops-issue-35"


@pytest.fixture
def phoenix(tmp_path, wait_until):
    executable = os.environ.get("AGENTOPS_TEST_PHOENIX") or shutil.which("phoenix")
    if not executable:
        pytest.skip("Arize Phoenix is not installed (set AGENTOPS_TEST_PHOENIX to its phoenix executable)")
    port = os.environ.get("AGENTOPS_TEST_PHOENIX_PORT", "16006")
    env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": port,
           "PHOENIX_GRPC_PORT": os.environ.get("AGENTOPS_TEST_PHOENIX_GRPC_PORT", "14317"),
           "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"), "PHOENIX_TELEMETRY_ENABLED": "false"}
    proc = subprocess.Popen([executable, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _up(f"{base}/v1/projects"), timeout=120, interval=0.5, message="Phoenix to start")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def phoenix_worker(phoenix, worker_env):
    """A worker of its own (its own queue) exporting to Phoenix."""
    from django.conf import settings

    env = {**worker_env, "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix, "AGENTOPS_OTEL_PROJECT": PROJECT}
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads", "--concurrency", "2",
         "-Q", QUEUE, "--loglevel", "WARNING", "--without-mingle", "--without-gossip",
         "--hostname", f"phoenix-{os.getpid()}@%h"], cwd=settings.BASE_DIR, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_run_is_readable_in_phoenix_with_the_ids_of_our_trace_page(phoenix, phoenix_worker, operator,
                                                                      manual_advance, wait_until):
    from capabilities.kinds.python.sync import python_capabilities_sync
    from runs.tasks import advance_run

    python_capabilities_sync()
    run = services.run_start(owner=operator, goal="Find the travel policy", planner="scripted",
                             planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}},
                                                        {"capability": "get_document", "arguments": {"id": "POL-7"}}]]},
                             completion={"capability": "get_document", "path": "id", "equals": "POL-7"},
                             budgets={"deadline_s": 120}, labels={"team": "payments"})
    advance_run.apply_async((run.pk,), queue=QUEUE)
    run = wait_until(lambda: Run.objects.filter(pk=run.pk, finished_at__isnull=False).first(), timeout=60,
                     message="the run to finish")
    assert run.stop_reason == "completed"

    def spans():
        found = _get(f"{phoenix}/v1/projects/{PROJECT}/spans?limit=100")["data"]
        mine = [s for s in found if s["context"]["trace_id"] == run.trace_id]
        return mine if any(s["name"] == "invoke_agent" for s in mine) else None

    mine = wait_until(spans, timeout=60, interval=0.5, message="the trace in Phoenix")
    root = next(s for s in mine if s["name"] == "invoke_agent")
    assert root["context"]["span_id"] == otel.run_span_id(run.trace_id)
    assert root["attributes"]["agentops.stop_reason"] == "completed"
    assert root["attributes"]["agentops.label.team"] == "payments"
    tools = [s for s in mine if s["name"].startswith("execute_tool ")]
    assert {s["context"]["span_id"] for s in tools} == set(Attempt.objects.filter(run=run)
                                                            .values_list("span_id", flat=True))
    assert all(s["parent_id"] == root["context"]["span_id"] for s in tools)
    assert {s["attributes"]["gen_ai.tool.name"] for s in tools} == {"search_documents", "get_document"}
    # Phoenix reads each span's kind; the plan span is a chain, not "unknown".
    assert {s["name"]: s["span_kind"] for s in mine if not s["name"].startswith("execute_tool ")} == {
        "invoke_agent": "AGENT", "plan scripted": "CHAIN"}
    assert {s["span_kind"] for s in tools} == {"TOOL"}
