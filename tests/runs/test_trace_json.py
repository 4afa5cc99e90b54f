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
