"""Review queues over the API: every endpoint, what it answers, what it refuses and who may."""
from __future__ import annotations

import csv
import io
import itertools
import json

import pytest
from django.utils import timezone

from core.models import AuditEvent
from review import queues
from review.models import Annotation, QueueItem, QueueReview, ReviewQueue, Score
from runs.models import Run
from tests.conftest import _make_user

pytestmark = pytest.mark.django_db
_seq = itertools.count(1)


def make_runs(owner, n, *, status="stopped", stop_reason="stalled", finished=True, **extra):
    now = timezone.now()
    return [Run.objects.create(goal=f"Queue goal {next(_seq)}", completion={}, budgets={}, planner="scripted",
                               owner=owner, status=status, stop_reason=stop_reason if finished else "",
                               trace_id=f"q{next(_seq):031d}", started_at=now,
                               finished_at=now if finished else None, **extra) for _ in range(n)]


@pytest.fixture
def lead(roles):
    return _make_user("lena", "lead operator")


@pytest.fixture
def second_reviewer(roles):
    return _make_user("rosa", "reviewer")


@pytest.fixture
def queue(lead, operator, configs):
    make_runs(operator, 3)
    make_runs(operator, 1, status="completed", stop_reason="completed")
    queue, queued = queues.queue_save(user=lead, name="Stalls", filter_query="stop_reason=stalled",
                                      score_configs=["verdict", "helpful"])
    assert queued == 3
    return queue


def _url(queue, rest=""):
    return f"/api/review/queues/{queue.pk}/{rest}"


GOOD = {"verdict": "good", "helpful": 4}


class TestQueueCrud:
    def test_a_lead_creates_a_queue_of_the_runs_its_filter_matches(self, api_for, lead, operator, configs):
        make_runs(operator, 2)
        make_runs(operator, 1, stop_reason="completed", status="completed")
        make_runs(operator, 1, finished=False, status="running")   # queued when it finishes
        response = api_for(lead).post("/api/review/queues/", {
            "name": "Stalled runs", "filter": "?stop_reason=stalled&page=3", "score_configs": ["verdict", "safe"],
            "reviews_per_item": 2, "description": "Look at why"}, format="json")
        assert response.status_code == 201, response.json()
        body = response.json()
        assert body["queued"] == 2 and body["progress"] == {"total": 2, "done": 0, "open": 2, "disagreements": 0,
                                                            "mine": 0}
        assert "stop_reason=stalled" in body["filter"] and body["score_configs"] == ["safe", "verdict"]
        assert AuditEvent.objects.filter(action="review_queue.saved", target_id=str(body["id"])).exists()

    def test_it_lists_shows_edits_and_deletes(self, api_for, lead, viewer, queue, operator):
        assert [q["name"] for q in api_for(viewer).get("/api/review/queues/").json()] == ["Stalls"]
        assert api_for(viewer).get(_url(queue)).json()["progress"]["total"] == 3
        make_runs(operator, 2, stop_reason="cancelled", status="cancelled")
        edited = api_for(lead).put(_url(queue), {"name": "Stalls and cancels", "filter": "status=stopped",
                                                 "score_configs": ["verdict"]}, format="json")
        assert edited.status_code == 200, edited.json()
        # Editing the filter queues what it now matches besides; nothing queued is taken out.
        assert edited.json()["progress"]["total"] == 3 and edited.json()["queued"] == 0
        edited = api_for(lead).put(_url(queue), {"name": "Stalls and cancels", "filter": "",
                                                 "score_configs": ["verdict"]}, format="json")
        assert edited.json()["queued"] == 3 and edited.json()["progress"]["total"] == 6
        assert api_for(lead).delete(_url(queue)).status_code == 204
        assert not QueueItem.objects.exists()
        assert AuditEvent.objects.filter(action="review_queue.deleted").exists()

    @pytest.mark.parametrize("body, field", [
        ({"name": "", "score_configs": ["verdict"]}, "name"),
        ({"name": "x", "score_configs": []}, "score_configs"),
        ({"name": "x", "score_configs": ["nope"]}, "score_configs"),
        ({"name": "x", "score_configs": ["cost"]}, "score_configs"),          # the runtime's
        ({"name": "x", "score_configs": ["verdict", "verdict"]}, "score_configs"),
        ({"name": "x", "score_configs": "verdict"}, "score_configs"),
        ({"name": "x", "score_configs": ["verdict"], "filter": "colour=red"}, "filter"),
        ({"name": "x", "score_configs": ["verdict"], "filter": "status=bogus"}, "filter"),
        ({"name": "x", "score_configs": ["verdict"], "reviews_per_item": 3}, "reviews_per_item"),
        ({"name": "x", "score_configs": ["verdict"], "reviews_per_item": "two"}, "reviews_per_item"),
        ({"name": "x", "score_configs": ["verdict"], "assignees": ["ghost"]}, "assignees"),
        ({"name": "x", "score_configs": ["verdict"], "assignees": ["vera"]}, "assignees"),   # a viewer
        ({"name": "x", "score_configs": ["verdict"], "colour": "red"}, "colour"),
        ({"name": "Stalls", "score_configs": ["verdict"]}, "name"),
    ])
    def test_bad_input_is_a_400_naming_the_field(self, api_for, lead, viewer, queue, body, field):
        response = api_for(lead).post("/api/review/queues/", body, format="json")
        assert response.status_code == 400, response.json()
        assert field in response.json()["error"]["fields"], response.json()

    def test_a_disabled_config_is_refused_and_a_config_in_a_queue_is_not_deleted(self, api_for, lead, registry_admin,
                                                                                 queue, configs):
        configs["safe"].enabled = False
        configs["safe"].save()
        response = api_for(lead).post("/api/review/queues/", {"name": "x", "score_configs": ["safe"]}, format="json")
        assert response.status_code == 400
        deleted = api_for(registry_admin).delete(f"/api/review/score-configs/{configs['verdict'].pk}/")
        assert deleted.status_code == 409 and "Stalls" in deleted.json()["error"]["message"]

    def test_who_may_manage_and_who_may_read(self, api_for, reviewer, viewer, operator, registry_admin, queue, nobody):
        body = {"name": "mine", "score_configs": ["verdict"]}
        for user in (reviewer, viewer, operator):
            assert api_for(user).post("/api/review/queues/", body, format="json").status_code == 403
            assert api_for(user).delete(_url(queue)).status_code == 403
        assert api_for(registry_admin).post("/api/review/queues/", body, format="json").status_code == 201
        assert api_for(viewer).get(_url(queue, "items/")).status_code == 200
        assert api_for(viewer).post(_url(queue, "next/")).status_code == 403
        assert api_for(nobody).get("/api/review/queues/").status_code == 403

    def test_an_unknown_queue_or_item_is_a_404(self, api_for, reviewer, queue):
        api = api_for(reviewer)
        assert api.get("/api/review/queues/999999/").status_code == 404
        assert api.post("/api/review/queues/999999/next/").status_code == 404
        assert api.post(_url(queue, "items/999999/done/"), {"scores": GOOD}, format="json").status_code == 404
        assert api.post(_url(queue, "items/999999/skip/")).status_code == 404


class TestWorkingAQueue:
    def test_next_done_and_progress(self, api_for, reviewer, queue):
        api = api_for(reviewer)
        first = api.post(_url(queue, "next/"))
        assert first.status_code == 200 and first.json()["state"] == "in review"
        assert api.post(_url(queue, "next/")).json()["id"] == first.json()["id"]   # held: the same again
        done = api.post(_url(queue, f"items/{first.json()['id']}/done/"),
                        {"scores": GOOD, "comment": "Looks **fine**"}, format="json")
        assert done.status_code == 200, done.json()
        body = done.json()
        assert body["state"] == "done" and body["already_done"] is False
        assert body["reviews"][0]["scores"] == {"verdict": "good", "helpful": 4.0}
        assert body["reviews"][0]["comment"] == "Looks **fine**"
        # Ordinary scores and a comment on the run: the trace and the scores API show them.
        run_id = body["run"]
        assert {s.config.name for s in Score.objects.filter(run_id=run_id, author=reviewer)} == {"verdict", "helpful"}
        assert Annotation.objects.get(run_id=run_id).body == "Looks **fine**"
        assert api.get(f"/api/review/runs/{run_id}/scores/?source=person").json()["count"] == 2
        # Finishing again writes nothing and says so.
        again = api.post(_url(queue, f"items/{body['id']}/done/"), {"scores": {"verdict": "bad", "helpful": 1}},
                         format="json")
        assert again.status_code == 200 and again.json()["already_done"] is True
        assert Score.objects.get(run_id=run_id, config__name="verdict", author=reviewer).category == "good"
        assert api.get(_url(queue)).json()["progress"] == {"total": 3, "done": 1, "open": 2, "disagreements": 0,
                                                           "mine": 1}

    def test_two_reviewers_never_hold_the_same_item(self, api_for, reviewer, second_reviewer, queue):
        a = api_for(reviewer).post(_url(queue, "next/")).json()["id"]
        b = api_for(second_reviewer).post(_url(queue, "next/")).json()["id"]
        assert a != b
        # Rosa cannot finish René's item: its one review is his.
        taken = api_for(second_reviewer).post(_url(queue, f"items/{a}/done/"), {"scores": GOOD}, format="json")
        assert taken.status_code == 409 and "nothing was saved" in taken.json()["error"]["message"]
        assert not Score.objects.filter(author=second_reviewer).exists()

    def test_skip_passes_the_item_on_and_the_queue_runs_out(self, api_for, reviewer, queue):
        api = api_for(reviewer)
        seen = []
        while (response := api.post(_url(queue, "next/"))).status_code == 200:
            seen.append(response.json()["id"])
            assert api.post(_url(queue, f"items/{seen[-1]}/skip/")).status_code == 200
        assert response.status_code == 204 and len(seen) == 3 == len(set(seen))
        assert QueueItem.objects.filter(taken=0).count() == 3   # back for others

    def test_four_eyes_two_reviews_and_disagreement(self, api_for, lead, reviewer, second_reviewer, queue):
        api_for(lead).put(_url(queue), {"name": "Stalls", "filter": "stop_reason=stalled",
                                        "score_configs": ["verdict", "helpful"], "reviews_per_item": 2}, format="json")
        a = api_for(reviewer).post(_url(queue, "next/")).json()["id"]
        b = api_for(second_reviewer).post(_url(queue, "next/")).json()["id"]
        assert a == b   # four-eyes: both review the oldest item
        first = api_for(reviewer).post(_url(queue, f"items/{a}/done/"), {"scores": GOOD}, format="json").json()
        assert first["state"] == "in review"
        second = api_for(second_reviewer).post(_url(queue, f"items/{a}/done/"),
                                               {"scores": {"verdict": "bad", "helpful": 4}}, format="json").json()
        assert second["state"] == "done" and second["disagreement"] is True
        listed = api_for(reviewer).get(_url(queue, "items/?state=disagreement")).json()
        assert listed["count"] == 1
        assert sorted(r["scores"]["verdict"] for r in listed["results"][0]["reviews"]) == ["bad", "good"]

    def test_assignees_only(self, api_for, lead, reviewer, second_reviewer, queue):
        api_for(lead).put(_url(queue), {"name": "Stalls", "filter": "stop_reason=stalled",
                                        "score_configs": ["verdict"], "assignees": ["rosa"]}, format="json")
        assert api_for(reviewer).post(_url(queue, "next/")).status_code == 403
        assert api_for(second_reviewer).post(_url(queue, "next/")).status_code == 200

    @pytest.mark.parametrize("body, field", [
        ({"scores": {"verdict": "splendid", "helpful": 4}}, "scores.verdict"),
        ({"scores": {"verdict": "good", "helpful": 9}}, "scores.helpful"),
        ({"scores": {"verdict": "good", "helpful": "4"}}, "scores.helpful"),
        ({"scores": {"verdict": "good", "helpful": 4, "safe": True}}, "scores.safe"),   # not the queue's
        ({"scores": {"verdict": "good"}}, "scores"),
        ({"scores": ["good"]}, "scores"),
        ({"scores": GOOD, "comment": ["x"]}, "comment"),
        ({"scores": GOOD, "extra": 1}, "extra"),
    ])
    def test_bad_scores_are_a_400_and_nothing_is_written(self, api_for, reviewer, queue, body, field):
        api = api_for(reviewer)
        item = api.post(_url(queue, "next/")).json()["id"]
        response = api.post(_url(queue, f"items/{item}/done/"), body, format="json")
        assert response.status_code == 400, response.json()
        assert field in response.json()["error"]["fields"], response.json()
        assert not Score.objects.filter(author=reviewer).exists()
        assert QueueReview.objects.get(reviewer=reviewer).state == "claimed"

    def test_a_config_changed_while_items_are_queued(self, api_for, reviewer, queue, configs):
        api = api_for(reviewer)
        item = api.post(_url(queue, "next/")).json()["id"]
        configs["verdict"].categories = ["fine", "broken"]
        configs["verdict"].save()
        refused = api.post(_url(queue, f"items/{item}/done/"), {"scores": GOOD}, format="json")
        assert refused.status_code == 400 and "fine, broken" in refused.json()["error"]["message"]
        configs["helpful"].enabled = False
        configs["helpful"].save()
        done = api.post(_url(queue, f"items/{item}/done/"), {"scores": {"verdict": "fine"}}, format="json")
        assert done.status_code == 200, done.json()
        refused = api.post(_url(queue, f"items/{item}/done/"), {"scores": {"verdict": "fine", "helpful": 3}},
                           format="json")
        assert refused.status_code == 400   # checked before anything else: disabled

    def test_a_deleted_run_leaves_the_queue_and_its_other_results(self, api_for, reviewer, queue):
        api = api_for(reviewer)
        item = api.post(_url(queue, "next/")).json()
        api.post(_url(queue, f"items/{item['id']}/done/"), {"scores": GOOD}, format="json")
        claimed = api.post(_url(queue, "next/")).json()
        Run.objects.filter(pk=claimed["run"]).delete()
        assert api.post(_url(queue, f"items/{claimed['id']}/done/"), {"scores": GOOD}, format="json").status_code == 404
        assert api.get(_url(queue)).json()["progress"] == {"total": 2, "done": 1, "open": 1, "disagreements": 0,
                                                           "mine": 1}
        assert api.post(_url(queue, "next/")).status_code == 200

    def test_a_lapsed_claim_goes_to_another_reviewer(self, api_for, reviewer, second_reviewer, queue):
        lapse = timezone.now() - timezone.timedelta(minutes=queues.CLAIM_MINUTES + 1)
        first = api_for(reviewer).post(_url(queue, "next/")).json()["id"]
        QueueReview.objects.update(claimed_at=lapse)
        # The lapsed claim went back: Rosa gets the oldest item, and René's late finish is refused.
        assert api_for(second_reviewer).post(_url(queue, "next/")).json()["id"] == first
        late = api_for(reviewer).post(_url(queue, f"items/{first}/done/"), {"scores": GOOD}, format="json")
        assert late.status_code == 409 and not Score.objects.filter(author=reviewer).exists()
        # A lapsed claim nobody took is still his to finish.
        second = api_for(reviewer).post(_url(queue, "next/")).json()["id"]
        QueueReview.objects.filter(reviewer=reviewer, item_id=second).update(claimed_at=lapse)
        api_for(second_reviewer).post(_url(queue, f"items/{first}/skip/"))
        assert api_for(reviewer).post(_url(queue, f"items/{second}/done/"), {"scores": GOOD},
                                      format="json").status_code == 200


class TestFilling:
    def test_a_run_finishing_later_is_queued_when_the_filter_matches(self, operator, queue):
        from runs.signals import run_finished

        later = make_runs(operator, 1, finished=False, status="running")[0]
        other = make_runs(operator, 1, status="completed", stop_reason="completed")[0]
        Run.objects.filter(pk=later.pk).update(status="stopped", stop_reason="stalled", finished_at=timezone.now())
        run_finished.send(sender=None, run_id=later.pk)
        run_finished.send(sender=None, run_id=later.pk)   # delivered twice: queued once
        run_finished.send(sender=None, run_id=other.pk)
        assert set(queue.items.values_list("run_id", flat=True)) >= {later.pk}
        assert queue.items.count() == 4 and not queue.items.filter(run=other).exists()

    def test_an_inactive_queue_takes_no_new_runs(self, lead, operator, queue):
        from runs.signals import run_finished

        ReviewQueue.objects.filter(pk=queue.pk).update(active=False)
        run = make_runs(operator, 1)[0]
        run_finished.send(sender=None, run_id=run.pk)
        assert queue.items.count() == 3


class TestResults:
    def test_items_and_exports(self, api_for, reviewer, viewer, queue):
        api = api_for(reviewer)
        item = api.post(_url(queue, "next/")).json()["id"]
        api.post(_url(queue, f"items/{item}/done/"), {"scores": {"verdict": "good", "helpful": 5},
                                                      "comment": "=HYPERLINK(\"x\")"}, format="json")
        page = api_for(viewer).get(_url(queue, "items/?state=done")).json()
        assert page["count"] == 1 and page["results"][0]["reviews"][0]["reviewer"] == "rené"
        assert api_for(viewer).get(_url(queue, "items/?state=bogus")).status_code == 400
        assert api_for(viewer).get(_url(queue, f"items/{item}/")).json()["state"] == "done"
        response = api_for(viewer).get(_url(queue, "export/"))
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
        assert len(rows) == 3
        done = next(r for r in rows if r["item_state"] == "done")
        assert done["verdict"] == "good" and done["helpful"] == "5.0" and done["reviewer"] == "rené"
        assert done["comment"].startswith("'=")   # no formula in a spreadsheet
        response = api_for(viewer).get(_url(queue, "export/?file=json"))
        items = json.loads(b"".join(response.streaming_content))
        assert len(items) == 3 and sum(1 for i in items if i["state"] == "done") == 1
        assert api_for(viewer).get(_url(queue, "export/?file=xml")).status_code == 400


class TestStaleFilter:
    def test_a_filter_naming_someone_gone_is_skipped_not_fatal(self, lead, operator, configs, caplog):
        from runs.signals import run_finished

        queue, _ = queues.queue_save(user=lead, name="Otto's", filter_query="owner=otto", score_configs=["verdict"])
        operator.is_active = False
        operator.save()
        run = make_runs(lead, 1)[0]
        run_finished.send(sender=None, run_id=run.pk)
        assert queue.items.count() == 0 and "no longer applies" in caplog.text


def test_an_item_gone_under_the_service_is_a_409(reviewer, queue):
    from core.errors import Conflict

    item = queues.queue_next(user=reviewer, queue=queue)
    Run.objects.filter(pk=item.run_id).delete()
    for call in (lambda: queues.item_done(user=reviewer, queue=queue, item_id=item.pk, scores=GOOD),
                 lambda: queues.item_skip(user=reviewer, queue=queue, item_id=item.pk)):
        with pytest.raises(Conflict, match="no longer in the queue"):
            call()
