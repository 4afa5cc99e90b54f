"""OpenTelemetry GenAI export: runs through a real worker, read back from a real OTLP receiver."""
import socket
import threading
import time

import pytest

from runs import otel, services
from runs.models import Attempt, PlanRevision, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def registry(db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def _finished(run_id):
    return Run.objects.filter(pk=run_id, finished_at__isnull=False).first()


def _trace(receiver, run, wait_until, *names):
    """The spans of the run's trace, once the run's own span and every span named have arrived: a run
    advanced in several passes is exported by as many worker processes, each batching on its own
    schedule, so the run's span (ended last) may still arrive before a step's."""
    wanted = {"invoke_agent", *names}
    return wait_until(lambda: (lambda spans: spans if wanted <= {s["name"] for s in spans} else None)(
        receiver.spans(run.trace_id)), timeout=30, message=f"the spans {sorted(wanted)} at the receiver")


def _start(operator, plans, completion):
    return services.run_start(owner=operator, goal="Find the travel policy", planner="scripted",
                              planner_config={"plans": plans}, completion=completion,
                              budgets={"deadline_s": 120})


class TestExportThroughAWorker:
    def test_a_completed_run_is_one_trace_with_the_ids_the_callees_saw(self, otlp_receiver, celery_worker, registry,
                                                                        operator, wait_until):
        run = _start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}},
                                 {"capability": "get_document", "arguments": {"id": "POL-7"}}]],
                     {"capability": "get_document", "path": "id", "equals": "POL-7"})
        run = wait_until(lambda: _finished(run.pk), message="the run to finish")
        assert run.stop_reason == "completed"
        spans = _trace(otlp_receiver, run, wait_until, "plan scripted", "execute_tool search_documents",
                       "execute_tool get_document")
        by_name = {}
        for span in spans:
            by_name.setdefault(span["name"], []).append(span)
        root = by_name["invoke_agent"][0]
        assert root["trace_id"] == run.trace_id and root["parent_span_id"] == ""
        assert root["span_id"] == otel.run_span_id(run.trace_id)
        assert root["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert root["attributes"]["agentops.stop_reason"] == "completed"
        assert root["attributes"]["agentops.usage.tool_calls"] == 2
        assert "error.type" not in root["attributes"]
        assert [e["name"] for e in root["events"]][-1] == "run_stopped"
        assert root["resource"]["service.name"] == "agentops"

        plan = by_name["plan scripted"][0]
        assert plan["parent_span_id"] == root["span_id"]
        assert plan["attributes"]["agentops.plan.reason_code"] == "initial"
        assert plan["attributes"]["agentops.plan.revision"] == 1
        assert {"agentops.usage.tokens", "agentops.usage.cost", "gen_ai.request.model"} <= set(plan["attributes"])
        assert PlanRevision.objects.filter(run=run).count() == 1

        tools = by_name["execute_tool search_documents"] + by_name["execute_tool get_document"]
        attempts = {a.span_id: a for a in Attempt.objects.filter(run=run)}
        # The span ids are the ones each callee was given as the parent in its traceparent.
        assert {t["span_id"] for t in tools} == set(attempts)
        for tool in tools:
            attempt = attempts[tool["span_id"]]
            attributes = tool["attributes"]
            assert tool["trace_id"] == run.trace_id == attempt.trace_id
            assert tool["parent_span_id"] == root["span_id"]
            assert attributes["gen_ai.operation.name"] == "execute_tool"
            assert attributes["gen_ai.tool.name"] == attempt.capability_name
            assert attributes["gen_ai.tool.call.id"] == attempt.uid
            assert attributes["agentops.decision"] == attempt.decision.decision
            # The span of the attempt that stopped the run also carries the stop (issue 35).
            assert [e["name"] for e in tool["events"]] in (["decision"], ["decision", "run_stopped"])
            # Arguments and results only when opted in.
            assert "gen_ai.tool.call.arguments" not in attributes and "gen_ai.tool.call.result" not in attributes

    def test_a_failed_attempt_carries_its_error_type_and_the_run_its_stop_reason(
            self, otlp_receiver, celery_worker, registry, operator, wait_until):
        run = _start(operator, [[{"capability": "get_document", "arguments": {"id": "NOPE-1"}}]],
                     {"capability": "get_document", "path": "id", "equals": "POL-7"})
        run = wait_until(lambda: _finished(run.pk), message="the run to finish")
        assert run.stop_reason == "terminal_failure:not_found"
        spans = _trace(otlp_receiver, run, wait_until, "execute_tool get_document")
        tool = next(s for s in spans if s["name"] == "execute_tool get_document")
        assert tool["attributes"]["error.type"] == "not_found"
        assert tool["status_code"] == 2  # STATUS_CODE_ERROR
        root = next(s for s in spans if s["name"] == "invoke_agent")
        assert root["attributes"]["error.type"] == "terminal_failure:not_found"
        assert root["events"][-1]["attributes"]["agentops.stop_reason"] == "terminal_failure:not_found"


class TestExportInProcess:
    @pytest.fixture
    def otel_env(self, monkeypatch):
        def configure(endpoint, **extra):
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
            for key, value in extra.items():
                monkeypatch.setenv(key, value)
            otel._state.update(pid=None, tracer=None, provider=None)

        yield configure
        if otel._state["provider"] is not None:
            otel._state["provider"].shutdown()
        otel._state.update(pid=None, tracer=None, provider=None)

    def _run(self, operator):
        from runs.worker import engine

        run = _start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                     {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        engine.run_advance(run_id=run.pk, worker="test")
        run.refresh_from_db()
        return run

    def test_arguments_and_results_are_exported_when_opted_in(self, otlp_receiver, otel_env, registry, operator,
                                                              manual_advance, wait_until):
        otel_env(otlp_receiver.url, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
        run = self._run(operator)
        assert run.stop_reason == "completed"
        otel.flush()
        spans = _trace(otlp_receiver, run, wait_until)
        tool = next(s for s in spans if s["name"] == "execute_tool search_documents")
        assert '"q": "travel"' in tool["attributes"]["gen_ai.tool.call.arguments"]
        assert "documents" in tool["attributes"]["gen_ai.tool.call.result"]

    def test_spans_carry_their_kind_the_stopping_span_is_marked_and_the_project_is_configurable(
            self, otlp_receiver, otel_env, registry, operator, manual_advance, wait_until, settings):
        from runs.worker import engine

        settings.AGENTOPS_OTEL_PROJECT = "payments-agents"
        otel_env(otlp_receiver.url, OTEL_SERVICE_NAME="agentops-eu")
        run = _start(operator, [[{"capability": "get_document", "arguments": {"id": "NOPE-2"}}]],
                     {"capability": "get_document", "path": "id", "equals": "POL-7"})
        engine.run_advance(run_id=run.pk, worker="test")
        otel.flush()
        spans = {s["name"]: s for s in _trace(otlp_receiver, run, wait_until)}
        kinds = {name: (s["kind"], s["attributes"]["openinference.span.kind"]) for name, s in spans.items()}
        internal = 1  # SPAN_KIND_INTERNAL
        assert kinds == {"invoke_agent": (internal, "AGENT"), "plan scripted": (internal, "CHAIN"),
                         "execute_tool get_document": (internal, "TOOL")}
        tool = spans["execute_tool get_document"]
        assert tool["attributes"]["agentops.stop_trigger"] is True
        assert tool["events"][-1]["name"] == "run_stopped"
        assert "agentops.stop_trigger" not in spans["plan scripted"]["attributes"]
        assert tool["resource"]["service.name"] == "agentops-eu"
        assert tool["resource"]["openinference.project.name"] == "payments-agents"

    def test_a_collector_that_never_answers_neither_slows_nor_fails_a_run(self, otel_env, registry, operator,
                                                                         manual_advance):
        # A socket that accepts connections and never answers: the worst collector.
        blackhole = socket.socket()
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(16)
        try:
            otel_env(f"http://127.0.0.1:{blackhole.getsockname()[1]}", OTEL_EXPORTER_OTLP_TIMEOUT="30")
            started = time.monotonic()
            runs = [self._run(operator) for _ in range(3)]
            elapsed = time.monotonic() - started
        finally:
            blackhole.close()
        assert [r.stop_reason for r in runs] == ["completed"] * 3
        # An export on the run's path would wait out the 30 s timeout at least once.
        assert elapsed < 10, elapsed
        # The exporter retries the blackhole until that timeout: let it, without the test waiting.
        provider = otel._state["provider"]
        otel._state.update(pid=None, tracer=None, provider=None)
        if provider is not None:
            threading.Thread(target=provider.shutdown, daemon=True).start()


class TestFrameworkInstrumentation:
    """Optional request and task spans (the otel-instrumentation extra), on the same variables."""

    def test_the_worker_exports_its_task_spans(self, otlp_receiver, celery_worker, registry, operator, wait_until):
        run = _start(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}}]],
                     {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        wait_until(lambda: _finished(run.pk), message="the run to finish")
        task = wait_until(lambda: next((s for s in otlp_receiver.spans() if s["name"] == "run/runs.advance_run"
                                        and s["attributes"].get("celery.task_name") == "runs.advance_run"), None),
                          timeout=30, message="the worker's task span")
        assert task["trace_id"] != run.trace_id  # the run's own trace stays its own

    def test_a_web_request_exports_its_span(self, otlp_receiver, worker_env, wait_until):
        import subprocess
        import sys

        from django.conf import settings

        code = ("import django; django.setup()\n"
                "from django.test import Client\n"
                "assert Client().get('/healthz').status_code in (200, 503)\n"
                "from opentelemetry import trace; trace.get_tracer_provider().force_flush()\n")
        done = subprocess.run([sys.executable, "-c", code], cwd=settings.BASE_DIR, capture_output=True, text=True,
                              env={**worker_env, "DJANGO_SETTINGS_MODULE": "agentops.settings",
                                   "ALLOWED_HOSTS": "testserver"}, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        wait_until(lambda: any(s["attributes"].get("http.route") == "healthz" or s["name"].endswith("healthz")
                               for s in otlp_receiver.spans()), timeout=20, message="the request span")
