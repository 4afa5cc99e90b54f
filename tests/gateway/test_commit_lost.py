"""A call's commit lost on the wire, through the production processes (`manage.py serve`: uvicorn, a Celery
worker, Celery beat, on Redis) and a PostgreSQL cluster of the test's own reached through a proxy
(commit_proxy) that cuts the web process's connection at the COMMIT storing the call's proposal:

- after the server committed it: the proposal is stored, its wake-up of a worker is lost, and the client
  is told the database is unavailable; the same call sent again must pick up that proposal, not
  propose it a second time;
- before the server saw it: nothing is stored, and the same call sent again is proposed and runs.

Either way each non-idempotent write has one effect, counted in a ledger outside the product."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx2
import pytest
from chaos_ledger import effects_by_item
from commit_proxy import CommitProxy
from test_database_restart import answer_trying_again, serving, write
from test_mcp_client import RAW_HEADERS, raw_session
from threaded import run_in_thread  # noqa: E402 - tests/gateway is on sys.path (its conftest)

from tests.project.test_database_outage import free_port
from tests.project.test_read_replica import Cluster

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                                 reason="PostgreSQL stage only (the cluster is the test's own)"),
              pytest.mark.skipif(not Path("/usr/bin/pg_createcluster").exists(),
                                 reason="needs Debian's PostgreSQL cluster tools")]

PROPOSAL = rb'INSERT INTO "runs_plansubmission"'   # call_submit's transaction (the web process)
HOLD = rb'UPDATE "gateway_gatewaysession" SET "held_revision" = \d'   # call_hold, in autocommit (the web process)
OUTCOME = rb'UPDATE "runs_attempt" SET "in_flight" = false'   # a write's outcome (the worker)
INTENT = rb'INSERT INTO "runs_attempt"'   # a write's intent, committed before it is sent (the worker)


@pytest.fixture(scope="module")
def product(tmp_path_factory):
    cluster = Cluster(f"agentops-gwcommit-{os.getpid()}", free_port())
    proxy = None
    try:
        cluster.create()
        cluster.start()
        proxy = CommitProxy(cluster.port)
        with serving(cluster, tmp_path_factory.mktemp("var"), "commits", database_port=proxy.port,
                     AGENTOPS_GATEWAY_CALL_WAIT_S="2") as served:
            yield {**served, "proxy": proxy}
    finally:
        if proxy is not None:
            proxy.close()
        cluster.drop()


def _calls(product, *calls: tuple[tuple | None, dict]) -> list[tuple[dict, int]]:
    """Each call of one session in turn, the proxy armed first with its (mode, pattern) if given; each
    call's concluded answer (the same call sent again while the gateway says the database is unavailable
    or the call is still running, as it tells a client to) and how many sends it took."""
    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {product['token']}", **RAW_HEADERS},
                                      timeout=120) as http:
            headers = await raw_session(http, product["mcp"])
            answers = []
            for arming, call in calls:
                if arming is not None:
                    product["proxy"].arm(*arming)
                sends = 0
                while True:
                    answer, sent = await answer_trying_again(http, product, {**call, "id": call["id"] + 1000 * sends},
                                                             headers)
                    sends += sent
                    error = answer.get("result", {}).get("structuredContent", {}).get("error", {})
                    if error.get("error_code") != "still_running":
                        break
                answers.append((answer, sends))
                if arming is not None:
                    assert product["proxy"].cut.is_set(), f"the proxy did not cut the write ({arming})"
            await http.delete(product["mcp"], headers=headers)
            return answers

    return run_in_thread(go)


def _succeeded(answer: dict, item: str) -> dict:
    assert "error" not in answer and not answer["result"]["isError"], answer
    assert answer["result"]["structuredContent"]["item"] == item
    return answer["result"]["_meta"]


def test_a_call_whose_commit_acknowledgement_was_lost_runs_once_when_sent_again(product):
    items = [f"acklost-{uuid.uuid4().hex[:8]}", f"next-{uuid.uuid4().hex[:8]}"]
    (first, sent), (second, _) = _calls(product, (("ack_lost", PROPOSAL), write(items[0], 0.1, 1)),
                                        (None, write(items[1], 0.1, 2)))
    assert sent == 2, "the first send was told the database is unavailable, the second got the outcome"
    meta = _succeeded(first, items[0])
    assert meta["agentops/attempt"] == 1
    _succeeded(second, items[1])   # a different call next is proposed after the stored one, not against it
    effects = effects_by_item(product["env"]["CHAOS_LEDGER"], "gw_slow_write")
    assert [effects.get(item) for item in items] == [1, 1]


def test_a_call_whose_commit_never_reached_the_database_runs_once_when_sent_again(product):
    item = f"commitlost-{uuid.uuid4().hex[:8]}"
    [(answer, sent)] = _calls(product, (("commit_lost", PROPOSAL), write(item, 0.1, 1)))
    assert sent == 2
    assert _succeeded(answer, item)["agentops/attempt"] == 1
    assert effects_by_item(product["env"]["CHAOS_LEDGER"], "gw_slow_write").get(item) == 1


@pytest.mark.parametrize("mode", ["ack_lost", "commit_lost"])
def test_a_call_answered_still_running_whose_hold_was_lost_runs_once_when_sent_again(product, mode):
    """A write longer than the call wait (2 s here) is answered "still running" and held, so the same call
    picks up its outcome. The hold's write is cut: the client is told the database is unavailable, and
    sends the same call again. Were the hold lost (commit_lost) and not recorded before that call, the call
    would be proposed again once the first had run, and written twice."""
    item = f"hold-{mode}-{uuid.uuid4().hex[:8]}"
    [(answer, sends)] = _calls(product, ((mode, HOLD), write(item, 5, 1)))
    assert sends >= 2
    assert _succeeded(answer, item)["agentops/attempt"] == 1
    assert effects_by_item(product["env"]["CHAOS_LEDGER"], "gw_slow_write").get(item) == 1


@pytest.mark.parametrize("mode", ["ack_lost", "commit_lost"])
def test_a_write_whose_outcome_the_worker_could_not_record_is_never_sent_twice(product, mode):
    """The worker's record of a write's outcome is cut. Stored all the same (ack_lost): the call gets that
    outcome. Not stored (commit_lost): its intent, committed before the write was sent, says it may have
    landed, and a non-idempotent write is never sent again: the run stops outcome_unknown."""
    item = f"outcome-{mode}-{uuid.uuid4().hex[:8]}"
    [(answer, _sends)] = _calls(product, ((mode, OUTCOME), write(item, 0.1, 1)))
    if mode == "ack_lost":
        assert _succeeded(answer, item)["agentops/attempt"] == 1
    else:
        result = answer["result"]
        assert result["isError"] and result["_meta"]["agentops/stop_reason"] == "terminal_failure:outcome_unknown"
        assert result["structuredContent"]["error"]["retryable"] is False
    assert effects_by_item(product["env"]["CHAOS_LEDGER"], "gw_slow_write").get(item) == 1


@pytest.mark.parametrize("mode", ["ack_lost", "commit_lost"])
def test_a_write_whose_intent_the_worker_could_not_record_is_sent_once(product, mode):
    """The worker's write-ahead intent, committed before a write is sent, is cut: the worker is told the
    database failed, so it never sends the write. Not stored (commit_lost): nothing is in flight, and the
    call is made afresh. Stored all the same (ack_lost): the worker, which knows it sent nothing, clears its
    intent once the database answers again; otherwise whoever took the run over would find a write "in
    flight", and stop the run outcome_unknown for a write that never happened."""
    item = f"intent-{mode}-{uuid.uuid4().hex[:8]}"
    [(answer, _sends)] = _calls(product, ((mode, INTENT), write(item, 0.1, 1)))
    assert _succeeded(answer, item)["agentops/attempt"] == 1
    assert effects_by_item(product["env"]["CHAOS_LEDGER"], "gw_slow_write").get(item) == 1
