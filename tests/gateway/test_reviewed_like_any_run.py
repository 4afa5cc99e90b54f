"""A gateway session's run is reviewed like any run: found by its agent's label in the list, the
dashboard and the API; its trace shows each tool call; it exports as a scenario; its OTel spans name
the agent and each tool; a notification rule on stopped runs tells of it."""
from __future__ import annotations

import pytest
from test_inprocess import inline_worker, mcp_client, serve  # noqa: F401 - the fixture is used by name

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans(monkeypatch):
    """The OTel spans the runtime emits (an OTLP endpoint is configured, so it exports)."""
    from runs import otel

    emitted = []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(otel, "_emit", lambda **kw: emitted.append(kw["attributes"]))
    return emitted


@pytest.fixture
def session_run(spans, agent_token, inline_worker, wait_until):  # noqa: F811
    """One session: an ok call, a failing call, then the client closes it; returns the run once stopped."""
    from notifications.models import Channel, Rule
    from runs.models import Run

    rule = Rule.objects.create(name="agent runs", event="run_stopped", labels={"agent": "reviewer-bot"})
    rule.channels.add(Channel.objects.create(name="hook", url="json://hooks.example.com/agentops"))
    _, token = agent_token(name="reviewer-bot")

    async def go(http_for):
        async with mcp_client(http_for, token) as client:
            ok = await client.call_tool("gw_echo", {"text": "hello"})
            await client.call_tool("gw_flaky", {"q": "x"})
            return ok.meta["agentops/run_id"]

    run_id = serve(go)
    return wait_until(lambda: Run.objects.filter(pk=run_id, status="stopped").first(), timeout=60,
                      message="the session's run to stop")


def test_its_agent_label_finds_it_in_the_api_the_list_and_the_dashboard(session_run, api_for, client_for, viewer):
    found = api_for(viewer).get("/api/runs/", {"label": "agent=reviewer-bot"}).json()
    assert [run["id"] for run in found["results"]] == [session_run.pk]
    assert found["results"][0]["stop_reason"] == "session_ended"
    page = client_for(viewer).get("/runs/", {"label": "agent=reviewer-bot"}).content.decode()
    assert f'href="/runs/{session_run.pk}/"' in page
    dashboard = client_for(viewer).get("/runs/dashboard/", {"label": "agent=reviewer-bot"})
    assert dashboard.status_code == 200 and "session_ended" in dashboard.content.decode()


def test_its_trace_shows_each_call_and_it_exports_as_a_scenario(session_run, client_for, viewer):
    from runs.trace.scenario_export import run_scenario_export

    trace = client_for(viewer).get(f"/runs/{session_run.pk}/").content.decode()
    assert "gw_echo" in trace and "gw_flaky" in trace and "session_ended" in trace
    scenario = run_scenario_export(run=session_run)
    called = [step["capability"] for plan in scenario["planner"]["plans"] for step in plan["steps"]]
    assert called == ["gw_echo", "gw_flaky"]


def test_its_spans_name_the_agent_and_each_tool(session_run, spans, wait_until):
    run_span = wait_until(lambda: next((a for a in spans if a["gen_ai.operation.name"] == "invoke_agent"), None),
                          message="the run's span")
    assert run_span["gen_ai.agent.name"] == "reviewer-bot" and run_span["agentops.planner"] == "gateway"
    assert run_span["agentops.label.agent"] == "reviewer-bot"
    tools = [a["gen_ai.tool.name"] for a in spans if a["gen_ai.operation.name"] == "execute_tool"]
    assert tools == ["gw_echo", "gw_flaky"]


def test_a_rule_on_stopped_runs_of_its_agent_tells_of_it(session_run):
    from notifications.models import Delivery
    from notifications.outbox import enqueue_events

    enqueue_events(session_run.finished_at)
    assert list(Delivery.objects.values_list("event_key", flat=True)) == [f"run:{session_run.pk}:stopped"]
