"""The review panel in the trace (run and attempt), its forms, and the review settings page."""
from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from core.errors import InvalidInput, ServiceError
from core.permissions import allowed, forbidden, permission_needed
from core.roles import MANAGE_REVIEW_SETTINGS, REVIEW_RUNS
from review import selectors, services
from review.models import Annotation, IncidentStatus, RootCauseCategory, ScoreConfig, ScoreKind
from review.scoring import value_from_text
from runs.models import Attempt, Run


def _id(text: str | None) -> int | None:
    """A row id from a form field (None for anything else, a number too large for an id included)."""
    return int(text) if text and text.isdigit() and len(text) < 16 else None


def _attempt(run: Run, uid: str) -> Attempt | None:
    if not uid:
        return None
    attempt = Attempt.objects.select_related("step__revision").filter(run=run, uid=uid).first()
    if attempt is None:
        raise Http404("No such attempt in this run.")
    return attempt


def _panel(request, run: Run, attempt: Attempt | None, *, error: str = "", status: int = 200):
    context = {"panel": selectors.review_panel(run=run, attempt=attempt), "error": error,
               "can_review": allowed(request.user, REVIEW_RUNS), "statuses": IncidentStatus.values,
               "kinds": ScoreKind}
    return render(request, "review/panel.html#panel", context, status=status)


@permission_needed("runs.view_run", "view runs")
@require_GET
def run_panel(request, run_id: int):
    """The run's review (or ?attempt=UID: that attempt's), loaded into the trace page."""
    run = get_object_or_404(Run, pk=run_id)
    return _panel(request, run, _attempt(run, request.GET.get("attempt", "").replace("\x00", "")))


def _nul_free(form) -> None:
    if any("\x00" in value for _field, values in form.lists() for value in values):
        raise InvalidInput("The form holds a NUL character: remove it.")


def _write(request, run_id: int, write) -> object:
    """Run one write from a form; answer the panel again (with the refusal, if any) or go back to the trace."""
    run = get_object_or_404(Run, pk=run_id)
    attempt = _attempt(run, request.POST.get("attempt", "").replace("\x00", ""))
    try:
        _nul_free(request.POST)
        write(run, attempt)
    except ServiceError as exc:
        if request.htmx:
            return _panel(request, run, attempt, error=exc.message, status=exc.status)
        messages.error(request, exc.message)
    if request.htmx:
        return _panel(request, run, attempt)
    return redirect("runs:detail", run_id=run.pk)


@permission_needed(REVIEW_RUNS, "score runs")
@require_POST
def score_post(request, run_id: int):
    def write(run, attempt):
        config_id = _id(request.POST.get("config"))
        config = None if config_id is None else ScoreConfig.objects.filter(pk=config_id).first()
        if config is None:
            raise InvalidInput("Choose a score config.")
        services.score_set(user=request.user, run=run, config=config.pk,
                           value=value_from_text(config, request.POST.get("value", "")),
                           comment=request.POST.get("comment", ""), attempt_uid=attempt.uid if attempt else None)
    return _write(request, run_id, write)


@permission_needed(REVIEW_RUNS, "comment on runs")
@require_POST
def comment_post(request, run_id: int):
    def write(run, attempt):
        services.annotation_add(user=request.user, run=run, body=request.POST.get("body", ""),
                                attempt_uid=attempt.uid if attempt else None)
    return _write(request, run_id, write)


@permission_needed(REVIEW_RUNS, "write incident summaries")
@require_POST
def incident_post(request, run_id: int):
    def write(run, attempt):
        links = [line.strip() for line in request.POST.get("links", "").splitlines() if line.strip()]
        services.incident_save(user=request.user, run=run, status=request.POST.get("status", ""),
                               root_cause=request.POST.get("root_cause", "") or None,
                               owner=request.POST.get("owner", "").strip() or None,
                               summary=request.POST.get("summary", ""), links=links)
    return _write(request, run_id, write)


@permission_needed(REVIEW_RUNS, "comment on runs")
@require_POST
def comment_edit(request, annotation_id: int):
    """Edit one's own comment (services.annotation_edit refuses anyone else's); answer the panel it was
    edited in (the form's `attempt`: the attempt's panel, or none for the run's)."""
    annotation = get_object_or_404(Annotation, pk=annotation_id)

    def write(run, attempt):
        services.annotation_edit(user=request.user, annotation_id=annotation.pk, body=request.POST.get("body", ""))
    return _write(request, annotation.run_id, write)


# -- settings: score configs and root causes --------------------------------------------------------

@permission_needed("review.view_scoreconfig", "view score configs")
def settings_page(request):
    can_manage = allowed(request.user, MANAGE_REVIEW_SETTINGS)
    status = 200
    if request.method == "POST":
        if not can_manage:
            return forbidden(request, "You do not have permission to manage score configs.")
        try:
            _nul_free(request.POST)
            _settings_write(request)
            return redirect("review:settings")
        except ServiceError as exc:
            messages.error(request, exc.message)
            status = exc.status
    return render(request, "review/settings.html", {
        "configs": ScoreConfig.objects.order_by("-builtin", "name"),
        "root_causes": RootCauseCategory.objects.order_by("name"), "can_manage": can_manage,
        "kinds": ScoreKind.choices}, status=status)


def _number_or_none(text: str):
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise InvalidInput(f"{text[:40]!r} is not a number.", fields={"range": "a number"}) from None


def _settings_write(request) -> None:
    form = request.POST
    what = form.get("what", "")
    if what == "config":
        config_id = _id(form.get("id"))
        if config_id is not None and form.get("toggle"):
            config = get_object_or_404(ScoreConfig, pk=config_id)
            services.score_config_save(user=request.user, config_id=config_id, name=config.name, kind=config.kind,
                                       description=config.description, min_value=config.min_value,
                                       max_value=config.max_value, categories=config.categories,
                                       enabled=not config.enabled)
            return
        categories = [c.strip() for c in form.get("categories", "").split(",") if c.strip()]
        services.score_config_save(user=request.user, name=form.get("name", ""), kind=form.get("kind", ""),
                                   description=form.get("description", ""), min_value=_number_or_none(form.get("min_value")),
                                   max_value=_number_or_none(form.get("max_value")), categories=categories)
    elif what == "root_cause":
        category_id = _id(form.get("id"))
        if category_id is not None:
            category = get_object_or_404(RootCauseCategory, pk=category_id)
            services.root_cause_save(user=request.user, category_id=category_id, name=category.name,
                                     description=category.description, enabled=not category.enabled)
            return
        services.root_cause_save(user=request.user, name=form.get("name", ""), description=form.get("description", ""))
    else:
        raise InvalidInput("Unknown form.")
