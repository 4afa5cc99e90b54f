"""Datasets from runs: a finished run becomes an evaluation task, suites are versioned, an evaluation
shows per task what changed since the last version (the regression view), and scores feed it."""
from __future__ import annotations

import threading

import pytest
from django.db import connection

from core.models import AuditEvent
from core.projects import project_scope
from evaluation.models import Evaluation, EvaluationSuite, SuiteVersion
from evaluation.selectors import regression
from evaluation.services import evaluation_run_now, suite_tasks_change
from evaluation.suites import MAX_TASKS
from review import datasets
from review.models import Score, ScoreConfig, ScoreSource
from runs import services
from runs.models import Run
from runs.worker import engine

READ_POLICY = {"capability": "get_document", "path": "id", "equals": "POL-7"}
ADD = "/api/evaluation-suites/add-runs/"


@pytest.fixture
def registry(db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def finished_run(owner, plans, completion=READ_POLICY, goal="Find the travel policy"):
    run = services.run_start(owner=owner, goal=goal, planner="scripted", planner_config={"plans": plans},
                             completion=completion, budgets={"deadline_s": 120})
    engine.run_advance(run_id=run.pk, worker="test")
    run.refresh_from_db()
    assert run.is_finished, run.status
    return run


@pytest.fixture
def good_run(registry, operator, manual_advance):
    return finished_run(operator, [[{"capability": "get_document", "arguments": {"id": "POL-7"}}]])


@pytest.fixture
def bad_run(registry, operator, manual_advance):
    return finished_run(operator, [[{"capability": "get_document", "arguments": {"id": "NOPE"}}]])


@pytest.fixture
def replanned_run(registry, operator, manual_advance):
    return finished_run(operator, [[{"capability": "search_documents", "arguments": {"q": "zzqx nothing"}}],
                                   [{"capability": "get_document", "arguments": {"id": "POL-7"}}]])


def add(user, suite, runs, **kw):
    expectation = datasets.expectation_clean(**{k: kw.pop(k) for k in list(kw) if k in (
        "verdict_expected", "completion_expected", "note", "expected_from_score")})
    return datasets.suite_add_runs(user=user, suite=suite, run_ids=runs, expectation=expectation, **kw)


@pytest.mark.django_db(transaction=True)
class TestAddRuns:
    def test_a_run_becomes_a_task_of_a_new_suite_at_version_1(self, good_run, replanned_run, operator):
        result = add(operator, "regressions", [good_run.pk, replanned_run.pk], create=True,
                     completion_expected=True, note="keep working")
        suite = EvaluationSuite.objects.get(name="regressions")
        assert result.created and result.added == [good_run.pk, replanned_run.pk]
        assert suite.version == 1 and not suite.bundled
        task = suite.tasks[1]
        # The converter is export-as-scenario: recorded responses, recorded plans, the run's goal and completion.
        assert task["name"] == f"run-{replanned_run.pk}" and task["goal"] == replanned_run.goal
        assert task["completion"] == READ_POLICY and len(task["planner"]["plans"]) == 2
        assert {c["name"] for c in task["capabilities"]} == {"get_document", "search_documents"}
        # The direct baseline: the first planned call of the capability the completion criteria name.
        assert task["direct"] == {"capability": "get_document", "arguments": {"id": "POL-7"}}
        assert task["completion_expected"] is True and task["source"]["run"] == replanned_run.pk
        assert task["source"]["note"] == "keep working" and task["source"]["added_by"] == operator.username
        version = SuiteVersion.objects.get(suite=suite)
        assert version.number == 1 and version.created_by == operator and version.tasks == suite.tasks
        assert AuditEvent.objects.filter(action="suite.changed").count() == 1

    def test_adding_makes_a_new_version_and_a_duplicate_adds_nothing(self, good_run, bad_run, operator):
        add(operator, "regressions", [good_run.pk], create=True)
        again = add(operator, "regressions", [good_run.pk])
        assert again.version is None and again.already_present == [good_run.pk] and again.added == []
        more = add(operator, "regressions", [good_run.pk, bad_run.pk], completion_expected=True)
        assert more.version.number == 2 and more.added == [bad_run.pk] and more.already_present == [good_run.pk]
        suite = EvaluationSuite.objects.get(name="regressions")
        assert suite.version == 2 and len(suite.tasks) == 2
        assert list(SuiteVersion.objects.filter(suite=suite).values_list("number", flat=True)) == [2, 1]
        # Version 1 is immutable: it still holds one task.
        v1 = SuiteVersion.objects.get(suite=suite, number=1)
        assert len(v1.tasks) == 1
        with pytest.raises(ValueError):
            v1.save()

    def test_bad_input(self, good_run, operator, registry_admin, standard_suite):
        from core.errors import Conflict, InvalidInput, NotAllowed, NotFound

        add(operator, "regressions", [good_run.pk], create=True)
        with pytest.raises(NotFound):
            add(operator, "nope", [good_run.pk])
        with pytest.raises(NotFound):
            add(operator, "regressions", [good_run.pk + 1000])
        with pytest.raises(Conflict, match="bundled"):
            add(operator, "standard", [good_run.pk])
        with pytest.raises(InvalidInput):
            add(operator, "regressions", ["1"])
        with pytest.raises(InvalidInput):
            add(operator, "regressions", [good_run.pk], verdict_expected="great")
        with pytest.raises(InvalidInput):
            add(operator, "regressions", [good_run.pk], completion_expected="yes")
        with pytest.raises(InvalidInput, match="boolean"):
            add(operator, "regressions", [good_run.pk], expected_from_score="cost")
        with pytest.raises(NotAllowed):
            add(registry_admin, "regressions", [good_run.pk])

    def test_a_live_run_is_refused(self, registry, operator, manual_advance):
        from core.errors import Conflict

        live = services.run_start(owner=operator, goal="x", planner="scripted",
                                  planner_config={"plans": [[{"capability": "get_document",
                                                              "arguments": {"id": "POL-7"}}]]},
                                  completion=READ_POLICY, budgets={"deadline_s": 120})
        with pytest.raises(Conflict, match="still live"):
            add(operator, "regressions", [live.pk], create=True)
        assert not EvaluationSuite.objects.filter(name="regressions").exists()
        # Not strict (a bulk action, a queue): listed with its reason.
        with pytest.raises(Conflict, match="no suite was made"):
            add(operator, "regressions", [live.pk], create=True, strict=False)

    def test_an_oversized_suite_is_refused(self, good_run, bad_run, operator, monkeypatch):
        from core.errors import InvalidInput
        from evaluation import services as evaluation_services

        add(operator, "regressions", [good_run.pk], create=True)
        monkeypatch.setattr(evaluation_services, "MAX_TASKS", 1)
        with pytest.raises(InvalidInput, match="at most 1 tasks"):
            add(operator, "regressions", [bad_run.pk])
        assert EvaluationSuite.objects.get(name="regressions").version == 1

    def test_the_expected_outcome_from_a_score(self, good_run, bad_run, operator):
        right = ScoreConfig.objects.create(name="outcome right", kind="boolean")
        Score.objects.create(config=right, run=good_run, source=ScoreSource.PERSON, author=operator,
                             author_key=f"user:{operator.pk}", number=1.0)
        Score.objects.create(config=right, run=bad_run, source=ScoreSource.PERSON, author=operator,
                             author_key=f"user:{operator.pk}", number=0.0, comment="should have found it")
        add(operator, "regressions", [good_run.pk, bad_run.pk], create=True, expected_from_score="outcome right")
        tasks = {t["source"]["run"]: t for t in EvaluationSuite.objects.get(name="regressions").tasks}
        # Right and completed: expected to complete. Wrong and failed: expected to complete (the opposite).
        assert tasks[good_run.pk]["completion_expected"] is True
        assert tasks[bad_run.pk]["completion_expected"] is True
        assert tasks[bad_run.pk]["source"]["expected_from"] == "outcome right"
        scores = {s["config"]: s["value"] for s in tasks[bad_run.pk]["source"]["scores"]}
        assert scores["outcome right"] is False and scores["completion_verified"] is False

    def test_concurrent_adds_make_consecutive_versions_and_lose_nothing(self, registry, operator, manual_advance):
        runs = [finished_run(operator, [[{"capability": "get_document", "arguments": {"id": "POL-7"}}]],
                             goal=f"Find the travel policy {i}") for i in range(6)]
        add(operator, "regressions", [runs[0].pk], create=True)
        suite = EvaluationSuite.objects.get(name="regressions")
        errors = []
        barrier = threading.Barrier(5)

        def one(run_id):
            try:
                with project_scope(suite.project_id):
                    barrier.wait(timeout=10)
                    add(operator, suite.pk, [run_id])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=one, args=(r.pk,)) for r in runs[1:]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        suite.refresh_from_db()
        assert suite.version == 6
        assert sorted(t["source"]["run"] for t in suite.tasks) == sorted(r.pk for r in runs)
        numbers = list(SuiteVersion.objects.filter(suite=suite).order_by("number").values_list("number", flat=True))
        assert numbers == [1, 2, 3, 4, 5, 6]
        for version in SuiteVersion.objects.filter(suite=suite):
            assert len(version.tasks) == version.number   # each version is the one before plus one task

    def test_two_adds_that_both_create_one_new_suite_make_one_suite(self, registry, operator, manual_advance):
        runs = [finished_run(operator, [[{"capability": "get_document", "arguments": {"id": "POL-7"}}]],
                             goal=f"Find the travel policy {i}") for i in range(2)]
        project_id = runs[0].project_id
        errors, results = [], []
        barrier = threading.Barrier(2)

        def one(run_id):
            try:
                with project_scope(project_id):
                    barrier.wait(timeout=10)
                    results.append(add(operator, "born-twice", [run_id], create=True))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=one, args=(r.pk,)) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        suite = EvaluationSuite.objects.get(name="born-twice")
        assert suite.version == 2 and sorted(t["source"]["run"] for t in suite.tasks) == sorted(r.pk for r in runs)
        assert sorted(r.created for r in results) == [False, True]


@pytest.mark.django_db(transaction=True)
class TestRegressionView:
    def test_an_evaluation_runs_its_version_and_marks_each_task(self, good_run, bad_run, replanned_run, operator):
        add(operator, "regressions", [good_run.pk, bad_run.pk], create=True, completion_expected=True)
        suite = EvaluationSuite.objects.get(name="regressions")
        first = evaluation_run_now(user=operator, suite_id=suite.pk)
        assert first.status == Evaluation.Status.COMPLETED, first.error
        assert first.suite_version.number == 1
        view = regression(first)
        assert view.baselines == {"previous_version": None, "same_version": None}
        rows = {r.task: r for r in view.rows}
        assert rows[f"run-{good_run.pk}"].passed is True
        # The bad run replays to the same failure in planning mode: the expectation (complete) is not met.
        assert rows[f"run-{bad_run.pk}"].passed is False

        add(operator, suite.pk, [replanned_run.pk], completion_expected=True)
        second = evaluation_run_now(user=operator, suite_id=suite.pk)
        assert second.suite_version.number == 2 and second.tasks_total == 3
        view = regression(second)
        assert view.baselines["previous_version"] == first and view.baselines["same_version"] is None
        marks = {r.task: r.against["previous_version"]["change"] for r in view.rows}
        assert marks == {f"run-{good_run.pk}": "unchanged", f"run-{bad_run.pk}": "unchanged",
                         f"run-{replanned_run.pk}": "new"}
        assert view.counts["previous_version"]["new"] == 1

        # Remove the failing task: version 3, and the regression view lists it as removed.
        suite_tasks_change(user=operator, suite_id=suite.pk, remove=[f"run-{bad_run.pk}"])
        third = evaluation_run_now(user=operator, suite_id=suite.pk)
        fourth = evaluation_run_now(user=operator, suite_id=suite.pk)
        view = regression(fourth)
        assert view.baselines == {"previous_version": second, "same_version": third}
        assert view.removed["previous_version"] == [f"run-{bad_run.pk}"]
        assert {r.against["same_version"]["change"] for r in view.rows} == {"unchanged"}

    def test_fixed_and_regressed(self):
        from evaluation.verdicts import task_change, task_passed

        assert task_passed("both_failed", False) is False
        assert task_passed("direct_as_good", True) is True
        assert task_passed("direct_as_good", True, completion_expected=False) is False
        assert task_passed("planning_earned", True, verdict_expected="planning_earned", completion_expected=True)
        assert task_change(False, True) == "fixed" and task_change(True, False) == "regressed"
        assert task_change(None, True) == "new" and task_change(True, True) == "unchanged"


@pytest.mark.django_db(transaction=True)
class TestApi:
    def test_add_runs_then_read_versions_and_the_regression(self, api_for, good_run, bad_run, operator):
        api = api_for(operator)
        response = api.post(ADD, {"suite": "regressions", "create": True, "runs": [good_run.pk],
                                  "completion_expected": True, "note": "a good one"}, format="json")
        assert response.status_code == 201, response.json()
        body = response.json()
        assert body["created"] and body["version"] == 1 and body["added"] == [good_run.pk]
        suite_id = body["suite"]["id"]
        again = api.post(ADD, {"suite": str(suite_id), "runs": [good_run.pk]}, format="json")
        assert again.status_code == 200 and again.json()["version"] is None
        assert again.json()["already_present"] == [good_run.pk]
        more = api.post(ADD, {"suite": "regressions", "runs": [bad_run.pk], "verdict_expected": "both_failed"},
                        format="json")
        assert more.status_code == 201 and more.json()["version"] == 2
        versions = api.get(f"/api/evaluation-suites/{suite_id}/versions/").json()
        assert [v["number"] for v in versions["results"]] == [2, 1]
        assert versions["results"][0]["changes"]["added"] == [f"run-{bad_run.pk}"]
        assert versions["results"][0]["created_by"] == operator.username
        suites = {s["name"]: s for s in api.get("/api/evaluation-suites/").json()}
        assert suites["regressions"]["version"] == 2

        evaluation = evaluation_run_now(user=operator, suite_id=suite_id)
        detail = api.get(f"/api/evaluations/{evaluation.pk}/").json()
        assert detail["suite_version"] == 2
        tasks = {t["task"]: t for t in detail["regression"]["tasks"]}
        assert tasks[f"run-{bad_run.pk}"]["passed"] is True   # both failed, as the reviewer expected
        assert tasks[f"run-{good_run.pk}"]["source"]["note"] == "a good one"

    @pytest.mark.parametrize("body, status", [
        ({"suite": "regressions", "runs": []}, 400),
        ({"suite": "regressions", "runs": "1"}, 400),
        ({"suite": "regressions", "runs": [1], "completion_expected": "maybe"}, 400),
        ({"suite": "regressions", "runs": [1], "verdict_expected": "great"}, 400),
        ({"suite": "regressions", "runs": [1], "colour": "red"}, 400),
        ({"suite": "regressions", "runs": list(range(1, MAX_TASKS + 2))}, 400),
        ({"suite": "nope", "runs": [1]}, 404),
        ({"suite": "standard", "runs": [1]}, 409),
    ])
    def test_bad_input_is_a_clear_4xx(self, api_for, operator, standard_suite, body, status):
        response = api_for(operator).post(ADD, body, format="json")
        assert response.status_code == status, response.content

    def test_a_run_of_another_project_is_not_found(self, api_for, good_run, operator):
        from core.models import Project

        other = Project.objects.create(slug="other", name="Other")
        Run.objects.filter(pk=good_run.pk).update(project=other)
        response = api_for(operator).post(ADD, {"suite": "regressions", "create": True, "runs": [good_run.pk]},
                                          format="json")
        assert response.status_code == 404

    def test_permissions(self, api_for, good_run, viewer, reviewer, registry_admin):
        body = {"suite": "regressions", "create": True, "runs": [good_run.pk], "completion_expected": False}
        assert api_for(viewer).post(ADD, body, format="json").status_code == 403
        assert api_for(registry_admin).post(ADD, body, format="json").status_code == 403
        # A reviewer adds with their expected outcome (and cannot start the evaluation).
        assert api_for(reviewer).post(ADD, body, format="json").status_code == 201
        suite = EvaluationSuite.objects.get(name="regressions")
        assert api_for(reviewer).post("/api/evaluations/", {"suite": suite.pk}, format="json").status_code == 403


@pytest.mark.django_db(transaction=True)
class TestFromAFilter:
    """The runs list's bulk action: the runs a filter selects become tasks, in one new version."""

    def test_a_filter_adds_its_finished_runs_in_one_version(self, good_run, bad_run, operator, registry):
        from runs import bulk

        live = services.run_start(owner=operator, goal="Find the travel policy later", planner="scripted",
                                  planner_config={"plans": [[{"capability": "get_document",
                                                              "arguments": {"id": "POL-7"}}]]},
                                  completion=READ_POLICY, budgets={"deadline_s": 120})
        preview = bulk.bulk_preview(user=operator, action="suite", query="q=travel")
        assert preview.selected == 3 and preview.eligible == 2
        assert preview.refused == (("still live (only a finished run becomes a task)", 1),)
        job = bulk.bulk_start(user=operator, action="suite", query="q=travel",
                              parameters={"suite": "from-a-filter", "create": True, "completion_expected": True})
        assert bulk.bulk_process(job.pk)
        job.refresh_from_db()
        assert (job.status, job.done, job.skipped, job.cursor) == ("done", 2, 1, live.pk)
        assert job.problems[0]["run"] == live.pk
        suite = EvaluationSuite.objects.get(name="from-a-filter")
        assert suite.version == 1 and {t["source"]["run"] for t in suite.tasks} == {good_run.pk, bad_run.pk}
        # Processing the job again (a repeated delivery) changes nothing; a second job adds nothing new.
        assert bulk.bulk_process(job.pk)
        again = bulk.bulk_start(user=operator, action="suite", query="q=travel", parameters={"suite": "from-a-filter"})
        bulk.bulk_process(again.pk)
        again.refresh_from_db()
        assert (again.done, again.skipped) == (0, 3)
        assert EvaluationSuite.objects.get(name="from-a-filter").version == 1

    def test_a_selection_larger_than_a_suite_adds_the_runs_that_can_be_tasks(self, good_run, bad_run, operator,
                                                                             monkeypatch):
        from runs import bulk
        from runs.models_bulk import BulkAction

        # One run could be a task, the other has no completion criteria; the suite holds only one task.
        Run.objects.filter(pk=bad_run.pk).update(completion={})
        monkeypatch.setattr(datasets, "MAX_TASKS", 1)
        monkeypatch.setattr("evaluation.services.MAX_TASKS", 1)
        monkeypatch.setitem(bulk.EXTENSIONS, "suite",
                            bulk.EXTENSIONS["suite"].__class__(**{**bulk.EXTENSIONS["suite"].__dict__, "max_runs": 1}))
        job = bulk.bulk_start(user=operator, action="suite", query="q=travel",
                              parameters={"suite": "small-one", "create": True})
        bulk.bulk_process(job.pk)
        job = BulkAction.objects.get(pk=job.pk)
        assert (job.done, job.skipped, job.failed) == (1, 1, 0)
        assert [t["source"]["run"] for t in EvaluationSuite.objects.get(name="small-one").tasks] == [good_run.pk]

    def test_bad_parameters_and_permissions(self, good_run, operator, viewer, standard_suite, api_for):
        from core.errors import Conflict, InvalidInput, NotAllowed, NotFound
        from runs import bulk

        with pytest.raises(InvalidInput):
            bulk.bulk_start(user=operator, action="suite", query="", parameters={})
        with pytest.raises(InvalidInput):
            bulk.bulk_start(user=operator, action="suite", query="", parameters={"suite": "x", "colour": 1})
        with pytest.raises(NotFound):
            bulk.bulk_start(user=operator, action="suite", query="", parameters={"suite": "nope"})
        with pytest.raises(Conflict):
            bulk.bulk_start(user=operator, action="suite", query="", parameters={"suite": "standard"})
        with pytest.raises(NotAllowed):
            bulk.bulk_start(user=viewer, action="suite", query="", parameters={"suite": "x", "create": True})
        api = api_for(operator)
        response = api.post("/api/runs/bulk/", {"action": "suite", "query": "",
                                                "parameters": {"suite": "api-suite", "create": True}}, format="json")
        assert response.status_code == 201, response.content
        assert api.post("/api/runs/bulk/", {"action": "suite", "query": "", "parameters": {
            "suite": "api-suite", "completion_expected": "yes"}}, format="json").status_code == 400


@pytest.mark.django_db
def test_an_evaluation_runs_the_version_it_recorded_not_a_later_one(operator, small_suite):
    from evaluation.runner import evaluation_run
    from evaluation.services import evaluation_create

    evaluation = evaluation_create(user=operator, suite_id=small_suite.pk)
    assert evaluation.suite_version.number == 1
    # A later version (here: a task removed) does not change what the queued evaluation runs.
    suite_tasks_change(user=operator, suite_id=small_suite.pk, remove=["lookup-policy-by-id"])
    evaluation = evaluation_run(evaluation_id=evaluation.pk)
    assert evaluation.status == "completed" and evaluation.tasks_total == 2
    assert {r.task for r in evaluation.results.all()} == {"lookup-policy-by-id", "empty-result-needs-broader-query"}


@pytest.mark.django_db
def test_bundled_suites_get_a_version_when_their_file_changes(operator):
    from evaluation.services import evaluation_suites_sync
    from evaluation.suites import bundled_suites

    standard = next(s for s in evaluation_suites_sync() if s.name == "standard")
    assert standard.version == 1 and standard.versions.count() == 1
    evaluation_suites_sync()   # unchanged: no new version
    assert standard.versions.count() == 1
    definition = next(s for s in bundled_suites() if s.name == "standard")
    shorter = definition.__class__(name="standard", description=definition.description, tasks=definition.tasks[:3],
                                   planning_mode=definition.planning_mode, source="standard.json")
    evaluation_suites_sync(suites=[shorter])
    standard.refresh_from_db()
    assert standard.version == 2 and len(standard.tasks) == 3
    assert len(standard.versions.get(number=2).changes["removed"]) == len(definition.tasks) - 3


@pytest.mark.django_db(transaction=True)
def test_removing_tasks_over_the_api(api_for, good_run, bad_run, operator, viewer, standard_suite):
    suite = add(operator, "regressions", [good_run.pk, bad_run.pk], create=True).suite
    url = f"/api/evaluation-suites/{suite.pk}/remove-tasks/"
    response = api_for(operator).post(url, {"tasks": [f"run-{bad_run.pk}"]}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["number"] == 2 and response.json()["changes"]["removed"] == [f"run-{bad_run.pk}"]
    assert api_for(operator).post(url, {"tasks": ["no-such-task"]}, format="json").status_code == 400
    assert api_for(operator).post(url, {"tasks": "x"}, format="json").status_code == 400
    # The last task stays: a suite keeps at least one.
    assert api_for(operator).post(url, {"tasks": [f"run-{good_run.pk}"]}, format="json").status_code == 409
    assert api_for(viewer).post(url, {"tasks": [f"run-{good_run.pk}"]}, format="json").status_code == 403
    assert api_for(operator).post(f"/api/evaluation-suites/{standard_suite.pk}/remove-tasks/",
                                  {"tasks": ["lookup-policy-by-id"]}, format="json").status_code == 409
    assert api_for(operator).post("/api/evaluation-suites/999999/remove-tasks/", {"tasks": ["x"]},
                                  format="json").status_code == 404


@pytest.mark.django_db
def test_the_migration_makes_existing_suites_version_1(operator, small_suite):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("evaluation.migrations.0004_datasets31_suite_versions")
    evaluation = Evaluation.objects.create(suite=small_suite, started_by=operator)
    assert not SuiteVersion.objects.filter(suite=small_suite).exists()
    migration.first_versions(apps, None)
    version = SuiteVersion.objects.get(suite=small_suite)
    assert version.number == 1 and version.tasks == small_suite.tasks
    evaluation.refresh_from_db()
    assert evaluation.suite_version == version


@pytest.mark.django_db(transaction=True)
class TestAddToSuitePage:
    def test_a_reviewer_adds_a_run_from_its_page(self, client_for, good_run, reviewer):
        client = client_for(reviewer)
        page = client.get(f"/runs/{good_run.pk}/")
        assert b'data-testid="add-to-suite"' in page.content
        form = client.get(f"/review/runs/{good_run.pk}/add-to-suite/")
        assert form.status_code == 200 and b"a new suite" in form.content
        done = client.post(f"/review/runs/{good_run.pk}/add-to-suite/",
                           {"suite": "__new__", "new_suite": "reviewed", "completion_expected": "no",
                            "verdict_expected": "both_failed", "note": "<b>bold</b>"})
        assert done.status_code == 302 and done["Location"] == f"/runs/{good_run.pk}/"
        task = EvaluationSuite.objects.get(name="reviewed").tasks[0]
        assert task["completion_expected"] is False and task["verdict_expected"] == "both_failed"
        suite_id = EvaluationSuite.objects.get(name="reviewed").pk
        again = client.post(f"/review/runs/{good_run.pk}/add-to-suite/", {"suite": str(suite_id)}, follow=True)
        assert b"already a task of reviewed" in again.content
        assert EvaluationSuite.objects.get(name="reviewed").version == 1

    def test_refusals(self, client_for, good_run, registry, operator, viewer, manual_advance):
        live = services.run_start(owner=operator, goal="x", planner="scripted",
                                  planner_config={"plans": [[{"capability": "get_document",
                                                              "arguments": {"id": "POL-7"}}]]},
                                  completion=READ_POLICY, budgets={"deadline_s": 120})
        client = client_for(operator)
        shown = client.get(f"/review/runs/{live.pk}/add-to-suite/")
        assert shown.status_code == 200 and b"still live" in shown.content
        assert client.post(f"/review/runs/{live.pk}/add-to-suite/", {"suite": "__new__", "new_suite": "x"}
                           ).status_code == 409
        assert client.post(f"/review/runs/{good_run.pk}/add-to-suite/", {"suite": "__new__"}).status_code == 400
        assert client.get("/review/runs/999999/add-to-suite/").status_code == 404
        assert client_for(viewer).get(f"/review/runs/{good_run.pk}/add-to-suite/").status_code == 403
        assert b'data-testid="add-to-suite"' not in client_for(viewer).get(f"/runs/{good_run.pk}/").content
        assert not EvaluationSuite.objects.filter(name="x").exists()


@pytest.mark.django_db(transaction=True)
def test_the_hostile_corpus_in_a_note_a_suite_name_and_a_score_shows_inert(api_for, client_for, good_run, operator):
    from tests.review.conftest import XSS_CORPUS, assert_inert

    config = ScoreConfig.objects.create(name="outcome right", kind="boolean")
    Score.objects.create(config=config, run=good_run, source=ScoreSource.PERSON, author=operator,
                         author_key=f"user:{operator.pk}", number=1.0, comment=XSS_CORPUS[0])
    for n, text in enumerate(XSS_CORPUS):
        name = f"{n} {text}"[:120]
        body = {"suite": name, "create": True, "runs": [good_run.pk], "note": text, "completion_expected": True}
        response = api_for(operator).post(ADD, body, format="json")
        assert response.status_code == 201, response.content
        evaluation = evaluation_run_now(user=operator, suite_id=response.json()["suite"]["id"])
        html = client_for(operator).get(f"/evaluations/{evaluation.pk}/", HTTP_HX_REQUEST="true").content.decode()
        assert 'id="regression-view"' in html
        section = html[html.index('id="regression-view"'):html.index("</section>", html.index('id="regression-view"'))]
        assert_inert(section)
        assert ("<" not in text) or text not in section


@pytest.mark.django_db
def test_the_start_form_lists_the_suites_of_the_project_in_scope_only(operator, small_suite):
    from core.models import Project
    from evaluation.views import StartEvaluationForm

    other = Project.objects.create(slug="other", name="Other")
    with project_scope(other):
        EvaluationSuite.objects.create(name="theirs", tasks=small_suite.tasks)
    # The queryset is the project in scope's when the form is made (not when the module was imported).
    names = [label for _value, label in StartEvaluationForm().fields["suite"].choices]
    assert names == ["small"]
    with project_scope(other):
        assert [label for _value, label in StartEvaluationForm().fields["suite"].choices] == ["theirs"]


class TestFromAReviewQueue:
    """A review queue's runs (its done items, all, or its disagreements) become tasks in one version."""

    @pytest.fixture
    def queue(self, good_run, bad_run, operator, registry_admin):
        from review import queues

        ScoreConfig.objects.create(name="helpful", kind="numeric", min_value=1, max_value=5)
        made, _ = queues.queue_save(user=registry_admin, name="stalls", filter_query="q=travel",
                                    score_configs=["helpful"])
        item = queues.queue_next(user=operator, queue=made)
        queues.item_done(user=operator, queue=made, item_id=item.pk, scores={"helpful": 4})
        return made

    def test_its_done_items_then_all_of_them_join_a_suite(self, api_for, queue, good_run, bad_run, operator):
        from review.models import QueueItem

        done = QueueItem.objects.get(queue=queue, done_at__isnull=False).run_id
        url = f"/api/review/queues/{queue.pk}/add-to-suite/"
        first = api_for(operator).post(url, {"suite": "from-a-queue", "create": True}, format="json")
        assert first.status_code == 201, first.json()
        assert first.json()["added"] == [done] and first.json()["version"] == 1
        every = api_for(operator).post(url, {"suite": "from-a-queue", "state": "all"}, format="json")
        assert every.status_code == 201 and every.json()["already_present"] == [done]
        suite = EvaluationSuite.objects.get(name="from-a-queue")
        assert suite.version == 2 and {t["source"]["run"] for t in suite.tasks} == {good_run.pk, bad_run.pk}

    @pytest.mark.parametrize("body, status", [
        ({"suite": "x", "state": "everything"}, 400),
        ({"suite": "x", "state": "disagreement", "create": True}, 400),   # none disagreed
        ({"suite": "no such suite"}, 404),
        ({"state": "done"}, 400),
    ])
    def test_bad_input_is_a_clear_4xx_and_adds_nothing(self, api_for, queue, operator, body, status):
        response = api_for(operator).post(f"/api/review/queues/{queue.pk}/add-to-suite/", body, format="json")
        assert response.status_code == status, response.content
        assert not EvaluationSuite.objects.filter(bundled=False).exists()

    def test_who_may(self, api_for, queue, viewer, reviewer):
        url = f"/api/review/queues/{queue.pk}/add-to-suite/"
        assert api_for(viewer).post(url, {"suite": "v", "create": True}, format="json").status_code == 403
        assert api_for(reviewer).post(url, {"suite": "r", "create": True}, format="json").status_code == 201
        assert api_for(reviewer).post("/api/review/queues/999999/add-to-suite/", {"suite": "r"},
                                      format="json").status_code == 404

    def test_from_the_queue_page(self, client_for, queue, operator):
        page = client_for(operator).get(f"/review/queues/{queue.pk}/")
        assert f"/review/queues/{queue.pk}/add-to-suite/" in page.content.decode()
        form = client_for(operator).get(f"/review/queues/{queue.pk}/add-to-suite/")
        assert form.status_code == 200 and "Which items" in form.content.decode()
        posted = client_for(operator).post(f"/review/queues/{queue.pk}/add-to-suite/",
                                           {"state": "all", "suite": "__new__", "new_suite": "queue suite"})
        assert posted.status_code == 302 and posted["Location"] == f"/review/queues/{queue.pk}/"
        assert EvaluationSuite.objects.get(name="queue suite").version == 1
        refused = client_for(operator).post(f"/review/queues/{queue.pk}/add-to-suite/",
                                            {"state": "disagreement", "suite": "__new__", "new_suite": "none"})
        assert refused.status_code == 400 and "no disagreement item" in refused.content.decode()
