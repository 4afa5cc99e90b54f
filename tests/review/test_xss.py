"""The hostile corpus through every text field the review app adds: never live markup on a page or in the API's html."""
from __future__ import annotations

import pytest

from review.markdown import markdown_html

pytestmark = pytest.mark.django_db

from .conftest import XSS_CORPUS, assert_inert  # noqa: E402


@pytest.mark.parametrize("text", XSS_CORPUS)
def test_markdown_renders_the_corpus_inert(text):
    assert_inert(markdown_html(text, mentions=["otto"]))
    assert_inert(markdown_html(f"**{text}** @otto `{text}`\n\n> {text}\n\n- [{text}](https://a.example/{text})"))


@pytest.mark.parametrize("text", XSS_CORPUS)
def test_every_field_shows_the_corpus_inert(api_for, client_for, registry_admin, reviewer, finished_run, attempt,
                                            text):
    admin = api_for(registry_admin)
    config = admin.post("/api/review/score-configs/", {"name": text[:60], "kind": "categorical",
                                                       "categories": [text[:60], "fine"], "description": text},
                        format="json")
    assert config.status_code == 201, config.json()
    assert admin.post("/api/review/root-causes/", {"name": text[:80], "description": text[:300]},
                      format="json").status_code == 201
    api = api_for(reviewer)
    run_url = f"/api/review/runs/{finished_run.pk}"
    assert api.post(f"{run_url}/scores/", {"config": text[:60], "value": text[:60], "comment": text}, format="json") \
        .status_code == 201
    assert api.post(f"{run_url}/scores/", {"config": text[:60], "value": "fine", "comment": text, "source": "code",
                                           "source_name": text[:80], "attempt": attempt.uid}, format="json") \
        .status_code == 201
    comment = api.post(f"{run_url}/annotations/", {"body": text, "attempt": attempt.uid}, format="json")
    api.post(f"{run_url}/annotations/", {"body": f"{text} @otto"}, format="json")
    incident = api.put(f"{run_url}/incident/", {"root_cause": text[:80], "summary": text}, format="json")
    assert incident.status_code == 200, incident.json()
    assert api.put(f"{run_url}/incident/", {"links": [text]}, format="json").status_code == 400
    assert api.put(f"{run_url}/incident/", {"owner": text}, format="json").status_code == 400
    assert_inert(comment.json()["html"])
    assert_inert(incident.json()["html"])
    client = client_for(reviewer)
    for page in (f"/review/runs/{finished_run.pk}/", f"/review/runs/{finished_run.pk}/?attempt={attempt.uid}",
                 "/review/settings/"):
        body = client.get(page, HTTP_HX_REQUEST="true").content.decode()
        # The panel and the settings page have no scripts or handlers of their own: any would be the corpus.
        assert_inert(body, page=True)
        assert ("<" not in text) or text not in body


@pytest.mark.parametrize("html", ['<img src="x">', '<a href=" javascript:alert(1)">x</a>', '<p onclick="x">y</p>',
                                  '<span style="color:red">x</span>', "<details open>"])
def test_the_check_itself_sees_live_markup(html):
    with pytest.raises(AssertionError):
        assert_inert(html)
