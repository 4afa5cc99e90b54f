"""Probes, evaluations: starting one (API and page) with hostile values, and the pages' query strings, are a
4xx naming the field or a page, never a 500, and queue nothing."""
from __future__ import annotations

import pytest

from evaluation.models import Evaluation, EvaluationSuite

pytestmark = pytest.mark.django_db


@pytest.fixture
def suites(db):
    from evaluation.services import evaluation_suites_sync

    evaluation_suites_sync()
    return EvaluationSuite.objects.get(name="standard")


API_BODIES = [
    {"suite": "²"}, {"suite": "9" * 120}, {"suite": "99999999999999999999"}, {"suite": "-1"}, {"suite": "0"},
    {"suite": 5}, {"suite": None}, {"suite": ["standard"]}, {"suite": {"a": 1}}, {"suite": True},
    {"suite": "standard", "label": "l" * 201},
    {"suite": "standard", "label": None}, {"suite": "standard", "planning_mode": "x" * 10_000},
    {"suite": "standard", "planning_mode": 1}, {"suite": "standard", "planner_config": []},
    {"suite": "standard", "planner_config": "x"}, {"suite": "standard", "planner_config": None},
    {"suite": "standard", "planning_mode": "llm", "planner_config": {"endpoint": "http://[::1/x", "model": "m"}},
    {"suite": "standard", "planning_mode": "llm", "planner_config": {"endpoint": "https://a:99999/", "model": "m"}},
    {"suite": "standard", "planning_mode": "llm", "planner_config": {"endpoint": 5, "model": ["m"]}},
    {"suite": "standard", "planning_mode": "llm", "planner_config": {"max_tokens": 2**70, "model": "m",
                                                                     "endpoint": "https://a.example/"}},
    {"suite": "standard", "planning_mode": "llm", "planner_config": {"temperature": 1e308, "model": "m",
                                                                     "endpoint": "https://a.example/"}},
    {"suite": "standard", "extra": 1},
]


@pytest.mark.parametrize("body", API_BODIES, ids=lambda b: repr(b)[:50])
def test_an_odd_evaluation_start_over_the_api_is_a_400(api_for, operator, suites, body):
    response = api_for(operator).post("/api/evaluations/", body, format="json")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert not Evaluation.objects.exists()


def test_a_suite_named_by_a_superscript_digit_is_a_400_naming_it(api_for, operator, suites):
    """Before: "²".isdigit() held, int("²") raised: a 500."""
    response = api_for(operator).post("/api/evaluations/", {"suite": "²"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"suite": "no such suite"}


FORMS = [
    {"suite": "9" * 30}, {"suite": "²"}, {"suite": "\x00"}, {"suite": ""}, {"label": "\x00"},
    {"label": "l" * 201}, {"planner_config": "[]"}, {"planner_config": '{"a": NaN}'},
    {"planner_config": '{"a": "\\u0000"}'}, {"planner_config": "[" * 100_000},
    {"planner_config": '{"a": %s}' % ("9" * 400)}, {"planning_mode": "nope"},
]


@pytest.mark.parametrize("fields", FORMS, ids=lambda f: repr(f)[:50])
def test_an_odd_evaluation_start_on_the_page_queues_nothing(client_for, operator, suites, fields):
    data = {"suite": str(suites.pk), "label": "", "planning_mode": "", "planner_config": "", **fields}
    response = client_for(operator).post("/evaluations/start/", data)
    assert response.status_code == 302, (response.status_code, response.content[:300])
    assert not Evaluation.objects.exists()


@pytest.fixture
def evaluation(operator, suites):
    from evaluation.services import evaluation_create

    return evaluation_create(user=operator, suite_id=suites.pk)


@pytest.mark.parametrize("query", ["baseline=²", "baseline=" + "9" * 5000, "baseline=99999999999999999999",
                                   "baseline=%00", "baseline=-1", "baseline=1&baseline=2"])
def test_an_odd_baseline_on_the_evaluation_page_compares_with_nothing(client_for, operator, evaluation, query):
    """Before: "²" and 5,000 digits passed isdigit() and int() raised (with a baseline to compare): a 500."""
    from evaluation.services import evaluation_create

    baseline = evaluation_create(user=operator, suite_id=evaluation.suite_id)
    Evaluation.objects.filter(pk=baseline.pk).update(status=Evaluation.Status.COMPLETED)
    response = client_for(operator).get(f"/evaluations/{evaluation.pk}/?{query}")
    assert response.status_code == 200


@pytest.mark.parametrize("path", ["/evaluations/99999999999999999/", "/evaluations/runs/99999999999999999/twins/",
                                  "/api/evaluations/99999999999999999/", "/api/evaluations/?page=%00&cursor=%00",
                                  "/api/evaluation-suites/99999999999999999/versions/",
                                  "/evaluations/readiness/?suite=%00&baseline=%00&window=%00",
                                  "/evaluations/readiness/?suite=²&window=99999999999999999999"])
def test_odd_evaluation_addresses_are_not_a_500(client_for, api_for, operator, path):
    client = api_for(operator) if path.startswith("/api/") else client_for(operator)
    assert client.get(path).status_code < 500


@pytest.mark.parametrize("tasks", [[], ["x" * 10_000], [5], None, "x", [None], ["a"] * 1000])
def test_odd_task_removals_are_a_4xx(api_for, operator, suites, tasks):
    response = api_for(operator).post(f"/api/evaluation-suites/{suites.pk}/remove-tasks/", {"tasks": tasks},
                                      format="json")
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
