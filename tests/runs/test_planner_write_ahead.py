"""A worker SIGKILLed during an LLM planner call, through real Celery workers and a chat-completions
server of our own on loopback: the call was written ahead, the next worker counts it once (as an
estimate: its answer never came) and asks again; the provider is called as often as the run counts."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runs.models import PlannerCall, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USAGE = {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}
PLAN = {"steps": [{"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"},
                   "expected_outcome": "a policy", "depends_on": []}]}
MAX_TOKENS = 512
PRICES = {"price_per_1k_prompt_tokens": 0.01, "price_per_1k_completion_tokens": 0.03}
LEASE_S = 3


class HoldingProvider:
    """Answers every chat completion with PLAN and USAGE, except the first, which it holds (never
    answers) until released: the worker making it is killed meanwhile. Counts what it served."""

    def __init__(self):
        self.received = []            # Content-Length of each request, in arrival order
        self.served_tokens = 0
        self.release = threading.Event()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                provider.received.append(length)
                if len(provider.received) == 1:
                    provider.release.wait(60)
                    return                 # its caller is dead: nothing is served
                body = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "usage": USAGE,
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": json.dumps(PLAN)}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())
                provider.served_tokens += USAGE["total_tokens"]

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider(settings):
    fake = HoldingProvider()
    settings.AGENTOPS_LLM_ENDPOINTS = {"fake": {"base_url": fake.base_url}}
    settings.AGENTOPS_RUN_LEASE_SECONDS = LEASE_S   # the orphan sweep run here goes by the workers' lease
    yield fake
    fake.close()


@pytest.fixture
def demo_capabilities(db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


@pytest.fixture
def workers(provider, tmp_path, own_task_queue):
    """Starts real Celery workers on the test database and broker, each with a short lease, taking
    tasks from a queue of the test's own: only they take the run, not the session's worker (which
    has no fake provider)."""
    env = {**own_task_queue.env, "AGENTOPS_RUN_LEASE_SECONDS": str(LEASE_S),
           "AGENTOPS_LLM_ENDPOINTS": json.dumps({"fake": {"base_url": provider.base_url}})}
    started = []

    def start(name):
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - the worker process writes it
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads", "--concurrency", "2",
             "--loglevel", "WARNING", "--without-mingle", "--without-gossip", "--hostname", f"{name}-{os.getpid()}@%h"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_a_planner_call_lost_with_its_worker_is_counted_once_as_an_estimate_and_asked_again(
        provider, workers, operator, demo_capabilities, wait_until):
    from runs import services
    from runs.worker.sweeps import requeue_orphaned_runs

    first = workers("first")
    run = services.run_start(owner=operator, goal="Find the travel policy", planner="llm",
                             planner_config={"endpoint": "fake", "model": "m", "max_tokens": MAX_TOKENS, **PRICES},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                             budgets={"deadline_s": 120})
    wait_until(lambda: len(provider.received) == 1, timeout=60, message="the first worker's planner call")
    # Written ahead: the call was on record before the provider saw it.
    (call,) = PlannerCall.objects.filter(run=run)
    assert call.in_flight and call.revision == 1 and call.max_tokens >= provider.received[0] + MAX_TOKENS
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    provider.release.set()

    workers("second")
    # What the beat does: a run nobody advances is queued again once its lease has expired.
    wait_until(lambda: requeue_orphaned_runs() is not None and Run.objects.get(pk=run.pk).is_finished,
               timeout=90, interval=1.0, message="the second worker to finish the run")

    run.refresh_from_db()
    lost, answered = PlannerCall.objects.filter(run=run).order_by("started_at")
    assert (run.status, run.stop_reason) == ("completed", "completed")
    assert (lost.lost, lost.estimated, lost.in_flight, lost.tokens) == (True, True, False, call.max_tokens)
    assert (answered.lost, answered.estimated, answered.tokens) == (False, False, USAGE["total_tokens"])
    # The provider was called as often as the run counted planner calls ...
    assert len(provider.received) == PlannerCall.objects.filter(run=run).count() == 2
    # ... and the run counted what the provider served, plus the lost call's maximum, said apart.
    assert run.tokens == provider.served_tokens + run.tokens_estimated
    assert run.tokens_estimated == lost.tokens and run.cost_estimated == pytest.approx(lost.max_cost)
    assert run.cost == pytest.approx(lost.max_cost + (100 * PRICES["price_per_1k_prompt_tokens"]
                                                      + 50 * PRICES["price_per_1k_completion_tokens"]) / 1000)
    print(f"\nprovider calls {len(provider.received)}, served {provider.served_tokens} tokens; run counted "
          f"{run.tokens} tokens ({run.tokens_estimated} estimated), cost {run.cost:.6f} ({run.cost_estimated:.6f})")
