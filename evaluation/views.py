"""Evaluation pages: suites and evaluations, the start form, one evaluation side by side.

Reads go through evaluation.selectors, the start through its services; an
htmx poll of a running evaluation gets the page's partial, and the response that
shows it finished stops the polling.
"""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from core import jsonlimits
from core.downloads import as_download
from core.errors import ServiceError
from core.permissions import allowed, permission_needed
from evaluation import export, selectors, services
from evaluation.charts import evaluation_charts
from evaluation.models import Evaluation, EvaluationSuite
from evaluation.verdicts import VERDICT_LABELS, VerdictCode

LIVE = (Evaluation.Status.QUEUED, Evaluation.Status.RUNNING)


class StartEvaluationForm(forms.Form):
    # The queryset is set per form: one built when this module is imported would keep the project in
    # scope then (none, at a server's start: every project's suites).
    suite = forms.ModelChoiceField(queryset=EvaluationSuite.objects.none(), empty_label=None)
    label = forms.CharField(max_length=200, required=False,
                            help_text="e.g. “before the retry policy change”, to find it again as a baseline.")
    planning_mode = forms.ChoiceField(
        required=False, label="Planner in planning mode",
        choices=[("", "the suite's own"), ("scripted", "scripted (each task's plans)"),
                 ("rules", "rules (the demo planner)"), ("llm", "llm (OpenAI-compatible endpoint)")])
    planner_config = forms.CharField(
        required=False, label="Planner settings (JSON)", widget=forms.Textarea(attrs={"rows": 2}),
        help_text='For llm: {"endpoint", "model", ...} as for a run.')

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        suite_field = self.fields["suite"]
        assert isinstance(suite_field, forms.ModelChoiceField)
        suite_field.queryset = EvaluationSuite.objects.order_by("name")

    def clean_planner_config(self):
        raw = self.cleaned_data["planner_config"].strip()
        try:
            value = jsonlimits.loads(raw) if raw else {}
        except jsonlimits.JSONLimitError as exc:
            raise forms.ValidationError(str(exc)) from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Planner settings must be a JSON object.")
        return value


def _signed(value: float, kind: str, unit_of: str | None = None) -> str:
    if value is None:
        return ""
    if abs(value) < 1e-12:
        return "±0"
    sign = "+" if value > 0 else "−"
    magnitude = abs(value)
    if kind == "cost":
        text = f"{magnitude:.4f}".rstrip("0").rstrip(".")
    elif kind == "latency":
        text = f"{magnitude:.2f}".rstrip("0").rstrip(".") + " s"
    elif kind == "float":
        text = f"{magnitude:.2f}".rstrip("0").rstrip(".")
    elif kind == "rate":
        text = f"{magnitude * 100:.1f} pts"
    else:
        text = f"{magnitude:g}"
    return sign + text + DELTA_UNITS.get(unit_of or "", "")


# What each delta counts, so "+2" reads "+2 calls".
DELTA_UNITS = {"tool_calls": " calls", "repeated_actions": " repeats", "tokens": " tokens", "total_tokens": " tokens",
               "mean_tool_calls": " calls", "successes": " tasks"}


# What each verdict means (evaluation.verdicts decides them; this says it in words).
VERDICT_GLOSSARY = [
    (VerdictCode.PLANNING_EARNED.value, VERDICT_LABELS[VerdictCode.PLANNING_EARNED],
     "Planning succeeded where direct did not (often by recovering from a failure), or both succeeded and planning "
     "was no more expensive on any measure and cheaper on one."),
    (VerdictCode.DIRECT_AS_GOOD.value, VERDICT_LABELS[VerdictCode.DIRECT_AS_GOOD],
     "Direct succeeded and planning did not, or both succeeded and direct was no more expensive on every measure "
     "(tool calls, tokens, cost, latency). Ties go to direct: the simpler way meets the requirement."),
    (VerdictCode.PLANNING_COST_MORE.value, VERDICT_LABELS[VerdictCode.PLANNING_COST_MORE],
     "Both succeeded and each was cheaper on some measure: planning saved calls or time but spent more tokens or "
     "cost, or the reverse."),
    (VerdictCode.BOTH_FAILED.value, VERDICT_LABELS[VerdictCode.BOTH_FAILED],
     "Neither mode verified success; the stop reasons say why."),
]

# The regression view's two baselines, in words.
BASELINE_WORDS = {"previous_version": "the last evaluation of an earlier version",
                  "same_version": "the evaluation before this one of the same version"}

DELTA_KINDS = {"tool_calls": "int", "repeated_actions": "int", "tokens": "int", "cost": "cost",
               "simulated_latency_s": "latency"}
AGGREGATE_KINDS = {"success_rate": "rate", "mean_tool_calls": "float", "repeated_action_rate": "rate",
                   "mean_latency_s": "latency", "total_tokens": "int", "total_cost": "cost", "stall_rate": "rate",
                   "budget_stop_rate": "rate", "recovery_rate": "rate", "successes": "int"}


@permission_needed("evaluation.view_evaluation", "view evaluations")
@require_GET
def evaluation_index(request):
    if not EvaluationSuite.objects.filter(bundled=True).exists():
        # First visit: make the bundled suites available (idempotent; `manage.py evaluate` keeps them in sync).
        services.evaluation_suites_sync()
    can_start = allowed(request.user, "evaluation.run_evaluation")
    context = {"suites": selectors.suite_list(), "evaluations": selectors.evaluation_list(limit=50),
               "form": StartEvaluationForm() if can_start else None, "can_start": can_start,
               "latest": selectors.latest_completed_evaluation()}
    return render(request, "evaluation/index.html", context)


@permission_needed("evaluation.run_evaluation", "start evaluations")
@require_POST
def evaluation_start(request):
    form = StartEvaluationForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in form.errors.items())
        messages.error(request, f"The evaluation could not start: {problems}")
        return redirect("evaluation:index")
    try:
        evaluation = services.evaluation_start(user=request.user, suite_id=form.cleaned_data["suite"].pk,
                                               label=form.cleaned_data["label"],
                                               planning_mode=form.cleaned_data["planning_mode"] or None,
                                               planner_config=form.cleaned_data["planner_config"])
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("evaluation:index")
    messages.success(request, f"Evaluation {evaluation.pk} of {evaluation.suite.name} is queued.")
    return redirect("evaluation:detail", evaluation_id=evaluation.pk)


def _evaluation_or_404(evaluation_id: int) -> Evaluation:
    evaluation = selectors.evaluation_get(evaluation_id)
    if evaluation is None:
        raise Http404("No such evaluation.")
    return evaluation


def _baseline(request, evaluation: Evaluation, candidates: list[Evaluation]) -> Evaluation | None:
    wanted = request.GET.get("baseline", "")
    if not (wanted.isascii() and wanted.isdigit()) or len(wanted) > 18:   # "²" and 5,000 digits: no int()
        return None
    return next((c for c in candidates if c.pk == int(wanted)), None)


def _detail_context(request, evaluation: Evaluation) -> dict:
    results = selectors.results_of(evaluation)
    rows = selectors.task_rows(evaluation, results)
    for row in rows:
        row.delta_text = {m: _signed(v, DELTA_KINDS[m], m) for m, v in row.deltas.items()}
    candidates = selectors.baseline_candidates(evaluation)
    baseline = _baseline(request, evaluation, candidates)
    finished = evaluation.status == Evaluation.Status.COMPLETED
    comparison = selectors.comparison(evaluation, baseline, rows) if baseline and finished else None
    if comparison:
        for mode in comparison.modes:
            mode["delta_text"] = {k: _signed(v, AGGREGATE_KINDS.get(k, "float"), k)
                                  for k, v in mode["deltas"].items() if v is not None}
    summary = evaluation.summary or {}
    aggregates = selectors.mode_summary_rows(summary)
    agg = {a["mode"]: a["values"] for a in aggregates}
    aggregate_delta = {}
    if agg.get("direct") and agg.get("planning"):
        for key in ("success_rate", "mean_tool_calls", "repeated_action_rate", "total_tokens", "total_cost",
                    "mean_latency_s"):  # planning - direct, shown under the planning aggregate
            a, b = agg["planning"].get(key), agg["direct"].get(key)
            if a is not None and b is not None:
                aggregate_delta[key] = _signed(a - b, AGGREGATE_KINDS[key], key)
    verdict_counts = [(VERDICT_LABELS[c], c.value, (summary.get("verdicts") or {}).get(c.value, 0))
                      for c in VerdictCode]
    return {
        "evaluation": evaluation, "rows": rows, "live": evaluation.status in LIVE, "finished": finished,
        "regression": _regression_context(evaluation, rows) if finished else None,
        "candidates": candidates, "baseline": baseline, "comparison": comparison,
        "charts": evaluation_charts(summary, baseline.summary if comparison else None) if finished else {},
        "summary": summary, "agg": agg, "aggregate_delta": aggregate_delta, "aggregates": aggregates,
        "verdict_counts": verdict_counts,
        "verdict_glossary": VERDICT_GLOSSARY,
        "progress_pct": int(100 * evaluation.tasks_done / evaluation.tasks_total) if evaluation.tasks_total else 0,
    }


def _regression_context(evaluation: Evaluation, rows) -> dict:
    """The regression view in the shape the template reads (one list per baseline, marks in that order)."""
    view = selectors.regression(evaluation, rows)
    kinds = list(BASELINE_WORDS)
    return {
        "baselines": [{"kind": kind, "words": BASELINE_WORDS[kind], "evaluation": view.baselines[kind],
                       "counts": [(c, n) for c, n in view.counts[kind].items() if n],
                       "removed": view.removed.get(kind, [])} for kind in kinds],
        "rows": [{"row": r, "marks": [r.against.get(kind) for kind in kinds]} for r in view.rows],
    }


@permission_needed("evaluation.view_evaluation", "view evaluations")
@require_GET
def evaluation_detail(request, evaluation_id: int):
    evaluation = _evaluation_or_404(evaluation_id)
    context = _detail_context(request, evaluation)
    if request.htmx:
        html = render_to_string("evaluation/detail.html#evaluation_body", context, request=request)
        # The poll that sees the evaluation finished swaps in the final page and stops polling.
        return HttpResponse(html) if context["live"] else HttpResponseStopPolling(html)
    return render(request, "evaluation/detail.html", context)


@permission_needed("evaluation.view_evaluation", "view evaluations")
@require_GET
def evaluation_export_json(request, evaluation_id: int):
    evaluation = _evaluation_or_404(evaluation_id)
    return as_download(JsonResponse(export.evaluation_dict(evaluation), encoder=DjangoJSONEncoder,
                                    json_dumps_params={"indent": 2}), f"evaluation-{evaluation.pk}.json")


@permission_needed("evaluation.view_evaluation", "view evaluations")
@require_GET
def evaluation_export_csv(request, evaluation_id: int):
    evaluation = _evaluation_or_404(evaluation_id)
    return as_download(HttpResponse(export.evaluation_csv(evaluation), content_type="text/csv; charset=utf-8"),
                       f"evaluation-{evaluation.pk}.csv")


@permission_needed("evaluation.view_evaluation", "view evaluations")
@require_GET
def run_twins(request, run_id: int):
    """The twin links on an evaluation run's trace page (an htmx fragment)."""
    return render(request, "evaluation/twins.html", {"twins": selectors.run_twins(run_id=run_id), "run_id": run_id})
