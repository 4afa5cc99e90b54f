"""Planning mode with each planner: scripted plans, the rules planner, an LLM endpoint."""
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command

from core.errors import InvalidInput
from evaluation.services import evaluation_create, evaluation_run_now, evaluation_suites_sync
from runs.models import Attempt, PlanRevision

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_suite(db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()  # one task runs against the registered demo capabilities
    return next(s for s in evaluation_suites_sync() if s.name == "demo-capabilities")


def results_by_task(evaluation, mode):
    return {r.task: r for r in evaluation.results.filter(mode=mode)}


class TestRulesPlanner:
    def test_the_demo_suite_gets_the_verdicts_it_expects(self, demo_suite, operator):
        evaluation = evaluation_run_now(user=operator, suite_id=demo_suite.pk)
        assert evaluation.status == "completed" and evaluation.planning_mode == "rules"
        found = {task: r.details["verdict"]["code"] for task, r in results_by_task(evaluation, "planning").items()}
        expected = {t["name"]: t["verdict_expected"] for t in demo_suite.tasks if "verdict_expected" in t}
        assert {task: found[task] for task in expected} == expected

    def test_the_rules_planner_broadens_an_empty_search_and_the_trace_shows_it(self, demo_suite, operator):
        evaluation = evaluation_run_now(user=operator, suite_id=demo_suite.pk)
        result = results_by_task(evaluation, "planning")["holiday-rules-need-a-broader-query"]
        assert result.verified_success and result.run.planner == "rules"
        revisions = PlanRevision.objects.filter(run=result.run).order_by("number")
        assert [r.reason_code for r in revisions] == ["initial", "result_not_found"]
        queries = [a.step.arguments["q"] for a in Attempt.objects.filter(run=result.run).select_related("step")]
        assert queries == ["holiday", "leave"]


class TestPlannerChoice:
    def test_scripted_planning_needs_every_task_to_carry_plans(self, demo_suite, operator):
        with pytest.raises(InvalidInput, match="needs planner.plans"):
            evaluation_create(user=operator, suite_id=demo_suite.pk, planning_mode="scripted")

    def test_an_llm_planner_needs_a_valid_configuration(self, demo_suite, operator):
        with pytest.raises(InvalidInput, match="llm planner"):
            evaluation_create(user=operator, suite_id=demo_suite.pk, planning_mode="llm",
                              planner_config={"base_url": "ftp://nowhere", "model": ""})

    def test_the_api_starts_an_evaluation_with_a_chosen_planner(self, demo_suite, operator, api_for,
                                                                django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks():
            response = api_for(operator).post("/api/evaluations/", {"suite": "demo-capabilities",
                                                                    "planning_mode": "rules"}, format="json")
        assert response.status_code == 202
        detail = api_for(operator).get(f"/api/evaluations/{response.json()['id']}/").json()
        assert detail["planning_mode"] == "rules"


class _ChatCompletions(BaseHTTPRequestHandler):
    """A loopback OpenAI-compatible endpoint: always proposes one search for the travel policy."""

    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        plan = {"steps": [{"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"},
                           "expected_outcome": "the travel policy"}]}
        answer = {"id": "c1", "object": "chat.completion", "model": body.get("model"),
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": json.dumps(plan)}}],
                  "usage": {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def llm_endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatCompletions)
    _ChatCompletions.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_an_llm_planner_is_measured_against_the_direct_call(demo_suite, operator, llm_endpoint, settings):
    settings.AGENTOPS_LLM_ENDPOINTS = {"local": {"base_url": llm_endpoint}}
    evaluation = evaluation_run_now(user=operator, suite_id=demo_suite.pk, planning_mode="llm", planner_config={
        "endpoint": "local", "model": "planner-model", "price_per_1k_prompt_tokens": 0.5,
        "price_per_1k_completion_tokens": 1.5})
    assert evaluation.status == "completed" and evaluation.planning_mode == "llm"
    lookup = results_by_task(evaluation, "planning")["find-travel-policy"]
    assert lookup.verified_success and lookup.tokens == 340 and lookup.cost > 0
    assert lookup.run.planner == "llm" and lookup.run.planner_config["model"] == "planner-model"
    # The model saw the task's registered (simulated) capabilities and nothing else.
    sent = json.dumps(_ChatCompletions.requests[0])
    assert "search_documents" in sent and "ticket_create" not in sent


class TestRegisteredCapabilities:
    def test_a_task_can_run_against_the_real_registry(self, demo_suite, operator):
        evaluation = evaluation_run_now(user=operator, suite_id=demo_suite.pk)
        for mode in ("direct", "planning"):
            result = results_by_task(evaluation, mode)["registered-travel-lookup"]
            assert result.verified_success, (mode, result.stop_reason)
            attempt = Attempt.objects.get(run=result.run)
            # The real executor answered from the bundled corpus, against a real capability version.
            assert attempt.output["documents"][0]["id"] == "POL-7" and attempt.capability_version is not None

    def test_it_refuses_a_suite_whose_registered_capability_is_disabled(self, demo_suite, operator):
        from capabilities.models import Capability

        Capability.objects.filter(name="search_documents").update(enabled=False)
        with pytest.raises(InvalidInput, match="'search_documents' is not registered and enabled"):
            evaluation_create(user=operator, suite_id=demo_suite.pk)

    def test_the_scenario_command_explains_it_cannot_simulate_the_registry(self, tmp_path):
        task = next(t for t in demo_suite_tasks() if t["capabilities"] == "registered")
        path = tmp_path / "registered.json"
        path.write_text(json.dumps({k: v for k, v in task.items()
                                    if k not in ("category", "description", "verdict_expected")}))
        out = io.StringIO()
        with pytest.raises(SystemExit) as exit:
            call_command("run_scenario", "--mode", "direct", str(path), stdout=out)
        assert exit.value.code == 1 and "evaluation runner" in out.getvalue()


def demo_suite_tasks():
    from evaluation.suites import SUITES_DIR

    return json.loads((SUITES_DIR / "demo-capabilities.json").read_text())["tasks"]
