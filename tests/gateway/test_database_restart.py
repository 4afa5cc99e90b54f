"""The gateway through a restart of its database: the production processes (`manage.py serve`: uvicorn,
a Celery worker, Celery beat, on Redis) on a PostgreSQL cluster of the test's own, restarted between two
calls of one MCP session. The web process serves again once the database is back, without a restart of
its own, and each non-idempotent write runs once: its effects are counted in a ledger outside the product."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import httpx2
import pytest
import requests
from chaos_ledger import effects_by_item
from test_mcp_client import RAW_HEADERS, raw_session, sse_message
from threaded import run_in_thread  # noqa: E402 - tests/gateway is on sys.path (its conftest)

from tests.conftest import ROOT, wait_until
from tests.project.test_database_outage import free_port
from tests.project.test_read_replica import Cluster

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                                 reason="PostgreSQL stage only (the cluster restarted is the test's own)"),
              pytest.mark.skipif(not Path("/usr/bin/pg_createcluster").exists(),
                                 reason="needs Debian's PostgreSQL cluster tools")]

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def product(tmp_path_factory):
    cluster = Cluster(f"agentops-gwrestart-{os.getpid()}", free_port())
    try:
        cluster.create()
        cluster.start()
        with serving(cluster, tmp_path_factory.mktemp("var"), "restarts") as served:
            yield served
    finally:
        cluster.drop()


@contextlib.contextmanager
def serving(cluster: Cluster, var: Path, agent: str, *, database_port: int | None = None, **settings: str):
    """The production processes (`manage.py serve`) on `cluster` (reached at `database_port`, a proxy's,
    if given), with these settings, an agent allowed gw_slow_write and its token, the ledger in `var`."""
    database = f"127.0.0.1:{database_port or cluster.port}"
    env = {"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), str(ROOT / "tests" / "chaos")]),
           "DATABASE_URL": f"postgres://postgres@{database}/agentops?sslmode=disable",
           "AGENTOPS_VAR_DIR": str(var), "CHAOS_LEDGER": str(var / "ledger.jsonl"),
           # The production broker, on a queue of this test's own (the suite's workers take theirs).
           "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"], "AGENTOPS_TASK_QUEUE": f"gw{agent}-{os.getpid()}",
           "AGENTOPS_CAPABILITY_MODULES": "capabilities.demo.functions,gw_capabilities",
           "AGENTOPS_RUN_LEASE_SECONDS": "6", "SECRET_KEY": "g" * 50, "ALLOWED_HOSTS": "127.0.0.1",
           "SECURE_SSL_REDIRECT": "false", "DEBUG": "false", **settings}
    manage = [sys.executable, "manage.py"]
    serve = None
    try:
        cluster.sql("CREATE DATABASE agentops")
        for command in (["migrate", "--no-input"], ["seed_demo", "--no-runs"],
                        ["sync_capabilities", "--module", "gw_capabilities"]):
            subprocess.run([*manage, *command], cwd=ROOT, env=env, check=True, capture_output=True)
        token = subprocess.run([*manage, "create_agent", agent, "--owner", "admin", "--capability",
                                "gw_slow_write"], cwd=ROOT, env=env, check=True, capture_output=True,
                               text=True).stdout.strip().splitlines()[-1]
        port = free_port()
        serve = subprocess.Popen([*manage, "serve", "--port", str(port), "--concurrency", "2"], cwd=ROOT, env=env,
                                 stdout=(var / "serve.log").open("w"), stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _healthy(url), timeout=90, message="the product answers /healthz")
        yield {"mcp": f"{url}/mcp/", "url": url, "token": token, "cluster": cluster, "env": env,
               "log": var / "serve.log"}
    finally:
        if serve is not None:
            serve.send_signal(signal.SIGINT)
            serve.wait(timeout=60)
        _forget_queue(env)


def _forget_queue(env: dict[str, str]) -> None:
    """The test's queue and its bindings leave the shared broker with it."""
    import redis

    queue = env["AGENTOPS_TASK_QUEUE"]
    client = redis.Redis.from_url(env["CELERY_BROKER_URL"])
    client.delete(queue, *client.keys(f"_kombu.binding*.{queue}"), *client.keys(f"{queue}\x06*"))


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def restart(cluster: Cluster, down_s: float = 0.0) -> None:
    """Stop the cluster as an operator's restart does (every session is ended), then start it."""
    cluster.ctl("stop", "-m", "fast")
    time.sleep(down_s)
    cluster.start()


def write(item: str, seconds: float, request_id: int) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "gw_slow_write", "arguments": {"item": item, "seconds": seconds}}}


async def answer_trying_again(http: httpx2.AsyncClient, product, call: dict, headers: dict) -> tuple[dict, int]:
    """The call's answer, sent again (the same call) while the gateway says the database is unavailable,
    as it tells a client to; and how many times it was sent."""
    for sent in range(1, 31):
        response = await http.post(product["mcp"], json={**call, "id": call["id"] + 100 * sent}, headers=headers)
        if response.status_code == 503:
            answer = json.loads(response.text)
        else:
            answer = sse_message(response.text, call["id"] + 100 * sent)
        if answer.get("error", {}).get("code") != -32603:
            return answer, sent
        assert answer["error"]["message"] == "The database is unavailable; try again shortly.", answer
        await anyio.sleep(1)
    raise AssertionError(f"still unavailable after {sent} tries: {answer}")


def test_the_gateway_serves_again_after_its_database_restarted_without_a_restart_of_its_own(product):
    items = [f"before-{uuid.uuid4().hex[:8]}", f"after-{uuid.uuid4().hex[:8]}"]

    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {product['token']}", **RAW_HEADERS},
                                      timeout=90) as http:
            headers = await raw_session(http, product["mcp"])
            before, _ = await answer_trying_again(http, product, write(items[0], 0.1, 1), headers)
            await anyio.to_thread.run_sync(restart, product["cluster"])
            after, sent = await answer_trying_again(http, product, write(items[1], 0.1, 2), headers)
            await http.delete(product["mcp"], headers=headers)
            return before, after, sent

    before, after, sent = run_in_thread(go)
    for answer, item in zip((before, after), items, strict=True):
        assert "error" not in answer and not answer["result"]["isError"], answer
        assert answer["result"]["structuredContent"]["item"] == item
    assert sent == 1, "the first call after the restart is served (the web process replaced its sessions)"
    effects = effects_by_item(product["env"]["CHAOS_LEDGER"], "gw_slow_write")
    assert [effects.get(item) for item in items] == [1, 1]


def _write_during(product, item: str, seconds: float, *, down_after_s: float, down_s: float) -> tuple[dict, int]:
    """One non-idempotent write of `seconds` in a session of its own, the cluster stopped `down_after_s`
    into it for `down_s`; the call's answer (sent again while the gateway says to) and how many sends."""
    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {product['token']}", **RAW_HEADERS},
                                      timeout=180) as http:
            headers = await raw_session(http, product["mcp"])
            box: dict = {}

            async def call():
                box["answer"] = await answer_trying_again(http, product, write(item, seconds, 1), headers)

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await anyio.sleep(down_after_s)
                await anyio.to_thread.run_sync(restart, product["cluster"], down_s)
            await http.delete(product["mcp"], headers=headers)
            return box["answer"]

    return run_in_thread(go)


def test_a_write_the_database_restarted_under_answers_its_outcome_and_runs_once(product):
    """The cluster is down for a second early in an 8 s write and back before it ends: the worker writes
    the outcome on a new session, and the client, sending the same call again as told, gets it."""
    item = f"during-{uuid.uuid4().hex[:8]}"
    answer, _sent = _write_during(product, item, 8, down_after_s=1.0, down_s=1.0)
    assert "error" not in answer and not answer["result"]["isError"], answer
    assert answer["result"]["structuredContent"]["item"] == item
    assert effects_by_item(product["env"]["CHAOS_LEDGER"], "gw_slow_write").get(item) == 1


def test_a_write_that_ended_while_the_database_was_down_is_concluded_unknown_not_stranded(product):
    """The cluster stays down past the end of a 1 s write: its outcome cannot be written, and the write is
    not idempotent, so it is never sent again. Once the run's lease runs out the sweep has a worker
    conclude it (the run stops: the write may or may not have committed), and the client's call gets that
    answer instead of waiting until it gives up (before, the run waited until its session ended)."""
    item = f"unknown-{uuid.uuid4().hex[:8]}"
    answer, _sent = _write_during(product, item, 1, down_after_s=0.5, down_s=3.0)
    result = answer["result"]
    assert result["isError"], answer
    assert result["_meta"]["agentops/stop_reason"] == "terminal_failure:outcome_unknown", json.dumps(answer)
    assert result["structuredContent"]["error"]["side_effect"] == "unknown"
    assert result["structuredContent"]["error"]["retryable"] is False  # calling again might write twice
    assert "may or may not have committed" in result["structuredContent"]["run"]["stop_detail"]
    assert effects_by_item(product["env"]["CHAOS_LEDGER"], "gw_slow_write").get(item) == 1
