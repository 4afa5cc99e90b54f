"""Review queues: a saved runs-list filter whose finished runs reviewers work through, one "next" at a time.

Filling. The filter is the runs list's (runs.filters.filters_from_query, the same as a bulk action's):
saving a queue queues every finished run it matches in one INSERT ... SELECT, and, while the queue is
active, a run that finishes later is queued by the run_finished signal (sent once the finish has
committed) when the filter matches it. Editing the filter queues what it now matches besides; it
never takes items out.

Claiming. `queue_next` hands a reviewer the oldest item that still wants a review and that they have
not reviewed or skipped: a conditional UPDATE (`taken < reviews per item`) is the arbiter, so two
reviewers never hold the same item unless the queue asks for two reviews (four-eyes); on PostgreSQL
the candidate is read FOR UPDATE SKIP LOCKED (one row) so concurrent reviewers do not queue up on one
row, and when every candidate is locked the conditional UPDATE waits and decides. A
reviewer holding a claim gets it again; a claim untouched for CLAIM_MINUTES is released to others.

Finishing. `item_done` writes the reviewer's scores as ordinary scores (review.services.score_set: the
trace and the API show them) and the comment as a comment on the run. The reviewer's claim turning
`done` (a conditional UPDATE again) decides: a second finish of the same review writes nothing and
says so; a reviewer whose claim lapsed and was taken by someone else is refused (409) with nothing
written. Four-eyes: the item is done when both reviews are, and `disagreement` records whether their
scores differ.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Prefetch, Q, QuerySet
from django.utils import timezone

from core.audit import audit
from core.errors import Conflict, FieldErrors, InvalidInput, NotAllowed
from core.models import AuditAction
from core.permissions import allowed, require
from core.projects import project_scope
from core.roles import MANAGE_QUEUES, REVIEW_RUNS
from review.models import QueueItem, QueueReview, QueueReviewState, ReviewQueue, Score, ScoreConfig, ScoreSource
from review.scoring import score_value, value_problem
from review.services import _refuse, _text, annotation_add, score_set
from runs.filters import filters_from_query
from runs.models import Run
from runs.selectors import run_list

log = logging.getLogger(__name__)

CLAIM_MINUTES = 30
MAX_CONFIGS = 10
MAX_ASSIGNEES = 100
_CANDIDATES = 8   # items read per claim attempt: a reviewer who loses one race takes the next


# -- queues ----------------------------------------------------------------------------------------

def _configs(errors: FieldErrors, names: Any) -> list[ScoreConfig]:
    if not isinstance(names, list) or not 1 <= len(names) <= MAX_CONFIGS or \
            any(not isinstance(n, str) for n in names) or len(set(names)) != len(names):
        errors.add("score_configs", f"1-{MAX_CONFIGS} score config names, each once")
        return []
    found = {c.name: c for c in ScoreConfig.objects.filter(name__in=names)}
    configs = []
    for name in names:
        config = found.get(name)
        if config is None:
            errors.add("score_configs", f"unknown score config {name[:60]!r}")
        elif config.builtin:
            errors.add("score_configs", f"{name} is written by the runtime, not by reviewers")
        elif not config.enabled:
            errors.add("score_configs", f"{name} is disabled")
        else:
            configs.append(config)
    return configs


def _assignees(errors: FieldErrors, names: Any) -> list:
    if not isinstance(names, list) or len(names) > MAX_ASSIGNEES or any(not isinstance(n, str) for n in names):
        errors.add("assignees", f"a list of at most {MAX_ASSIGNEES} usernames")
        return []
    users = {u.get_username(): u for u in get_user_model().objects.filter(username__in=names, is_active=True)}
    chosen = []
    for name in dict.fromkeys(names):
        user = users.get(name)
        if user is None:
            errors.add("assignees", f"no active user {name[:60]!r}")
        elif not allowed(user, REVIEW_RUNS):
            errors.add("assignees", f"{name} may not review runs in this project (give them the reviewer role)")
        else:
            chosen.append(user)
    return chosen


def _queue_fields(queue: ReviewQueue) -> dict[str, Any]:
    return {"name": queue.name, "description": queue.description[:500], "filter": queue.filter_query,
            "score_configs": sorted(c.name for c in queue.score_configs.all()),
            "assignees": sorted(u.get_username() for u in queue.assignees.all()),
            "reviews_per_item": queue.reviews_per_item, "active": queue.active}


@transaction.atomic
def queue_save(*, user, name: str, filter_query: str, score_configs: list[str], description: str = "",
               assignees: list[str] | None = None, reviews_per_item: int = 1, active: bool = True,
               queue_id: int | None = None) -> tuple[ReviewQueue, int]:
    """Create or change a queue and queue the finished runs its filter matches. Returns (queue, runs queued now)."""
    require(user, MANAGE_QUEUES, "manage review queues")
    errors = FieldErrors()
    name = _text(errors, "name", name, max_chars=80, required=True)
    _text(errors, "description", description, max_chars=2000)
    query = ""
    try:
        _filters, query = filters_from_query(filter_query)
    except InvalidInput as exc:
        errors.add("filter", exc.fields.get("query") or exc.message)
    configs = _configs(errors, score_configs)
    people = _assignees(errors, [] if assignees is None else assignees)
    if reviews_per_item not in (1, 2) or isinstance(reviews_per_item, bool):
        errors.add("reviews_per_item", "1, or 2 for four-eyes")
    if not isinstance(active, bool):
        errors.add("active", "true or false")
    if not errors and ReviewQueue.objects.filter(name=name).exclude(pk=queue_id or 0).exists():
        errors.add("name", "another queue has this name")
    _refuse(errors, "review queue")
    queue = ReviewQueue.objects.select_for_update().get(pk=queue_id) if queue_id else ReviewQueue(created_by=user)
    before = _queue_fields(queue) if queue_id else None
    queue.name, queue.description, queue.filter_query = name, description, query
    queue.reviews_per_item, queue.active = reviews_per_item, active
    queue.save()
    queue.score_configs.set(configs)
    queue.assignees.set(people)
    if before is not None and reviews_per_item < before["reviews_per_item"]:
        # One review is now enough: items that have it are done (four-eyes turned off).
        QueueItem.objects.filter(queue=queue, done_at__isnull=True, done_count__gte=reviews_per_item).update(
            done_at=timezone.now())
    queued = queue_fill(queue)
    audit(actor=user, action=AuditAction.REVIEW_QUEUE_SAVED, target=queue, summary=f"Review queue {name} saved",
          details={"before": before, "after": _queue_fields(queue), "queued": queued})
    return queue, queued


@transaction.atomic
def queue_delete(*, user, queue_id: int) -> None:
    """Delete a queue and its items; the scores and comments its reviewers gave stay on their runs."""
    require(user, MANAGE_QUEUES, "manage review queues")
    queue = ReviewQueue.objects.select_for_update().get(pk=queue_id)
    audit(actor=user, action=AuditAction.REVIEW_QUEUE_DELETED, target=queue,
          summary=f"Review queue {queue.name} deleted",
          details={**_queue_fields(queue), "items": queue.items.count(), "done": queue.items.filter(
              done_at__isnull=False).count()})
    queue.delete()


def _matching(queue: ReviewQueue):
    """The finished runs of the queue's project its filter matches (the runs list's query, unordered)."""
    filters, _ = filters_from_query(queue.filter_query)
    with project_scope(queue.project_id):
        return run_list(filters=filters).filter(finished_at__isnull=False).order_by()


def queue_fill(queue: ReviewQueue) -> int:
    """Queue every finished run the filter matches that is not queued yet: one INSERT ... SELECT."""
    runs_sql, params = _matching(queue).annotate(matched_run=F("pk")).values("matched_run").query.sql_with_params()
    item = QueueItem._meta
    now = timezone.now()
    # WHERE true: SQLite reads "SELECT ... ON CONFLICT" ambiguously without a WHERE.
    sql = (f"INSERT INTO {item.db_table} (queue_id, run_id, taken, done_count, disagreement, created_at) "
           f"SELECT %s, matched.matched_run, 0, 0, %s, %s FROM ({runs_sql}) matched WHERE true "
           f"ON CONFLICT (queue_id, run_id) DO NOTHING")
    with connection.cursor() as cursor:
        cursor.execute(sql, [queue.pk, False, now, *params])
        return max(cursor.rowcount, 0)


def queue_run_finished(*, run_id: int) -> int:
    """Queue a run that has just finished in each active queue of its project whose filter matches it."""
    run = Run.objects.filter(pk=run_id, finished_at__isnull=False).only("pk", "project_id").first()
    if run is None:
        return 0
    queued = 0
    with project_scope(run.project_id):
        for queue in ReviewQueue.objects.filter(active=True):
            try:
                matches = _matching(queue).filter(pk=run.pk).exists()
            except InvalidInput as exc:   # a filter naming what is gone since (a user, a capability)
                log.warning("review queue %s: its filter no longer applies (%s)", queue.pk, exc.message)
                continue
            if matches:
                _item, created = QueueItem.objects.get_or_create(queue=queue, run=run)
                queued += created
    return queued


def on_run_finished(sender, *, run_id: int, **kwargs) -> None:
    """runs.signals.run_finished."""
    try:
        queue_run_finished(run_id=run_id)
    except Exception:  # a queue is never worth failing the worker that finished the run
        log.exception("could not queue run %s for review", run_id)


# -- working a queue -------------------------------------------------------------------------------

def may_work(user, queue: ReviewQueue) -> bool:
    if not allowed(user, REVIEW_RUNS):
        return False
    assigned = list(queue.assignees.values_list("pk", flat=True))
    return not assigned or user.pk in assigned


def _require_work(user, queue: ReviewQueue) -> None:
    require(user, REVIEW_RUNS, "review runs")
    if not may_work(user, queue):
        raise NotAllowed(f"The queue {queue.name} is assigned to other reviewers.")


def _release_stale_claims(queue: ReviewQueue) -> None:
    """Claims nobody finished within CLAIM_MINUTES go back to the queue (their reviewer may claim again)."""
    cutoff = timezone.now() - timedelta(minutes=CLAIM_MINUTES)
    stale = QueueReview.objects.filter(item__queue=queue, state=QueueReviewState.CLAIMED, claimed_at__lt=cutoff)
    for review in stale.values("pk", "item_id", "claimed_at")[:100]:
        with transaction.atomic():
            deleted, _ = QueueReview.objects.filter(pk=review["pk"], state=QueueReviewState.CLAIMED,
                                                    claimed_at=review["claimed_at"]).delete()
            if deleted:
                QueueItem.objects.filter(pk=review["item_id"]).update(taken=F("taken") - 1)


def _claim(item_id: int, queue: ReviewQueue, user, review: QueueReview | None = None) -> bool:
    """Take a place on the item for `user` (in the caller's transaction): False when none is left."""
    won = QueueItem.objects.filter(pk=item_id, queue=queue, done_at__isnull=True,
                                   taken__lt=queue.reviews_per_item).update(taken=F("taken") + 1)
    if not won:
        return False
    now = timezone.now()
    if review is None:
        QueueReview.objects.create(item_id=item_id, reviewer=user, state=QueueReviewState.CLAIMED, claimed_at=now)
    else:
        QueueReview.objects.filter(pk=review.pk).update(state=QueueReviewState.CLAIMED, claimed_at=now)
    return True


def held_item(user, queue: ReviewQueue) -> QueueItem | None:
    """The item the reviewer has claimed in the queue and not finished, if any."""
    held = QueueReview.objects.filter(item__queue=queue, reviewer=user, state=QueueReviewState.CLAIMED) \
        .order_by("claimed_at").values_list("item_id", flat=True).first()
    return None if held is None else QueueItem.objects.select_related("run").filter(pk=held).first()


def open_for(user, queue: ReviewQueue) -> QuerySet[QueueItem]:
    """The items the reviewer could claim now: not done, a review still free, not reviewed or skipped by them."""
    mine = QueueReview.objects.filter(reviewer=user, item__queue=queue).values("item_id")
    return QueueItem.objects.filter(queue=queue, done_at__isnull=True,
                                    taken__lt=queue.reviews_per_item).exclude(pk__in=mine)


def queue_next(*, user, queue: ReviewQueue) -> QueueItem | None:
    """The item the reviewer works now: the one they hold, else a newly claimed one; None when none is left."""
    _require_work(user, queue)
    held = held_item(user, queue)
    if held is not None:
        QueueReview.objects.filter(item=held, reviewer=user).update(claimed_at=timezone.now())
        return held
    _release_stale_claims(queue)
    skip_locked = connection.features.has_select_for_update_skip_locked
    for _round in range(20):
        with transaction.atomic():
            candidates = open_for(user, queue).order_by("id")
            ids: list[int] = []
            if skip_locked:   # one row, locked: concurrent reviewers each lock a different one
                ids = list(candidates.select_for_update(skip_locked=True).values_list("pk", flat=True)[:1])
            if not ids:       # none unlocked (or no SKIP LOCKED): the conditional UPDATE decides, waiting if it must
                ids = list(candidates.values_list("pk", flat=True)[:_CANDIDATES])
            if not ids:
                return None
            for item_id in ids:
                try:
                    with transaction.atomic():
                        if _claim(item_id, queue, user):
                            return QueueItem.objects.select_related("run").get(pk=item_id)
                except IntegrityError:   # the same reviewer claiming from two tabs at once
                    continue
    raise Conflict("Other reviewers are taking every item at once: try again.")


def _queued(queue: ReviewQueue, item_id: int) -> QueueItem:
    item = QueueItem.objects.select_related("run").filter(pk=item_id, queue=queue).first()
    if item is None:   # the pages and the API answer 404 first; this is a run deleted meanwhile
        raise Conflict("This item is no longer in the queue (its run was deleted): take the next item.")
    return item


def _review_of(item: QueueItem, user) -> QueueReview | None:
    return QueueReview.objects.select_for_update().filter(item=item, reviewer=user).first()


@transaction.atomic
def item_skip(*, user, queue: ReviewQueue, item_id: int) -> QueueItem:
    """Pass the item to other reviewers: it is not offered to this one again."""
    _require_work(user, queue)
    item = _queued(queue, item_id)
    review = _review_of(item, user)
    if review is None:
        QueueReview.objects.create(item=item, reviewer=user, state=QueueReviewState.SKIPPED,
                                   claimed_at=timezone.now(), finished_at=timezone.now())
    elif review.state == QueueReviewState.DONE:
        raise Conflict("You have reviewed this item already: it cannot be skipped.")
    elif QueueReview.objects.filter(pk=review.pk, state=QueueReviewState.CLAIMED).update(
            state=QueueReviewState.SKIPPED, finished_at=timezone.now()):
        QueueItem.objects.filter(pk=item.pk).update(taken=F("taken") - 1)
    item.refresh_from_db()
    return item


def _values(queue: ReviewQueue, scores: Any) -> dict[ScoreConfig, Any]:
    """The reviewer's scores, checked against the queue's configs as they are now."""
    if not isinstance(scores, dict):
        raise InvalidInput("scores must be an object: score config name to value.", fields={"scores": "an object"})
    configs = {c.name: c for c in queue.score_configs.all()}
    errors = FieldErrors()
    values = {}
    for name, value in scores.items():
        config = configs.get(name)
        if config is None:
            errors.add(f"scores.{str(name)[:60]}", "not a score config of this queue")
        elif not config.enabled:
            errors.add(f"scores.{name}", "disabled since the queue was set up: leave it out")
        else:
            problem = value_problem(config, value)
            if problem:
                errors.add(f"scores.{name}", problem)
            else:
                values[config] = value
    missing = sorted(name for name, c in configs.items() if c.enabled and name not in scores)
    if missing:
        errors.add("scores", f"give every score of the queue; missing: {', '.join(missing)}")
    _refuse(errors, "review")
    return values


@transaction.atomic
def item_done(*, user, queue: ReviewQueue, item_id: int, scores: Any, comment: str = "") -> tuple[QueueItem, bool]:
    """Finish the reviewer's review of an item: their scores, their comment. Returns (item, already done before)."""
    _require_work(user, queue)
    errors = FieldErrors()
    comment = _text(errors, "comment", comment, max_chars=10_000)
    _refuse(errors, "review")
    values = _values(queue, scores)
    item = _queued(queue, item_id)
    review = _review_of(item, user)
    if review is not None and review.state == QueueReviewState.DONE:
        return item, True   # finishing twice: the first one stands
    if review is None or review.state == QueueReviewState.SKIPPED:
        # Finished without a claim (the API's straight "done", or after a skip): take a place now.
        if review is None:
            try:
                with transaction.atomic():
                    claimed = _claim(item.pk, queue, user)
            except IntegrityError:
                claimed = False
        else:
            claimed = _claim(item.pk, queue, user, review)
        if not claimed:
            raise Conflict("This item has all the reviews it needs, or other reviewers hold them (your claim may "
                           "have lapsed after 30 minutes): nothing was saved. Take the next item.")
        review = _review_of(item, user)
    assert review is not None
    now = timezone.now()
    if not QueueReview.objects.filter(pk=review.pk, state=QueueReviewState.CLAIMED).update(
            state=QueueReviewState.DONE, finished_at=now):
        return item, True   # the same review finished at the same moment elsewhere
    for config, value in values.items():
        score_set(user=user, run=item.run, config=config.pk, value=value)
    if comment.strip():
        annotation = annotation_add(user=user, run=item.run, body=comment)
        QueueReview.objects.filter(pk=review.pk).update(annotation=annotation)
    QueueItem.objects.filter(pk=item.pk).update(done_count=F("done_count") + 1)
    if QueueItem.objects.filter(pk=item.pk, done_at__isnull=True, done_count__gte=queue.reviews_per_item).update(
            done_at=now):
        QueueItem.objects.filter(pk=item.pk).update(disagreement=disagrees(queue, [item])[item.pk])
    item.refresh_from_db()
    return item, False


# -- reading ---------------------------------------------------------------------------------------

def review_scores(queue: ReviewQueue, items: list[QueueItem]) -> dict[tuple[int, int, int | None], Any]:
    """The values the items' reviewers gave for the queue's configs: (run id, config id, author id) -> value.
    One query for any number of items."""
    if not items:
        return {}
    configs = list(queue.score_configs.all())
    # The items' runs are the queue's project's already: the scoped manager's `run_id IN (every run of
    # the project)` would only cost a scan of the project's runs.
    scores = Score._base_manager.filter(run_id__in=[i.run_id for i in items], config__in=configs,
                                        attempt__isnull=True, source=ScoreSource.PERSON).select_related("config")
    return {(s.run_id, s.config_id, s.author_id): score_value(s) for s in scores}


def disagrees(queue: ReviewQueue, items: list[QueueItem]) -> dict[int, bool]:
    """Per item: do its done reviewers' scores differ on any of the queue's configs?"""
    values = review_scores(queue, items)
    reviewers: dict[int, list[int]] = {}
    for item_id, reviewer_id in QueueReview.objects.filter(item__in=items, state=QueueReviewState.DONE) \
            .values_list("item_id", "reviewer_id"):
        reviewers.setdefault(item_id, []).append(reviewer_id)
    configs = list(queue.score_configs.values_list("pk", flat=True))
    answer = {}
    for item in items:
        people = reviewers.get(item.pk, [])
        answer[item.pk] = len(people) > 1 and any(
            len({repr(values.get((item.run_id, c, p))) for p in people}) > 1 for c in configs)
    return answer


@dataclass(frozen=True)
class ShownReview:
    reviewer: str | None
    state: str
    claimed_at: datetime
    finished_at: datetime | None
    values: dict[str, Any]   # config name -> value (done reviews)
    comment: str


@dataclass(frozen=True)
class ShownItem:
    item: QueueItem
    reviews: list[ShownReview]
    state: str   # open, in review, done

    @property
    def done_reviews(self) -> list[ShownReview]:
        return [r for r in self.reviews if r.state == QueueReviewState.DONE]


def progress(queue: ReviewQueue, user=None) -> dict[str, int]:
    """How far the queue is: items, done, open, in four-eyes disagreement; and the user's own reviews done."""
    counts = QueueItem.objects.filter(queue=queue).aggregate(
        total=Count("pk"), done=Count("pk", filter=Q(done_at__isnull=False)),
        disagreements=Count("pk", filter=Q(disagreement=True)))
    counts["open"] = counts["total"] - counts["done"]
    counts["mine"] = 0 if user is None else QueueReview.objects.filter(
        item__queue=queue, reviewer=user, state=QueueReviewState.DONE).count()
    return counts


ITEM_STATES = ("open", "done", "disagreement")


def results(queue: ReviewQueue, *, state: str = "") -> QuerySet[QueueItem]:
    """The queue's items in the order they were queued; `state` open, done or disagreement narrows them."""
    # The runs of a page are read apart (prefetch): a join would read every item's run before the page.
    items = QueueItem.objects.filter(queue=queue).prefetch_related(
        Prefetch("run", queryset=Run.objects.defer("state", "completion", "planner_config"))).order_by("id")
    if state == "open":
        items = items.filter(done_at__isnull=True)
    elif state == "done":
        items = items.filter(done_at__isnull=False)
    elif state == "disagreement":
        items = items.filter(disagreement=True)
    return items


def shown_items(queue: ReviewQueue, items: list[QueueItem]) -> list[ShownItem]:
    """The items with their reviews and the scores those reviews gave: three queries for a page of any size."""
    values = review_scores(queue, items)
    configs = list(queue.score_configs.all())
    runs = {i.pk: i.run_id for i in items}
    reviews: dict[int, list[ShownReview]] = {}
    for review in QueueReview.objects.filter(item__in=items).select_related("reviewer", "annotation").order_by("id"):
        item_run = runs[review.item_id]
        done = review.state == QueueReviewState.DONE
        reviews.setdefault(review.item_id, []).append(ShownReview(
            reviewer=review.reviewer.get_username() if review.reviewer else None, state=review.state,
            claimed_at=review.claimed_at, finished_at=review.finished_at,
            values={c.name: values.get((item_run, c.pk, review.reviewer_id)) for c in configs} if done else {},
            comment=review.annotation.body if review.annotation else ""))
    shown = []
    for item in items:
        state = "done" if item.done_at else ("in review" if item.taken else "open")
        shown.append(ShownItem(item=item, reviews=reviews.get(item.pk, []), state=state))
    return shown


EXPORT_CHUNK = 500


def export_chunks(queue: ReviewQueue) -> Iterator[list[ShownItem]]:
    """Every item with its reviews, EXPORT_CHUNK at a time (keyset on id): memory stays flat however long."""
    after = 0
    while True:
        with project_scope(queue.project_id):   # a streamed answer is read after the request's scope ended
            chunk = list(results(queue).filter(pk__gt=after)[:EXPORT_CHUNK])
            if not chunk:
                return
            shown = shown_items(queue, chunk)
        yield shown
        after = chunk[-1].pk
