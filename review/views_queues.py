"""Review queue pages: the list, the form, the results table, and working a queue by keyboard."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from core.permissions import allowed, bad_request, permission_needed
from core.roles import MANAGE_QUEUES, REVIEW_RUNS
from review import queues
from review.models import QueueItem, ReviewQueue, ScoreConfig, ScoreKind
from review.scoring import value_from_text
from review.views import _nul_free

PAGE_SIZE = 50


def _queue(queue_id: int) -> ReviewQueue:
    return get_object_or_404(ReviewQueue.objects.prefetch_related("score_configs", "assignees"), pk=queue_id)


@permission_needed("review.view_reviewqueue", "view review queues")
def queue_list(request):
    rows = [(q, queues.progress(q, request.user)) for q in
            ReviewQueue.objects.prefetch_related("score_configs", "assignees").order_by("name")]
    return render(request, "review/queues.html", {"rows": rows, "can_manage": allowed(request.user, MANAGE_QUEUES),
                                                  "can_review": allowed(request.user, REVIEW_RUNS)})


def _reviewers() -> list:
    users = get_user_model().objects.filter(is_active=True).order_by("username")[:300]
    return [u for u in users if allowed(u, REVIEW_RUNS)]


@permission_needed(MANAGE_QUEUES, "manage review queues")
def queue_form(request, queue_id: int | None = None):
    queue = _queue(queue_id) if queue_id is not None else None
    status = 200
    if request.method == "POST":
        form = request.POST
        try:
            _nul_free(form)
            saved, queued = queues.queue_save(
                user=request.user, queue_id=queue_id, name=form.get("name", ""),
                description=form.get("description", ""), filter_query=form.get("filter", ""),
                score_configs=form.getlist("score_configs"), assignees=form.getlist("assignees"),
                reviews_per_item=2 if form.get("reviews_per_item") == "2" else 1, active=bool(form.get("active")))
            messages.success(request, f"Queue {saved.name} saved: {queued} more run{'s' * (queued != 1)} queued.")
            return redirect("review:queue", queue_id=saved.pk)
        except ServiceError as exc:
            messages.error(request, exc.message)
            status = exc.status
        chosen = {"name": form.get("name", ""), "description": form.get("description", ""),
                  "filter": form.get("filter", ""), "configs": form.getlist("score_configs"),
                  "assignees": form.getlist("assignees"), "four_eyes": form.get("reviews_per_item") == "2",
                  "active": bool(form.get("active"))}
    elif queue is not None:
        chosen = {"name": queue.name, "description": queue.description, "filter": queue.filter_query,
                  "configs": [c.name for c in queue.score_configs.all()],
                  "assignees": [u.get_username() for u in queue.assignees.all()],
                  "four_eyes": queue.reviews_per_item == 2, "active": queue.active}
    else:  # a new queue, perhaps from the runs list's "review these runs"
        chosen = {"name": "", "description": "", "filter": request.GET.get("filter", "")[:2000].replace("\x00", ""),
                  "configs": [], "assignees": [], "four_eyes": False, "active": True}
    configs = ScoreConfig.objects.filter(builtin=False).order_by("name")
    return render(request, "review/queue_form.html", {
        "queue": queue, "chosen": chosen, "configs": configs, "reviewers": _reviewers()}, status=status)


@permission_needed(MANAGE_QUEUES, "manage review queues")
@require_POST
def queue_delete(request, queue_id: int):
    queue = _queue(queue_id)
    try:
        queues.queue_delete(user=request.user, queue_id=queue.pk)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("review:queue", queue_id=queue.pk)
    messages.success(request, f"Queue {queue.name} deleted; the scores given in it stay on their runs.")
    return redirect("review:queues")


@permission_needed("review.view_queueitem", "view review queues")
def queue_results(request, queue_id: int):
    """The queue's results table, a page at a time, with its progress and its exports."""
    queue = _queue(queue_id)
    state = request.GET.get("state", "")
    if state and state not in queues.ITEM_STATES:
        return bad_request(request, f"state is one of: {', '.join(queues.ITEM_STATES)}.")
    page = Paginator(queues.results(queue, state=state), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "review/queue.html", {
        "queue": queue, "progress": queues.progress(queue, request.user), "page": page, "state": state,
        "items": queues.shown_items(queue, list(page.object_list)), "configs": list(queue.score_configs.all()),
        "can_manage": allowed(request.user, MANAGE_QUEUES), "can_work": queues.may_work(request.user, queue),
        "states": queues.ITEM_STATES})


def _work(request, queue: ReviewQueue, *, error: str = "", status: int = 200, values=None):
    item = queues.held_item(request.user, queue)
    return render(request, "review/queue_work.html", {
        "queue": queue, "item": item, "progress": queues.progress(queue, request.user), "error": error,
        "available": 0 if item else queues.open_for(request.user, queue).count(),
        "configs": [c for c in queue.score_configs.all() if c.enabled], "kinds": ScoreKind,
        "values": values or {}, "comment": (values or {}).get("_comment", ""),
        "can_work": queues.may_work(request.user, queue)}, status=status)


@permission_needed(REVIEW_RUNS, "review runs")
def queue_work(request, queue_id: int):
    """The item the reviewer holds, scored by keyboard; without one, a button that takes the next."""
    return _work(request, _queue(queue_id))


@permission_needed(REVIEW_RUNS, "review runs")
@require_POST
def queue_next(request, queue_id: int):
    queue = _queue(queue_id)
    try:
        if queues.queue_next(user=request.user, queue=queue) is None:
            messages.info(request, "Nothing left to review in this queue.")
    except ServiceError as exc:
        return _work(request, queue, error=exc.message, status=exc.status)
    return redirect("review:queue_work", queue_id=queue.pk)


@permission_needed(REVIEW_RUNS, "review runs")
@require_POST
def item_done(request, queue_id: int, item_id: int):
    queue = _queue(queue_id)
    get_object_or_404(QueueItem, pk=item_id, queue=queue)
    form = request.POST
    configs = [c for c in queue.score_configs.all() if c.enabled]
    # A score left blank is missing (the service says which); what was typed goes back into the form.
    scores = {c.name: value_from_text(c, form.get(f"score-{c.pk}", "")) for c in configs
              if form.get(f"score-{c.pk}", "").strip()}
    typed = {c.pk: form.get(f"score-{c.pk}", "") for c in configs} | {"_comment": form.get("comment", "")}
    try:
        _nul_free(form)
        _item, already = queues.item_done(user=request.user, queue=queue, item_id=item_id, scores=scores,
                                          comment=form.get("comment", ""))
        if already:
            messages.info(request, "You had finished this item already: the first review stands.")
        if queues.queue_next(user=request.user, queue=queue) is None:
            messages.success(request, "Done: nothing left to review in this queue.")
    except ServiceError as exc:
        return _work(request, queue, error=exc.message, status=exc.status, values=typed)
    return redirect("review:queue_work", queue_id=queue.pk)


@permission_needed(REVIEW_RUNS, "review runs")
@require_POST
def item_skip(request, queue_id: int, item_id: int):
    queue = _queue(queue_id)
    get_object_or_404(QueueItem, pk=item_id, queue=queue)
    try:
        queues.item_skip(user=request.user, queue=queue, item_id=item_id)
        if queues.queue_next(user=request.user, queue=queue) is None:
            messages.info(request, "Skipped: nothing else is left for you in this queue.")
    except ServiceError as exc:
        return _work(request, queue, error=exc.message, status=exc.status)
    return redirect("review:queue_work", queue_id=queue.pk)

