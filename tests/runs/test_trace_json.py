"""One shape per trace item: the trace download and the API answer alike, as the OpenAPI schema says."""
from __future__ import annotations

import json

import pytest


def download(client, run) -> dict:
    return json.loads(b"".join(client.get(f"/runs/{run.pk}/trace.json").streaming_content))


@pytest.fixture
def reviewed_run(traced_run, make_approval, make_attempt):
    """The traced run with an expired approval and an attempt whose output is stored by reference."""
    from capabilities.outputs import store_json

    revision = traced_run.plan_revisions.get(number=2)
    step = revision.plan_steps.first()
    make_approval(traced_run, revision=revision, step=step, state="expired", decided_at=traced_run.finished_at)
    stored = store_json({"documents": [{"id": n} for n in range(100)]})
    make_attempt(step, number=2, output={"preview": "[...]", "size_bytes": stored.size_bytes}, output_ref=stored,
                 capability_version=step.capability_version)
    return traced_run


class TestOneShape:
    def test_the_api_answers_the_downloads_attempts(self, client_for, api_for, viewer, reviewed_run):
        trace = download(client_for(viewer), reviewed_run)
        page = api_for(viewer).get(f"/api/runs/{reviewed_run.pk}/attempts/").json()
        assert page["count"] == 4 and page["results"] == trace["attempts"]

    def test_it_pages_the_attempts_as_before(self, api_for, viewer, reviewed_run):
        api = api_for(viewer)
        first = api.get(f"/api/runs/{reviewed_run.pk}/attempts/", {"page_size": 3}).json()
        second = api.get(first["next"]).json()
        assert (first["count"], len(first["results"]), len(second["results"])) == (4, 3, 1)
        assert second["previous"] and second["next"] is None
        assert [a["label"] for a in first["results"] + second["results"]] == ["r1·s1#1", "r1·s1#2", "r2·s1#1",
                                                                             "r2·s1#2"]

    def test_the_api_answers_the_downloads_run_revisions_and_approvals(self, client_for, api_for, viewer,
                                                                       reviewed_run):
        trace = download(client_for(viewer), reviewed_run)
        api = api_for(viewer)
        assert api.get(f"/api/runs/{reviewed_run.pk}/").json() == trace["run"]
        assert api.get(f"/api/runs/{reviewed_run.pk}/revisions/").json() == trace["revisions"]
        approvals = api.get("/api/approvals/", {"state": "expired", "run": reviewed_run.pk}).json()["results"]
        assert approvals == trace["approvals"]

    def test_an_attempt_carries_its_step_version_and_observation(self, client_for, viewer, reviewed_run):
        attempts = download(client_for(viewer), reviewed_run)["attempts"]
        first, stored = attempts[0], attempts[-1]
        assert (first["revision"], first["step"], first["capability"], first["capability_version"]) == (
            1, "s1", "search_documents", None)
        assert (stored["revision"], stored["label"], stored["capability_version"]) == (
            2, "r2·s1#2", reviewed_run.plan_revisions.get(number=2).plan_steps.first().capability_version.number)
        assert first["arguments"] == {"q": "travel"} and first["kind"] == "call"
        assert first["observation"]["status"] == "retryable" and first["observation"]["error_code"] == "timeout"
        assert first["observation"]["output_ref"] is None and first["decision"]["decision"] == "retry"
        ref = stored["observation"]["output_ref"]
        assert set(ref) == {"uri", "sha256", "size_bytes"} and len(ref["sha256"]) == 64
        assert stored["observation"]["output"]["size_bytes"] == ref["size_bytes"]
        whole = client_for(viewer).get(ref["uri"])
        assert whole.status_code == 200 and len(json.loads(whole.content)["documents"]) == 100

    def test_the_run_counts_replans_and_plans(self, client_for, viewer, reviewed_run):
        run = download(client_for(viewer), reviewed_run)["run"]
        assert (run["revisions"], run["plans"]) == (0, 1)  # the factory's counters: one plan, no replan
        assert run["stop_reason"] == "stalled" and run["stop_attempt"] == reviewed_run.stop_attempt.uid


def _resolve(schema: dict, spec: dict) -> dict:
    while "$ref" in schema or "allOf" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema \
            else schema["allOf"][0]
    return schema


def _mismatches(value, schema: dict, spec: dict, path: str) -> list[str]:
    """Where a real answer's keys differ from the documented properties (nested objects and lists too)."""
    schema = _resolve(schema, spec)
    if isinstance(value, list) and "items" in schema:
        return [m for item in value for m in _mismatches(item, schema["items"], spec, path + "[]")]
    if not isinstance(value, dict) or "properties" not in schema:
        return []
    documented, required = set(schema["properties"]), set(schema.get("required", ()))
    problems = [f"{path}: undocumented {sorted(set(value) - documented)}"] if set(value) - documented else []
    if required - set(value):
        problems.append(f"{path}: documented but missing {sorted(required - set(value))}")
    for key in set(value) & documented:
        problems += _mismatches(value[key], schema["properties"][key], spec, f"{path}.{key}")
    return problems


def test_the_openapi_schema_documents_the_real_shapes(api_for, viewer, reviewed_run):
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    spec = json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))
    components = spec["components"]["schemas"]
    api = api_for(viewer)
    answers = {
        "RunOutput": api.get(f"/api/runs/{reviewed_run.pk}/").json(),
        "RevisionOutput": api.get(f"/api/runs/{reviewed_run.pk}/revisions/").json()[0],
        "AttemptOutput": api.get(f"/api/runs/{reviewed_run.pk}/attempts/").json()["results"][-1],
        "ApprovalOutput": api.get("/api/approvals/", {"state": "expired"}).json()["results"][0],
    }
    assert answers["AttemptOutput"]["observation"]["output_ref"] and answers["RunOutput"]["budget_usage"]
    problems = [m for name, value in answers.items() for m in _mismatches(value, components[name], spec, name)]
    assert problems == []


def _as_values(run) -> dict:
    """The whole trace built as Python values and written by the standard library: the shape the
    download had when it was written with json.dumps, item by item."""
    from django.core.serializers.json import DjangoJSONEncoder

    from runs import selectors
    from runs.trace import as_json

    document = {
        "run": as_json.run_dict(run),
        "revisions": [as_json.revision_dict(r) for r in selectors.trace_revisions(run=run)],
        "planner_calls": [as_json.planner_call_dict(c) for c in selectors.trace_planner_calls(run=run)],
        "steps": [as_json.step_dict(s) for s in selectors.trace_steps(run=run)],
        "attempts": as_json.attempt_values(run, selectors.trace_attempt_rows(run=run)),
        "decisions_without_attempt": [
            as_json.decision_dict(decision=d.decision, reason=d.reason, usage=d.usage, created_at=as_json.iso(d.created_at))
            for d in selectors.trace_decisions_without_attempt(run=run)],
        "approvals": [as_json.approval_dict(a) for a in selectors.trace_approvals(run=run)],
    }
    return json.loads(json.dumps(document, cls=DjangoJSONEncoder))


class TestTheStreamedDocument:
    def test_it_parses_to_the_trace_built_as_values(self, client_for, viewer, reviewed_run):
        assert download(client_for(viewer), reviewed_run) == _as_values(reviewed_run)

    def test_values_orjson_declines_are_written_as_before(self, client_for, viewer, reviewed_run):
        # An integer beyond 64 bits in the run's criteria: written by the standard library instead.
        reviewed_run.completion = {"capability": "search_documents", "path": "n", "equals": 2**70}
        reviewed_run.labels = {"ticket": "ünïcödé \"quoted\" \\ \n"}
        reviewed_run.save(update_fields=["completion", "labels"])
        trace = download(client_for(viewer), reviewed_run)
        assert trace["run"]["completion"]["equals"] == 2**70
        assert trace == _as_values(reviewed_run)

    def test_a_download_left_halfway_leaves_the_connection_usable(self, client_for, viewer, reviewed_run,
                                                                   make_attempt):
        from runs.trace import as_json

        # Over 400 attempts: three chunks of attempts (200 each); the reader stops after the first.
        step = reviewed_run.steps.order_by("pk").first()
        for n in range(3, 450):
            make_attempt(step, number=n + 10, decision="")
        chunks = as_json.trace_chunks(reviewed_run)
        while '"attempts"' not in next(chunks):
            pass
        assert next(chunks).startswith('{"uid":')   # the first 200 attempts, read from the stream
        chunks.close()   # as the server does when the client goes away
        whole = download(client_for(viewer), reviewed_run)
        assert len(whole["attempts"]) == reviewed_run.attempts.count() > 400
        assert whole == _as_values(reviewed_run)

    @pytest.mark.django_db(transaction=True)   # committed: the ASGI request may run on another thread
    def test_under_asgi_it_is_sent_as_it_is_made(self, client_for, viewer, reviewed_run):
        """Django's ASGI handler reads a synchronous stream whole before sending it; the download is
        handed over as an asynchronous one, pulled a chunk at a time."""
        from asgiref.sync import async_to_sync
        from django.test import AsyncClient

        from tests.conftest import off_the_event_loop

        async def asgi_download():
            client = AsyncClient()
            await client.aforce_login(viewer)
            response = await client.get(f"/runs/{reviewed_run.pk}/trace.json")
            assert response.status_code == 200 and response.is_async
            return [chunk async for chunk in response.streaming_content]

        # Off a browser test's event loop, which async_to_sync refuses to share.
        chunks = off_the_event_loop(async_to_sync(asgi_download))
        assert len(chunks) > 5
        assert json.loads(b"".join(chunks)) == download(client_for(viewer), reviewed_run)
