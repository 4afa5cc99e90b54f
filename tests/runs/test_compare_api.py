"""`GET /api/runs/compare/?a=&b=`: the same comparison as the page, bad input a clear 4xx."""
import pytest


@pytest.fixture
def pair(make_run, make_revision, make_step, make_attempt):
    runs = []
    for n, found in enumerate(([], [{"id": "POL-7"}])):
        run = make_run(status="completed", tokens=100 * (n + 1), revisions=1)
        revision = make_revision(run)
        step = make_step(revision, arguments={"q": "travel"}, arguments_hash="h")
        make_attempt(step, number=1, output={"documents": found})
        for i in range(1, 4 + n):   # B has one step more
            make_attempt(make_step(revision, index=i, capability="get_document", arguments={"id": i},
                                   arguments_hash=f"d{i}"), number=1, output={"id": i})
        runs.append(run)
    return runs


@pytest.mark.django_db
class TestRunCompareApi:
    def test_it_answers_the_comparison_documented_in_openapi(self, pair, viewer, api_for):
        from runs.api.compare import CompareOutput

        a, b = pair
        response = api_for(viewer).get(f"/api/runs/compare/?a={a.pk}&b={b.pk}")
        assert response.status_code == 200, response.content
        body = response.json()
        shape = CompareOutput(data=body)
        assert shape.is_valid(), shape.errors
        assert body["a"]["id"] == a.pk and body["b"]["id"] == b.pk
        assert body["summary"] == {"rows": 5, "matched": 4, "only_a": 0, "only_b": 1, "differing": 1}
        first = body["results"][0]
        assert first["match"] == "matched" and first["arguments"]["same"] is True
        assert first["outcome"]["same"] is False
        assert {"kind": "added", "text": '      "id": "POL-7"'} in first["outcome"]["lines"]
        assert first["a"]["last"]["label"] == "r1·s1#1"
        tokens = next(u for u in body["usage"] if u["name"] == "tokens")
        assert (tokens["a"], tokens["b"], tokens["delta"]) == (100, 200, 100)
        assert body["results"][-1]["match"] == "only_b"

    def test_it_pages_and_filters_the_rows(self, pair, viewer, api_for):
        a, b = pair
        api = api_for(viewer)
        body = api.get(f"/api/runs/compare/?a={a.pk}&b={b.pk}&page_size=2").json()
        assert (body["count"], body["pages"], len(body["results"])) == (5, 3, 2)
        assert body["previous"] is None and "page=2" in body["next"]
        last = api.get(body["next"].replace("page=2", "page=3")).json()
        assert [r["position"] for r in last["results"]] == [5] and last["next"] is None
        only = api.get(f"/api/runs/compare/?a={a.pk}&b={b.pk}&differences=true").json()
        assert [r["position"] for r in only["results"]] == [5] and only["summary"]["rows"] == 5

    @pytest.mark.parametrize("query,field", [
        ("", "a"), ("a=1", "b"), ("a=x&b=2", "a"), ("a=1&b=0", "b"), ("a=3&b=3", "b"), ("a=1&b=2&page=0", "page"),
        ("a=1&b=2&page_size=1000", "page_size"), ("a=1&b=2&differences=maybe", "differences"),
        ("a=1&b=2&run=3", "run"),
    ])
    def test_bad_input_is_a_400_naming_the_field(self, viewer, api_for, query, field):
        response = api_for(viewer).get(f"/api/runs/compare/?{query}")
        assert response.status_code == 400, response.content
        assert field in response.json()["error"]["fields"]

    def test_a_missing_run_is_a_404_naming_it(self, pair, viewer, api_for):
        a, _ = pair
        response = api_for(viewer).get(f"/api/runs/compare/?a=999999&b={a.pk}")
        assert response.status_code == 404
        assert response.json()["error"] == {"code": "not_found", "message": "There is no run #999999 (a)."}

    def test_only_people_who_may_view_runs_may_compare_them(self, pair, nobody, api_for):
        from rest_framework.test import APIClient

        a, b = pair
        assert APIClient().get(f"/api/runs/compare/?a={a.pk}&b={b.pk}").status_code in (401, 403)
        response = api_for(nobody).get(f"/api/runs/compare/?a={a.pk}&b={b.pk}")
        assert response.status_code == 403 and "runs.view_run" in response.json()["error"]["message"]

    def test_the_page_and_the_api_compare_alike(self, pair, viewer, api_for, client_for):
        a, b = pair
        body = api_for(viewer).get(f"/api/runs/compare/?a={a.pk}&b={b.pk}").json()
        html = client_for(viewer).get(f"/runs/compare/?a={a.pk}&b={b.pk}").content.decode()
        assert f"{body['summary']['matched']} matched" in html and f"{body['summary']['only_b']} only in B" in html
