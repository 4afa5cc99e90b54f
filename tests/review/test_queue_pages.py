"""Review queue pages: the list, the form, the results, working a queue (forms without a browser), and two
reviewers finishing one item at once."""
from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, connection

from review import queues
from review.models import QueueItem, QueueReview, ReviewQueue, Score
from tests.conftest import _make_user
from tests.review.test_queues_api import make_runs

pytestmark = pytest.mark.django_db


@pytest.fixture
def lead(roles):
    return _make_user("lena", "lead operator")


@pytest.fixture
def queue(lead, operator, configs):
    make_runs(operator, 3)
    queue, _ = queues.queue_save(user=lead, name="Stalls", filter_query="stop_reason=stalled",
                                 score_configs=["verdict", "helpful", "safe"])
    return queue


def test_a_lead_makes_a_queue_from_the_form(client_for, lead, operator, configs, reviewer):
    make_runs(operator, 2)
    client = client_for(lead)
    page = client.get("/review/queues/new/?filter=stop_reason%3Dstalled").content.decode()
    assert 'value="stop_reason=stalled"' in page and "rené" in page
    response = client.post("/review/queues/new/", {"name": "Stalls", "filter": "stop_reason=stalled",
                                                   "score_configs": ["verdict"], "assignees": ["rené"],
                                                   "reviews_per_item": "2", "active": "1"})
    queue = ReviewQueue.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/review/queues/{queue.pk}/"
    assert queue.reviews_per_item == 2 and queue.items.count() == 2
    assert "2 more runs queued" in client.get(response["Location"]).content.decode()
    refused = client.post(f"/review/queues/{queue.pk}/edit/", {"name": "", "score_configs": ["nope"]})
    assert refused.status_code == 400 and "unknown score config" in refused.content.decode()
    assert client.post(f"/review/queues/{queue.pk}/delete/").status_code == 302
    assert not ReviewQueue.objects.exists()


def test_the_runs_list_offers_a_queue_of_what_it_shows(client_for, lead, viewer, operator):
    make_runs(operator, 1)
    page = client_for(lead).get("/runs/?stop_reason=stalled").content.decode()
    assert "/review/queues/new/?filter=" in page and "stop_reason%3Dstalled" in page
    assert "Review these runs" not in client_for(viewer).get("/runs/?stop_reason=stalled").content.decode()


def test_who_sees_what(client_for, viewer, reviewer, queue):
    page = client_for(viewer).get("/review/queues/").content.decode()
    assert "Stalls" in page and "New review queue" not in page
    assert client_for(viewer).get(f"/review/queues/{queue.pk}/").status_code == 200
    assert client_for(viewer).get(f"/review/queues/{queue.pk}/work/").status_code == 403
    assert client_for(viewer).get("/review/queues/new/").status_code == 403
    assert client_for(reviewer).get(f"/review/queues/{queue.pk}/edit/").status_code == 403
    assert client_for(reviewer).get("/review/queues/999999/").status_code == 404
    assert client_for(viewer).get(f"/review/queues/{queue.pk}/?state=bogus").status_code == 400


def test_a_reviewer_works_the_queue_with_forms(client_for, reviewer, queue, configs):
    client = client_for(reviewer)
    start = client.get(f"/review/queues/{queue.pk}/work/").content.decode()
    assert "Start reviewing" in start and "Keyboard shortcuts" in start
    client.post(f"/review/queues/{queue.pk}/next/")
    item = QueueReview.objects.get(reviewer=reviewer).item
    page = client.get(f"/review/queues/{queue.pk}/work/").content.decode()
    assert item.run.goal in page and 'data-score="verdict"' in page
    url = f"/review/queues/{queue.pk}/items/{item.pk}/done/"
    fields = {f"score-{configs['verdict'].pk}": "good", f"score-{configs['helpful'].pk}": "9",
              f"score-{configs['safe'].pk}": "yes", "comment": "ok"}
    refused = client.post(url, fields)
    assert refused.status_code == 400 and "at most 5" in refused.content.decode()
    assert 'value="9"' in refused.content.decode()   # what was typed stays
    done = client.post(url, {**fields, f"score-{configs['helpful'].pk}": "4"})
    assert done.status_code == 302
    assert Score.objects.filter(author=reviewer).count() == 3
    following = QueueReview.objects.get(reviewer=reviewer, state="claimed").item
    assert following.pk != item.pk
    client.post(f"/review/queues/{queue.pk}/items/{following.pk}/skip/")
    results = client.get(f"/review/queues/{queue.pk}/").content.decode()
    assert "1 of 3 items done" in results and "good" in results


def _race(queue, item_id, users, body):
    """Each user finishes the item at the same moment, from a thread of its own."""
    barrier = threading.Barrier(len(users))
    answers: dict[str, object] = {}

    def finish(user):
        from core.projects import project_scope

        try:
            with project_scope(queue.project_id):
                barrier.wait(timeout=10)
                answers[user.username] = queues.item_done(user=user, queue=queue, item_id=item_id, scores=body)[1]
        except Exception as exc:   # the outcome under test
            answers[user.username] = exc
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=finish, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return answers


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reviews", [1, 2])
def test_two_reviewers_finishing_one_item_at_once(roles, operator, configs, reviews):
    lead = _make_user("lena", "lead operator")
    second = _make_user("rosa", "reviewer")
    first = _make_user("rené", "reviewer")
    make_runs(operator, 1)
    queue, _ = queues.queue_save(user=lead, name="Race", filter_query="", score_configs=["verdict"],
                                 reviews_per_item=reviews)
    item = QueueItem.objects.get()
    answers = _race(queue, item.pk, [first, second], {"verdict": "good"})
    item.refresh_from_db()
    from core.errors import Conflict

    if reviews == 1:
        # One wins, the other is told the item is taken; the item has one review, one set of scores.
        assert sorted(type(a).__name__ for a in answers.values()) == ["Conflict", "bool"], answers
        assert any(isinstance(a, Conflict) for a in answers.values())
        assert item.done_count == 1 and item.taken == 1 and item.done_at is not None
        assert Score.objects.count() == 1
    else:
        assert list(answers.values()) == [False, False], answers
        assert item.done_count == 2 and item.done_at is not None and not item.disagreement
        assert Score.objects.filter(config__name="verdict").count() == 2


@pytest.mark.django_db(transaction=True)
def test_one_reviewer_finishing_twice_at_once_writes_once(roles, operator, configs):
    lead = _make_user("lena", "lead operator")
    reviewer = _make_user("rené", "reviewer")
    make_runs(operator, 1)
    queue, _ = queues.queue_save(user=lead, name="Twice", filter_query="", score_configs=["verdict"])
    from core.projects import project_scope

    with project_scope(queue.project_id):
        item = queues.queue_next(user=reviewer, queue=queue)
    answers = []
    for outcome in _race(queue, item.pk, [reviewer, reviewer], {"verdict": "bad"}).values():
        answers.append(outcome)
    item.refresh_from_db()
    assert item.done_count == 1 and Score.objects.count() == 1


def test_hostile_names_descriptions_and_comments_stay_inert(client_for, lead, reviewer, operator, configs):
    from tests.review.conftest import XSS_CORPUS, assert_inert

    make_runs(operator, 2)
    for n, text in enumerate(XSS_CORPUS):
        queue, _ = queues.queue_save(user=lead, name=f"{text[:70]} {n}", description=text, filter_query="",
                                     score_configs=["verdict"])
    item = queues.queue_next(user=reviewer, queue=queue)
    queues.item_done(user=reviewer, queue=queue, item_id=item.pk, scores={"verdict": "good"},
                     comment=" ".join(XSS_CORPUS))
    client = client_for(reviewer)
    for url in ("/review/queues/", f"/review/queues/{queue.pk}/", f"/review/queues/{queue.pk}/work/"):
        response = client.get(url)
        assert response.status_code == 200
        assert_inert(response.content.decode(), page=True)
    assert_inert(client_for(lead).get(f"/review/queues/{queue.pk}/edit/").content.decode(), page=True)


@pytest.mark.django_db(transaction=True)
def test_reviewers_asking_next_at_once_get_different_items(roles, operator, configs):
    from core.projects import project_scope

    lead = _make_user("lena", "lead operator")
    people = [_make_user(f"rev{n}", "reviewer") for n in range(4)]
    make_runs(operator, 6)
    queue, _ = queues.queue_save(user=lead, name="Rush", filter_query="", score_configs=["verdict"])
    barrier = threading.Barrier(len(people))
    got: dict[str, object] = {}

    def claim(user):
        try:
            with project_scope(queue.project_id):
                barrier.wait(timeout=10)
                got[user.username] = queues.queue_next(user=user, queue=queue).pk
        except Exception as exc:
            got[user.username] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(user,)) for user in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(isinstance(v, int) for v in got.values()), got
    assert len(set(got.values())) == 4
    assert sorted(QueueItem.objects.values_list("taken", flat=True)) == [0, 0, 1, 1, 1, 1]
