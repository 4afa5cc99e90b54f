"""Operator pages for runs: list, trace, approval inbox, dashboard.

Views read through runs.selectors / runs.dashboard.periods and change state only
through runs.services. htmx requests get the page's partial ("page.html#name").
"""
from __future__ import annotations

import json
from dataclasses import replace

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling, trigger_client_event

from capabilities.models import Capability
from core import jsonlimits
from core.choices import LIVE_STATUSES, DecisionChannel, ErrorCode, ObservationStatus
from core.downloads import as_download
from core.errors import InvalidInput, NotAllowed, ServiceError
from core.pagination import COUNT_CAP, InvalidCursor, keyset_page
from core.permissions import allowed, bad_request, forbidden, permission_needed
from core.replica import reads_from_replica
from runs import explorer, forks, request_keys, search, selectors, services
from runs.dashboard import periods as dashboard_data
from runs.dashboard.page import dashboard_page
from runs.filters import SORT_CHOICES, RunFilterForm  # noqa: F401  (SORT_CHOICES: tests import it here)
from runs.labels import TOO_MANY_FILTERS, label_filters_parse
from runs.models import Approval, Attempt, Run
from runs.trace import as_json as trace_json
from runs.trace import reconciliation
from runs.trace import review as trace_review
from runs.trace.page import trace_page
from runs.trace.review import TraceFilters
from runs.web.forms import RunStartForm, initial_from_run
from runtime.ids import random_hex
from runtime.storable import text_unstorable

APPROVALS_CHANGED_EVENT = "approvals-changed"


def _page_number(request, name="page") -> str:
    return request.GET.get(name) or "1"


# --- Runs list -----------------------------------------------------------------------


def _page_int(request) -> int:
    """The page number shown (and, without a cursor, served by OFFSET); junk means page 1, and
    no page lies beyond the millionth (an OFFSET the database could not even hold)."""
    try:
        return min(max(1, int(request.GET.get("page") or 1)), 1_000_000)
    except ValueError:
        return 1


# The runs list's filters live in runs.filters: bulk actions select runs with the same form.


def evaluation_runs_preference(request) -> str:
    """hide | show | only: the list's own choice, remembered for the session (default: hidden)."""
    choice = request.GET.get("evaluation_runs")
    if choice in ("hide", "show", "only"):
        request.session["evaluation_runs"] = choice
        return choice
    return request.session.get("evaluation_runs", "hide")


@reads_from_replica
@permission_needed("runs.view_run", "view runs")
@require_GET
def run_list(request):
    preference = evaluation_runs_preference(request)
    data = None
    if request.GET:
        data = search.list_params(request.GET)
        data.setdefault("evaluation_runs", preference)
    form = RunFilterForm(data, initial={"evaluation_runs": preference})
    if form.is_bound:
        form.is_valid()
        filters = form.filters()
    else:
        filters = selectors.RunFilters()
    filters = replace(filters, evaluation_runs=preference)
    # A text search probes each run's attempts: its runs are counted exactly only up to the explorer's cap.
    count_cap = explorer.COUNT_CAP if filters.q else COUNT_CAP
    try:
        page = keyset_page(selectors.run_list(filters=filters), ordering=selectors.run_ordering(filters.sort),
                           per_page=selectors.RUNS_PER_PAGE, after=request.GET.get("after"),
                           before=request.GET.get("before"), number=_page_int(request), count_cap=count_cap)
    except InvalidCursor as exc:
        return bad_request(request, str(exc))
    live = any(run.status in LIVE_STATUSES for run in page.object_list)
    context = {"form": form, "page": page, "live": live, "sort": filters.sort, "count_cap": count_cap,
               "filtered": any(v for k, v in vars(filters).items() if k not in ("sort", "evaluation_runs")),
               "evaluation_runs": preference,
               "saved_views": search.saved_views(user=request.user), "view_query": search.view_query(request.GET)}
    # The save form sits outside the swapped table: an htmx swap brings it the query just applied.
    template = "runs/list.html#runs_table" if request.htmx else "runs/list.html"
    too_many = TOO_MANY_FILTERS in form.errors.get("label", ())
    return render(request, template, context, status=400 if too_many or "q" in form.errors else 200)


@permission_needed("runs.start_run", "start runs")
def run_start_page(request):
    capabilities = list(Capability.objects.filter(enabled=True).order_by("name").values_list("name", flat=True))
    initial, source = None, None
    if request.method == "GET" and request.GET.get("from_run"):
        # "Start a run with the same settings": the earlier run's goal, criteria, budgets and planner.
        try:
            source = Run.objects.get(pk=int(request.GET["from_run"]))
        except (ValueError, Run.DoesNotExist):
            return forbidden(request, "There is no run to copy the settings from.", status=404)
        initial = initial_from_run(source)
    form = RunStartForm(request.POST or None, capabilities=capabilities,
                        initial={**(initial or {}), "request_key": random_hex(16)})
    if request.method == "POST":
        if form.is_valid():
            arguments = form.run_start_arguments()
            try:
                run = request_keys.form_once(
                    user=request.user, key=form.cleaned_data["request_key"] or None, endpoint="runs.start",
                    data=arguments, start=lambda: services.run_start(owner=request.user, **arguments))
            except ServiceError as exc:
                form.add_service_errors(exc.fields or {"goal": exc.message})
            else:
                messages.success(request, f"Run {run.pk} started.")
                return redirect("runs:detail", run_id=run.pk)
        else:
            # Every error in one round: the budget checks run_start would make, beside the form's own.
            form.add_budget_errors_now()
    return render(request, "runs/start.html", {"form": form, "source": source}, status=400 if form.errors else 200)


# --- Run trace -------------------------------------------------------------------------


def _get_run(run_id: int) -> Run:
    try:
        return selectors.run_get(run_id=run_id)
    except Run.DoesNotExist:
        raise Http404("No such run.") from None


class TraceFilterForm(forms.Form):
    """Filters inside one trace; GET, so every filtered view is a link."""

    capability = forms.ChoiceField(choices=[("", "any")], required=False)
    status = forms.ChoiceField(choices=[("", "any")] + ObservationStatus.choices, required=False)
    error_code = forms.ChoiceField(label="Error code", choices=[("", "any")] + ErrorCode.choices, required=False)
    repeated = forms.BooleanField(label="Repeated only", required=False)

    def __init__(self, *args, capabilities=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["capability"].choices += [(c, c) for c in sorted(capabilities)]

    def filters(self) -> TraceFilters:
        if not self.is_bound or not self.is_valid():
            return TraceFilters()
        return TraceFilters(**{k: v for k, v in self.cleaned_data.items() if v})


TRACE_FILTER_KEYS = ("capability", "status", "error_code", "repeated")


@reads_from_replica
@permission_needed("runs.view_run", "view runs")
@require_GET
def run_detail(request, run_id: int):
    run = _get_run(run_id)
    capability_calls = selectors.run_capability_calls(run=run)
    bound = any(key in request.GET for key in TRACE_FILTER_KEYS)
    filter_form = TraceFilterForm(request.GET if bound else None, capabilities=capability_calls.keys())
    # A filter value the trace does not know is a bad link: say so (400), show the whole trace.
    status = 400 if bound and not filter_form.is_valid() else 200
    page = trace_page(run, capability_calls=capability_calls, trace_filters=filter_form.filters(),
                      page_number=_page_number(request, "attempts_page"), attempt_uid=request.GET.get("attempt", ""))
    context = {
        **page.context(),
        "filter_form": filter_form,
        "can_cancel": (allowed(request.user, "runs.cancel_run") and not run.is_finished
                       and services.can_manage_run(request.user, run)),
        "can_start": allowed(request.user, "runs.start_run"),
        "can_reconcile": reconciliation.needs_reconciliation(run) and reconciliation.can_reconcile(request.user, run),
        "after_reconciling": reconciliation.AFTER_RECORDING,
        "can_fork": forks.can_fork(request.user, run),
        "needs_reconciling": reconciliation.needs_reconciliation(run),
    }
    if request.htmx:
        html = render_to_string("runs/detail.html#trace", context, request=request)
        # A finished run will not change again: tell htmx to stop asking.
        return HttpResponseStopPolling(html) if run.is_finished else HttpResponse(html, status=status)
    return render(request, "runs/detail.html", context, status=status)


@reads_from_replica
@permission_needed("runs.view_run", "view runs")
@require_GET
def attempt_detail(request, run_id: int, uid: str):
    try:
        attempt = selectors.attempt_get(run_id=run_id, uid=uid)
    except Attempt.DoesNotExist:
        raise Http404("No such attempt in this run.") from None
    run = selectors.run_get(run_id=run_id)
    trigger = trace_review.stop_trigger(run=run, approvals=[], revisions=[])
    trace_review.mark_attempts([attempt], run=run, revision_numbers={attempt.step.revision_id:
                                                                     attempt.step.revision.number}, trigger=trigger)
    position = selectors.attempt_position(run=run, uid=uid) or 0
    context = {"run": run, "attempt": attempt,
               "attempts_page_number": position // selectors.ATTEMPTS_PER_PAGE + 1}
    template = "runs/attempt.html#attempt_detail" if request.htmx else "runs/attempt.html"
    return render(request, template, context)


@reads_from_replica
@permission_needed("runs.view_run", "view runs")
@require_GET
def attempt_output(request, run_id: int, uid: str):
    """The stored large output of one attempt, served as JSON (inline outputs too)."""
    attempt = (Attempt.objects.select_related("output_ref").filter(run_id=run_id, uid=uid).first()
               if not text_unstorable(uid) else None)   # a %00 in the address: PostgreSQL refuses the query
    if attempt is None:
        raise Http404("No such attempt in this run.")
    if attempt.output_ref is None:
        body = json.dumps(attempt.output, cls=DjangoJSONEncoder)
    else:
        body = attempt.output_ref.content
        try:
            json.loads(body)
        except ValueError:
            body = json.dumps(body)  # not JSON: serve it as one JSON string rather than guess
    return as_download(HttpResponse(body, content_type="application/json; charset=utf-8"),
                       f"run-{run_id}-attempt-{uid}-output.json", inline=True)


@reads_from_replica
@permission_needed("runs.view_run", "view runs")
@require_GET
def trace_download(request, run_id: int):
    run = _get_run(run_id)
    return as_download(StreamingHttpResponse(trace_json.trace_chunks(run), content_type="application/json"),
                       f"run-{run.pk}-trace.json")


@permission_needed("runs.reconcile_run", "reconcile runs")
@require_POST
def run_reconcile(request, run_id: int):
    try:
        reconciliation.run_reconcile(run_id=run_id, user=request.user,
                                     committed=request.POST.get("committed") == "yes",
                                     evidence=request.POST.get("evidence", ""))
    except Run.DoesNotExist:
        raise Http404("No such run.") from None
    except NotAllowed as exc:
        return forbidden(request, exc.message)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Recorded what you found for run {run_id}. {reconciliation.AFTER_RECORDING}")
    return redirect(reverse("runs:detail", args=[run_id]) + "#reconciliation")


def _json_field(request, name: str):
    """An optional JSON object from the fork form (blank: keep the source's)."""
    text = request.POST.get(name, "").strip()
    if not text:
        return None
    try:
        return jsonlimits.loads(text)
    except jsonlimits.JSONLimitError as exc:
        raise InvalidInput(f"{name}: {exc}", fields={name: "not valid JSON"}) from None


@permission_needed("runs.start_run", "start runs")
@require_POST
def run_fork(request, run_id: int):
    """Fork the run before one of its calls (attempt or at), or resume it after its end."""
    try:
        at = request.POST.get("at", "").strip()
        run = forks.run_fork(run_id=run_id, user=request.user, attempt=request.POST.get("attempt") or None,
                             # isdigit() alone takes "²" and 5,000 digits, which int() refuses
                             at=int(at) if at.isascii() and at.isdigit() and len(at) <= 18 else (None if not at else -1),
                             budgets=_json_field(request, "budgets"),
                             planner_config=_json_field(request, "planner_config"))
    except NotAllowed as exc:
        return forbidden(request, exc.message)
    except ServiceError as exc:
        if not Run.objects.filter(pk=run_id).exists():
            raise Http404("No such run.") from None
        messages.error(request, exc.message)
        return redirect(reverse("runs:detail", args=[run_id]) + "#fork")
    what = "resumes" if run.forked_at and run.forked_at > Attempt.objects.filter(run_id=run_id).count() else "forks"
    messages.success(request, f"Run {run.pk} {what} run {run_id}: the calls before the fork point are its "
                              "inherited history, not repeated.")
    return redirect("runs:detail", run.pk)


@permission_needed("runs.cancel_run", "cancel runs")
@require_POST
def run_cancel(request, run_id: int):
    try:
        run = services.run_cancel(run_id=run_id, user=request.user)
    except Run.DoesNotExist:
        raise Http404("No such run.") from None
    except NotAllowed as exc:
        return forbidden(request, exc.message)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        if run.is_finished:
            messages.success(request, f"Run {run.pk} was cancelled.")
        else:
            messages.success(request, f"Cancellation requested: run {run.pk} stops at its next step boundary.")
    return redirect("runs:detail", run_id=run_id)


# --- Approval inbox ------------------------------------------------------------------------


@permission_needed("runs.view_run", "view approval requests")
@require_GET
def approval_inbox(request):
    page = Paginator(selectors.pending_approvals(), selectors.APPROVALS_PER_PAGE).get_page(_page_number(request))
    approvals = selectors.decorate_approvals(list(page.object_list), user=request.user)
    context = {"page": page, "approvals": approvals, "can_decide": allowed(request.user, "runs.decide_approval")}
    template = "runs/approvals.html#approval_list" if request.htmx else "runs/approvals.html"
    return render(request, template, context)


@permission_needed("runs.decide_approval", "approve or reject requests")
@require_POST
def approval_decide(request, approval_id: int):
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        return _card_response(request, approval_id, "Choose approve or reject.", status=400)
    if decision == "reject" and request.POST.get("confirm") != "yes":
        # A rejection stops the run for good: ask once more (works without JavaScript too).
        return _card_response(request, approval_id, None, confirm_reject=True,
                              comment=request.POST.get("comment", "")[:5000])
    try:
        services.approval_decide(approval_id=approval_id, user=request.user, approve=decision == "approve",
                                 comment=request.POST.get("comment", ""),
                                 expected_hash=request.POST.get("expected_hash", ""), channel=DecisionChannel.INBOX)
    except NotAllowed as exc:
        if not request.htmx:
            return forbidden(request, exc.message)
        return _card_response(request, approval_id, exc.message, status=exc.status)
    except ServiceError as exc:
        if not request.htmx:
            messages.error(request, exc.message)
            return redirect("runs:approvals")
        return _card_response(request, approval_id, exc.message, status=exc.status)
    if not request.htmx:
        messages.success(request, f"Request {'approved' if decision == 'approve' else 'rejected'}.")
        return redirect("runs:approvals")
    return _card_response(request, approval_id, None)


def _card_response(request, approval_id: int, error: str | None, status: int = 200, *, confirm_reject=False,
                   comment: str = ""):
    try:
        approval = selectors.approval_card(approval_id=approval_id, user=request.user)
    except Approval.DoesNotExist:
        return forbidden(request, "This approval request does not exist.", status=404)
    context = {"approval": approval, "error": error, "can_decide": allowed(request.user, "runs.decide_approval"),
               "pending_approvals": selectors.pending_approval_count(), "oob_badge": bool(request.htmx),
               "confirm_reject": confirm_reject and approval.state == "pending", "comment": comment,
               "just_swapped": True}
    if not request.htmx:
        if confirm_reject:
            return render(request, "runs/approval_confirm.html", context)
        return forbidden(request, error or "", status=status)
    response = render(request, "runs/approvals.html#approval_card", context, status=status)
    return trigger_client_event(response, APPROVALS_CHANGED_EVENT) if not confirm_reject else response


@permission_needed("runs.view_run", "view approval requests")
@require_GET
def approval_card(request, approval_id: int):
    """One card as it stands (the confirm step's "Keep it waiting" returns here)."""
    if not request.htmx:
        return redirect(reverse("runs:approvals") + f"#approval-{approval_id}")
    try:
        approval = selectors.approval_card(approval_id=approval_id, user=request.user)
    except Approval.DoesNotExist:
        return forbidden(request, "This approval request does not exist.", status=404)
    return render(request, "runs/approvals.html#approval_card",
                  {"approval": approval, "can_decide": allowed(request.user, "runs.decide_approval"), "refocus": True})


@permission_needed("runs.view_run", "view approval requests")
@require_GET
def approval_badge(request):
    return render(request, "runs/approvals.html#approval_badge",
                  {"pending_approvals": selectors.pending_approval_count()})


# --- Dashboard ---------------------------------------------------------------------------------


@reads_from_replica
@permission_needed("runs.view_run", "view the dashboard")
@require_http_methods(["GET"])
def run_dashboard(request):
    window_key = request.GET.get("window", dashboard_data.DEFAULT_WINDOW)
    if window_key not in dashboard_data.WINDOWS:
        choices = ", ".join(dashboard_data.WINDOWS)
        return bad_request(request, f"Unknown time window “{window_key}”: choose one of {choices}.")
    label_text = request.GET.get("label", "")[:1000]
    wanted, label_problems = label_filters_parse(label_text)
    page = dashboard_page(window_key=window_key, now=timezone.now(), label=label_text, labels=wanted,
                          label_problems=label_problems,
                          include_evaluations=evaluation_runs_preference(request) != "hide")
    template = "runs/dashboard.html#dashboard_body" if request.htmx else "runs/dashboard.html"
    return render(request, template, page.context(), status=400 if TOO_MANY_FILTERS in label_problems else 200)
