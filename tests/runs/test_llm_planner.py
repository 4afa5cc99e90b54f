"""The LLM planner against a real chat-completions server on loopback, with canned answers."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from runs.planners import validate_planner_config
from runs.planners.llm import LLMConfig, LLMPlanner
from runtime.controller import Controller
from runtime.events import PlanProposed
from runtime.planning import PlanningRequest
from runtime.sim.scenario import prepare_scenario
from runtime.stop import RunStatus

SEARCH = {"name": "search", "timeout_s": 2, "retry": {"max_attempts": 1},
          "schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
          "responses": [{"return": {"documents": [{"id": "POL-7"}]}}]}
TICKET = {"name": "ticket", "side_effect": "write", "permission": "tickets.create",
          "responses": [{"return": {"ticket": "T-1"}}]}
FOUND = {"capability": "search", "path": "documents.0.id", "equals": "POL-7"}
GOOD_PLAN = {"steps": [{"id": "s1", "capability": "search", "arguments": {"q": "travel"},
                        "expected_outcome": "the travel policy", "depends_on": []}],
             "reason": "search first"}
USAGE = {"prompt_tokens": 700, "completion_tokens": 300, "total_tokens": 1000}


def completion(content, usage=USAGE):
    if not isinstance(content, str):
        content = json.dumps(content)
    return {"status": 200, "body": {"id": "c1", "object": "chat.completion", "model": "m",
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                 "finish_reason": "stop"}], "usage": usage}}


class FakeLLM:
    """A chat-completions server: answers the queued responses in order, records each request."""

    def __init__(self):
        self.responses = []
        self.requests = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append({"path": urlsplit(self.path).path, "query": parse_qs(urlsplit(self.path).query),
                                      "headers": {k.lower(): v for k, v in self.headers.items()}, "json": body})
                answer = fake.responses.pop(0) if fake.responses else completion(GOOD_PLAN)
                if answer.get("sleep"):
                    time.sleep(answer["sleep"])
                payload = answer["body"] if isinstance(answer["body"], str) else json.dumps(answer["body"])
                try:
                    self.send_response(answer["status"])
                    for name, value in (answer.get("headers") or {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload.encode())))
                    self.end_headers()
                    self.wfile.write(payload.encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass   # the client timed out and left

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def user_message(self, index):
        return self.requests[index]["json"]["messages"][1]["content"]


@pytest.fixture
def llm():
    server = FakeLLM()
    yield server
    server.close()


class Sleeps:
    def __init__(self):
        self.calls = []

    def __call__(self, seconds):
        self.calls.append(seconds)


def planner_for_server(server, sleep=None, **config):
    settings = {"base_url": server.base_url, "model": "test-model", "temperature": 0.2, "max_tokens": 512,
                "price_per_1k_prompt_tokens": 0.01, "price_per_1k_completion_tokens": 0.03, "timeout_s": 5,
                "max_retries": 2, **config}
    return LLMPlanner(LLMConfig.from_planner_config(settings, api_key=config.pop("api_key", "sk-test")),
                      sleep=sleep or Sleeps())


def rig_with(planner, capabilities=(SEARCH,), permissions=None, **budgets):
    rig = prepare_scenario({"name": "llm", "goal": "Find the travel policy", "completion": FOUND,
                            "capabilities": list(capabilities), "owner_permissions": permissions,
                            "budgets": {"deadline_s": 60, **budgets}, "planner": {"plans": [[]]}})
    c = rig.controller
    rig.controller = Controller(c.registry, c.executor, planner, c.clock, c.authorizer, c.approvals, rng=c.rng)
    return rig


def run(rig):
    events = []
    state = rig.controller.run_until_pause(rig.state, on_transition=lambda t: events.extend(t.events))
    return state, [e for e in events if isinstance(e, PlanProposed)]


def request(revision=1, remaining_s=60.0):
    return PlanningRequest(run_id="r1", goal="g", completion=None, capabilities=(), history=(), previous_plan=(),
                           revision=revision, remaining_s=remaining_s)


class TestPlanningThroughTheController:
    def test_it_runs_a_good_plan_and_counts_the_real_usage(self, llm):
        llm.responses = [completion(GOOD_PLAN)]
        state, plans = run(rig_with(planner_for_server(llm)))
        assert state.status is RunStatus.COMPLETED
        assert plans[0].accepted and plans[0].steps[0]["arguments"] == {"q": "travel"}
        assert plans[0].tokens == 1000 and plans[0].cost == pytest.approx(0.7 * 0.01 + 0.3 * 0.03)
        assert state.usage.tokens == 1000 and state.usage.cost == pytest.approx(0.016)
        assert json.loads(plans[0].planner_output) == GOOD_PLAN
        assert plans[0].capabilities_seen == ("search",)

    def test_it_sends_the_configured_request(self, llm):
        llm.responses = [completion(GOOD_PLAN)]
        run(rig_with(planner_for_server(llm, api_key="sk-secret", extra_headers={"X-Team": "ops"})))
        sent = llm.requests[0]
        assert sent["path"] == "/v1/chat/completions"
        assert sent["headers"]["authorization"] == "Bearer sk-secret" and sent["headers"]["x-team"] == "ops"
        body = sent["json"]
        assert (body["model"], body["temperature"], body["max_tokens"]) == ("test-model", 0.2, 512)
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["name"] == "plan"
        assert "steps" in body["response_format"]["json_schema"]["schema"]["properties"]
        assert body["messages"][0]["role"] == "system" and "ONLY one JSON object" in body["messages"][0]["content"]
        user = llm.user_message(0)
        assert "Find the travel policy" in user and '"equals": "POL-7"' in user and "first plan" in user

    def test_a_rejected_plan_is_fed_back_with_its_validation_errors(self, llm):
        unknown = {"steps": [{"id": "s1", "capability": "search_the_web", "arguments": {"q": "travel"},
                              "expected_outcome": "x"}]}
        llm.responses = [completion(unknown), completion(GOOD_PLAN)]
        state, plans = run(rig_with(planner_for_server(llm)))
        assert [p.accepted for p in plans] == [False, True] and state.status is RunStatus.COMPLETED
        assert plans[0].validation_errors[0].code == "unknown_capability"
        second = llm.user_message(1)
        assert "rejected" in second and "unknown_capability" in second and "search_the_web" in second
        assert "Replan reason: plan_rejected" in second
        assert state.usage.tokens == 2000

    def test_an_answer_that_is_not_json_is_rejected_clearly_and_its_tokens_count(self, llm):
        llm.responses = [completion("Sure! First I would search for the policy."), completion("```json\n{oops\n```")]
        state, plans = run(rig_with(planner_for_server(llm)))
        assert state.stop_reason == "plan_rejected" and "not valid JSON" in state.stop_detail
        assert [p.accepted for p in plans] == [False, False]
        assert plans[0].validation_errors[0].code == "malformed_plan"
        assert plans[0].planner_output == "Sure! First I would search for the policy."
        assert plans[0].steps == () and state.usage.tokens == 2000 and state.usage.tool_calls == 0

    def test_a_json_answer_of_the_wrong_shape_is_rejected(self, llm):
        llm.responses = [completion({"plan": "search"}), completion(GOOD_PLAN)]
        state, plans = run(rig_with(planner_for_server(llm)))
        assert "'steps' list" in plans[0].validation_errors[0].message
        assert state.status is RunStatus.COMPLETED

    def test_no_further_plan_stops_the_run_stalled(self, llm):
        llm.responses = [completion({"no_further_plan": True, "reason": "nothing fits"})]
        state, plans = run(rig_with(planner_for_server(llm)))
        assert state.stop_reason == "stalled" and plans == [] and state.usage.tokens == 1000


@pytest.mark.django_db(transaction=True)
class TestThroughTheEngine:
    """run_start + run_advance with the bundled capabilities: what a worker does."""

    @pytest.fixture
    def demo_capabilities(self, db, manual_advance):
        from capabilities.kinds.python.sync import python_capabilities_sync

        python_capabilities_sync()

    @pytest.fixture
    def starter(self, roles):
        from django.contrib.auth.models import Permission, User

        user = User.objects.create_user("sam", password="pw-sam")
        user.user_permissions.add(Permission.objects.get(codename="start_run", content_type__app_label="runs"))
        return user

    @pytest.fixture(autouse=True)
    def endpoint(self, settings, llm):
        settings.AGENTOPS_LLM_ENDPOINTS = {"fake": {"base_url": llm.base_url, "api_key_env": "TEST_LLM_API_KEY"}}

    def start(self, owner, llm, **config):
        from runs import services

        return services.run_start(
            owner=owner, goal="Find the travel policy", planner="llm",
            planner_config={"endpoint": "fake", "model": "test-model",
                            "price_per_1k_prompt_tokens": 0.01, "price_per_1k_completion_tokens": 0.03, **config},
            completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
            budgets={"deadline_s": 60})

    def test_a_run_completes_and_its_revision_records_what_the_model_said(self, llm, demo_capabilities, starter,
                                                                          monkeypatch):
        from runs.models import PlanRevision
        from runs.worker import engine

        monkeypatch.setenv("TEST_LLM_API_KEY", "sk-from-env")
        plan = {"steps": [{"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"},
                           "expected_outcome": "a policy", "depends_on": []}]}
        llm.responses = [completion(plan)]
        run = self.start(starter, llm)
        assert engine.run_advance(run_id=run.pk, worker="test-worker") is None
        run.refresh_from_db()
        assert run.status == "completed" and run.tokens == 1000 and run.cost == pytest.approx(0.016)
        revision = PlanRevision.objects.get(run=run)
        assert revision.accepted and revision.tokens == 1000 and json.loads(revision.planner_output) == plan
        assert llm.requests[0]["headers"]["authorization"] == "Bearer sk-from-env"
        # The owner may not create tickets or send notifications: the model is not told about them.
        assert "create_ticket" not in revision.capabilities_seen and "search_documents" in revision.capabilities_seen
        user = llm.user_message(0)
        assert '"name": "search_documents"' in user and "create_ticket" not in user and "send_notification" not in user

    def test_an_operator_sees_the_side_effecting_capabilities_too(self, llm, demo_capabilities, operator,
                                                                   monkeypatch):
        from runs.worker import engine

        monkeypatch.setenv("TEST_LLM_API_KEY", "sk-from-env")
        llm.responses = [completion({"no_further_plan": True})]
        run = self.start(operator, llm)
        engine.run_advance(run_id=run.pk, worker="test-worker")
        run.refresh_from_db()
        assert run.stop_reason == "stalled" and run.tokens == 1000
        assert '"name": "create_ticket"' in llm.user_message(0)

    def test_the_projects_token_quota_stops_the_run_at_its_next_planner_call(self, llm, demo_capabilities, operator,
                                                                             monkeypatch):
        """A quota reached mid-run: the first plan (1,000 tokens) finds nothing, and the replan it needs
        would spend past the project's 1,000 tokens a day."""
        from core.models import Project
        from runs.models import Run
        from runs.worker import engine

        monkeypatch.setenv("TEST_LLM_API_KEY", "sk-from-env")
        Project.objects.filter(slug="default").update(quota_tokens_per_day=1000)
        nothing = {"steps": [{"id": "s1", "capability": "search_documents", "arguments": {"q": "zzzz qqqq"},
                              "expected_outcome": "a policy", "depends_on": []}]}
        llm.responses = [completion(nothing), completion(GOOD_PLAN)]
        run = self.start(operator, llm)
        engine.run_advance(run_id=run.pk, worker="test-worker")
        run = Run.objects.get(pk=run.pk)
        assert run.stop_reason == "quota_exhausted:tokens_per_day" and run.status == "stopped"
        assert run.tool_calls == 1 and run.tokens == 1000 and len(llm.requests) == 1
        assert "quota of 1000 tokens a day" in run.stop_detail

    def test_the_start_api_refuses_a_bad_config(self, api_for, operator):
        response = api_for(operator).post("/api/runs/start/", {
            "goal": "g", "completion": {"capability": "search_documents", "path": "documents", "not_empty": True},
            "planner": "llm", "planner_config": {"base_url": "file:///etc/passwd", "model": ""}}, format="json")
        assert response.status_code == 400
        fields = response.json()["error"]["fields"]
        # A run cannot give a URL: only a configured endpoint's name.
        assert {"planner_config", "planner_config.endpoint", "planner_config.model"} <= set(fields)


class TestRetries:
    def test_it_honours_retry_after_on_429_then_succeeds(self, llm):
        sleeps = Sleeps()
        llm.responses = [{"status": 429, "body": {"error": {"message": "slow down"}}, "headers": {"Retry-After": "3"}},
                         completion(GOOD_PLAN)]
        proposal = planner_for_server(llm, sleep=sleeps).propose(request())
        assert proposal.plan == {"steps": GOOD_PLAN["steps"]} and not proposal.errors
        assert sleeps.calls == [3.0] and len(llm.requests) == 2

    def test_it_retries_5xx_with_capped_jittered_backoff(self, llm):
        sleeps = Sleeps()
        llm.responses = [{"status": 503, "body": "busy"}, {"status": 502, "body": "busy"}, completion(GOOD_PLAN)]
        proposal = planner_for_server(llm, sleep=sleeps).propose(request())
        assert not proposal.errors and len(sleeps.calls) == 2
        assert 0.5 <= sleeps.calls[0] <= 1.0 and 1.0 <= sleeps.calls[1] <= 2.0

    def test_it_retries_a_timeout_then_succeeds(self, llm):
        llm.responses = [{"status": 200, "body": completion(GOOD_PLAN)["body"], "sleep": 1.0}, completion(GOOD_PLAN)]
        started = time.monotonic()
        proposal = planner_for_server(llm, timeout_s=0.3).propose(request())
        assert not proposal.errors and proposal.tokens == 1000
        assert len(llm.requests) == 2 and time.monotonic() - started < 1.0

    def test_spent_retries_become_a_rejected_revision_saying_the_endpoint_is_unavailable(self, llm):
        slow = {"status": 200, "body": completion(GOOD_PLAN)["body"], "sleep": 0.6}
        llm.responses = [slow, slow, slow]
        proposal = planner_for_server(llm, timeout_s=0.2, max_retries=2).propose(request())
        assert len(llm.requests) == 3 and proposal.tokens == 0
        assert proposal.errors[0].code == "planner_unavailable"
        assert proposal.errors[0].message.startswith("planner endpoint unavailable: timed out")
        assert "after 3 attempts" in proposal.errors[0].message

    def test_an_unavailable_endpoint_twice_stops_the_run_plan_rejected_with_the_reason(self, llm):
        llm.responses = [{"status": 500, "body": "down"}] * 2
        state, plans = run(rig_with(planner_for_server(llm, max_retries=0)))
        assert state.stop_reason == "plan_rejected"
        assert "planner endpoint unavailable: HTTP 500" in state.stop_detail
        assert "planner endpoint unavailable" in plans[0].reason

    def test_it_never_retries_past_the_deadline(self, llm):
        sleeps = Sleeps()
        llm.responses = [{"status": 429, "body": "later", "headers": {"Retry-After": "30"}}]
        proposal = planner_for_server(llm, sleep=sleeps).propose(request(remaining_s=10))
        assert sleeps.calls == [] and len(llm.requests) == 1
        assert "would pass the run's deadline" in proposal.errors[0].message

    def test_the_call_timeout_shrinks_to_the_time_left(self, llm):
        llm.responses = [{"status": 200, "body": completion(GOOD_PLAN)["body"], "sleep": 1.0}]
        started = time.monotonic()
        proposal = planner_for_server(llm, timeout_s=30, max_retries=0).propose(request(remaining_s=0.3))
        assert time.monotonic() - started < 0.9 and proposal.errors[0].code == "planner_unavailable"

    def test_a_client_error_is_not_retried(self, llm):
        llm.responses = [{"status": 401, "body": {"error": {"message": "bad key"}}}]
        proposal = planner_for_server(llm).propose(request())
        assert len(llm.requests) == 1 and "HTTP 401" in proposal.errors[0].message

    def test_it_falls_back_to_json_object_when_the_server_rejects_json_schema(self, llm):
        llm.responses = [{"status": 400, "body": {"error": {"message": "response_format json_schema unsupported"}}},
                         completion(GOOD_PLAN)]
        proposal = planner_for_server(llm).propose(request())
        assert not proposal.errors
        assert [r["json"]["response_format"]["type"] for r in llm.requests] == ["json_schema", "json_object"]

    def test_a_missing_key_variable_is_reported_without_calling(self, llm):
        planner = LLMPlanner(LLMConfig.from_planner_config(
            {"base_url": llm.base_url, "model": "m", "api_key_env": "NOT_SET_API_KEY"}, api_key=""))
        proposal = planner.propose(request())
        assert llm.requests == [] and "NOT_SET_API_KEY is not set" in proposal.errors[0].message


class TestAzure:
    def test_it_sends_the_api_key_header_and_api_version(self, llm):
        llm.responses = [completion(GOOD_PLAN)]
        planner_for_server(llm, api_key="az-key", azure_api_version="2024-10-21").propose(request())
        sent = llm.requests[0]
        assert sent["headers"]["api-key"] == "az-key" and "authorization" not in sent["headers"]
        assert sent["query"] == {"api-version": ["2024-10-21"]}


GOOD_CONFIG = {"endpoint": "openai", "model": "gpt-4o-mini", "temperature": 0.2, "max_tokens": 1000,
               "price_per_1k_prompt_tokens": 0.00015, "price_per_1k_completion_tokens": 0.0006, "timeout_s": 30,
               "max_retries": 2}


class TestConfigValidation:
    @pytest.fixture(autouse=True)
    def endpoints(self, settings):
        settings.AGENTOPS_LLM_ENDPOINTS = {"openai": {"base_url": "https://api.openai.com/v1",
                                                      "api_key_env": "OPENAI_API_KEY"}}

    def test_a_complete_config_is_fine(self):
        assert validate_planner_config("llm", GOOD_CONFIG) == {}
        assert validate_planner_config("llm", {"endpoint": "openai", "model": "llama3"}) == {}

    @pytest.mark.parametrize("change, field", [
        ({"endpoint": "elsewhere"}, "endpoint"),
        ({"endpoint": None}, "endpoint"),
        ({"model": " "}, "model"),
        ({"temperature": 3}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_retries": 11}, "max_retries"),
        ({"price_per_1k_prompt_tokens": -1}, "price_per_1k_prompt_tokens"),
        ({"temperature": True}, "temperature"),
    ])
    def test_it_names_the_wrong_field(self, change, field):
        errors = validate_planner_config("llm", {**GOOD_CONFIG, **change})
        assert list(errors) == [f"planner_config.{field}"]

    @pytest.mark.parametrize("key", ["api_key", "base_url", "api_key_env", "extra_headers", "azure_api_version"])
    def test_urls_keys_and_headers_are_the_servers_not_the_runs(self, key):
        assert "planner_config" in validate_planner_config("llm", {**GOOD_CONFIG, key: "x"})

    def test_without_configured_endpoints_the_error_says_how_to_configure_them(self, settings):
        settings.AGENTOPS_LLM_ENDPOINTS = {}
        message = validate_planner_config("llm", GOOD_CONFIG)["planner_config.endpoint"]
        assert "AGENTOPS_LLM_ENDPOINTS" in message and "base_url" in message
