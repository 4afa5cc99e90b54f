"""Hostile input on the review surfaces (scores, score configs, queues, datasets): a 400 naming the
field, nothing written, on both stacks."""
from __future__ import annotations

import pytest

from review.models import Score, ScoreConfig

pytestmark = pytest.mark.django_db

# An integer past a float's range (~1.8e308): JSON writes it, and math.isfinite() raised OverflowError
# on it in the score check (a 500 on POST and PATCH of a score and on a queue review's done).
PAST_FLOAT = "1" + "0" * 400


@pytest.fixture
def admin(db):
    from django.contrib.auth.models import User

    return User.objects.create_superuser("root", "root@example.com", "pw-root-long-enough")


@pytest.fixture
def api(admin):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(admin)
    return client


@pytest.fixture
def run(admin):
    from django.utils import timezone

    from runs.models import Run

    now = timezone.now()
    return Run.objects.create(goal="g", completion={"capability": "x", "path": "id", "exists": True},
                              budgets={"deadline_s": 60}, planner="scripted", owner=admin, status="stopped",
                              stop_reason="stalled", trace_id="r" * 32, started_at=now, finished_at=now)


@pytest.fixture
def configs(db):
    ScoreConfig.objects.create(name="helpful", kind="numeric", min_value=1, max_value=5)
    ScoreConfig.objects.create(name="free", kind="numeric")


def _post(api, url, raw, method="post"):
    return getattr(api, method)(url, data=raw, content_type="application/json")


def _refused_as_too_large(response):
    assert response.status_code == 400, response.content
    assert "too large" in response.json()["error"]["message"]


class TestNumbersPastAFloat:
    @pytest.mark.parametrize("config", ["free", "helpful"])
    def test_it_refuses_a_score_past_a_floats_range(self, api, run, configs, config):
        _refused_as_too_large(_post(api, f"/api/review/runs/{run.pk}/scores/",
                                    f'{{"config": "{config}", "value": {PAST_FLOAT}}}'))
        _refused_as_too_large(_post(api, f"/api/review/runs/{run.pk}/scores/",
                                    f'{{"config": "free", "value": -{PAST_FLOAT}}}'))
        assert not Score.objects.exists()

    def test_it_refuses_the_edit_and_keeps_the_score(self, api, run, configs):
        created = _post(api, f"/api/review/runs/{run.pk}/scores/", '{"config": "free", "value": 3}')
        assert created.status_code == 201
        score_id = created.json()["id"]
        _refused_as_too_large(_post(api, f"/api/review/scores/{score_id}/", f'{{"value": {PAST_FLOAT}}}', "patch"))
        assert Score.objects.get(pk=score_id).number == 3.0

    def test_it_refuses_a_queue_review_and_the_item_stays_open(self, api, run, configs):
        queue = _post(api, "/api/review/queues/", '{"name": "q", "score_configs": ["free"]}').json()["id"]
        item = _post(api, f"/api/review/queues/{queue}/next/", "").json()["id"]
        _refused_as_too_large(_post(api, f"/api/review/queues/{queue}/items/{item}/done/",
                                    f'{{"scores": {{"free": {PAST_FLOAT}}}}}'))
        assert not Score.objects.exists()
        assert api.get(f"/api/review/queues/{queue}/items/{item}/").json()["done_at"] is None

    def test_it_refuses_a_score_configs_range_past_a_float(self, api):
        _refused_as_too_large(_post(api, "/api/review/score-configs/",
                                    f'{{"name": "x", "kind": "numeric", "min_value": {PAST_FLOAT}}}'))
        assert not ScoreConfig.objects.filter(name="x").exists()

    def test_a_large_integer_within_a_floats_range_is_still_a_number(self, api, run, configs):
        response = _post(api, f"/api/review/runs/{run.pk}/scores/", '{"config": "free", "value": %s}' % ("9" * 300))
        assert response.status_code == 201, response.content


class TestSuiteRuns:
    @pytest.mark.parametrize("run_id", [2**63, 2**64])
    def test_a_run_id_past_64_bits_is_a_400_and_makes_no_suite(self, api, run, run_id):
        """Before: OverflowError on SQLite (a 500) once the suite was being made."""
        from evaluation.models import EvaluationSuite

        response = _post(api, "/api/evaluation-suites/add-runs/",
                         f'{{"suite": "mine", "create": true, "runs": [{run_id}]}}')
        assert response.status_code == 400, response.content
        assert "runs" in response.json()["error"]["fields"]
        assert not EvaluationSuite.objects.filter(name="mine").exists()


# These held already: each a 400 naming its field.
HELD = [
    ("scores", '{"config": "free", "value": [1]}', "value"),
    ("scores", '{"config": null, "value": null}', "config"),
    ("scores", '{"config": "free", "value": 1, "attempt": 5}', "attempt"),
    ("/api/review/score-configs/", '{"name": "x", "kind": "numeric", "max_value": "1e999"}', "max_value"),
    ("/api/review/score-configs/", '{"name": "x", "kind": "categorical", "categories": {"a": 1}}', "categories"),
    ("/api/review/root-causes/", '{"name": ["a"]}', "name"),
    ("incident", '{"links": {"a": 1}}', "links"),
    ("incident", '{"owner": ["x"]}', "owner"),
    ("/api/review/queues/", '{"name": "q", "score_configs": ["free"], "reviews_per_item": %s}' % ("9" * 30),
     "reviews_per_item"),
    ("/api/review/queues/", '{"name": "q", "score_configs": ["free"], "filter": "created_from=99999-01-01"}',
     "filter"),
    ("/api/review/queues/", '{"name": "q", "score_configs": ["free"], "filter": "goal=a%00b"}', "filter"),
]


@pytest.mark.parametrize("url, raw, field", HELD)
def test_wrong_types_and_values_are_a_400_naming_the_field(api, run, configs, url, raw, field):
    if not url.startswith("/"):
        url = f"/api/review/runs/{run.pk}/{url}/"
    response = _post(api, url, raw, "put" if url.endswith("incident/") else "post")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
