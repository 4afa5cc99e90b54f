"""Add a run to an evaluation suite from its page: the suite (or a new one) and the expected outcome."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from core.permissions import permission_needed
from core.roles import EDIT_SUITES
from evaluation.models import EvaluationSuite
from evaluation.verdicts import VERDICT_LABELS, VerdictCode
from review import datasets
from review.models import ReviewQueue, ScoreConfig, ScoreKind
from runs.models import Run

NEW = "__new__"


class AddToSuiteForm(forms.Form):
    suite = forms.ChoiceField(label="Suite")
    new_suite = forms.CharField(label="New suite's name", required=False, max_length=120,
                                help_text="When “a new suite” is chosen.")
    completion_expected = forms.TypedChoiceField(
        label="Expected: should planning mode verify success?", required=False, empty_value=None,
        coerce=lambda v: v == "yes", choices=[("", "no expectation"), ("yes", "yes, it should complete"),
                                              ("no", "no, it should stop without completing")])
    verdict_expected = forms.ChoiceField(label="Expected verdict", required=False,
                                         choices=[("", "no expectation")] + [(c.value, VERDICT_LABELS[c])
                                                                            for c in VerdictCode])
    expected_from_score = forms.ChoiceField(
        label="Or take the expectation from a score", required=False,
        help_text="A yes/no score “was the run's outcome right?”: yes expects the run's own outcome, no the "
                  "opposite (your score on this run, else the newest by a person).")
    note = forms.CharField(label="Note", required=False, max_length=datasets.MAX_NOTE,
                           widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        own = EvaluationSuite.objects.filter(bundled=False).order_by("name").values_list("pk", "name")[:200]
        suite_field, score_field = self.fields["suite"], self.fields["expected_from_score"]
        assert isinstance(suite_field, forms.ChoiceField) and isinstance(score_field, forms.ChoiceField)
        suite_field.choices = [(str(pk), f"{name}") for pk, name in own] + [(NEW, "a new suite…")]
        booleans = ScoreConfig.objects.filter(kind=ScoreKind.BOOLEAN, enabled=True).values_list("name", flat=True)
        score_field.choices = [("", "(none)")] + [(n, n) for n in booleans]

    def clean(self):
        data = super().clean() or {}
        if data.get("suite") == NEW and not (data.get("new_suite") or "").strip():
            self.add_error("new_suite", "Name the new suite.")
        return data


@permission_needed(EDIT_SUITES, "add runs to evaluation suites")
@require_http_methods(["GET", "POST"])
def add_to_suite(request, run_id: int):
    run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
    form = AddToSuiteForm(request.POST or None)
    error, status = datasets.run_refusal(run), 200
    if request.method == "POST" and not error:
        if form.is_valid():
            data = form.cleaned_data
            creating = data["suite"] == NEW
            try:
                expectation = datasets.expectation_from(data)
                result = datasets.suite_add_runs(user=request.user,
                                                 suite=data["new_suite"].strip() if creating else data["suite"],
                                                 run_ids=[run.pk], expectation=expectation, create=creating)
            except ServiceError as exc:
                error, status = exc.message, exc.status
            else:
                if result.version:
                    messages.success(request, f"Run #{run.pk} is a task of {result.suite.name}, "
                                              f"version {result.version.number}.")
                else:
                    messages.info(request, f"Run #{run.pk} is already a task of {result.suite.name}: nothing added.")
                return redirect("runs:detail", run_id=run.pk)
        else:
            status = 400
    elif error:
        status = 409 if request.method == "POST" else 200
    return render(request, "review/add_to_suite.html", {"run": run, "form": form, "error": error}, status=status)


class QueueToSuiteForm(AddToSuiteForm):
    state = forms.ChoiceField(label="Which items", choices=[
        ("done", "the done items"), ("all", "every item"), ("disagreement", "the items its reviewers disagreed on")])

    field_order = ["state"]


@permission_needed(EDIT_SUITES, "add runs to evaluation suites")
@require_http_methods(["GET", "POST"])
def queue_add_to_suite(request, queue_id: int):
    """The runs of a review queue's items become tasks of a suite (those that cannot are listed)."""
    queue = get_object_or_404(ReviewQueue, pk=queue_id)
    form = QueueToSuiteForm(request.POST or None)
    error, status = "", 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            creating = data["suite"] == NEW
            try:
                result = datasets.suite_add_queue(
                    user=request.user, queue=queue, state=data["state"],
                    suite=data["new_suite"].strip() if creating else data["suite"], create=creating,
                    expectation=datasets.expectation_from(data))
            except ServiceError as exc:
                error, status = exc.message, exc.status
            else:
                refused = f" {len(result.refused)} could not: " + "; ".join(
                    f"run {run}: {why}" for run, why in list(result.refused.items())[:5]) if result.refused else ""
                messages.success(request, f"{len(result.added)} run{'s' if len(result.added) != 1 else ''} added to "
                                          f"{result.suite.name}" + (f", version {result.version.number}" if
                                                                    result.version else "") +
                                          f"; {len(result.already_present)} already in it.{refused}")
                return redirect("review:queue", queue_id=queue.pk)
        else:
            status = 400
    return render(request, "review/add_to_suite.html", {"queue": queue, "form": form, "error": error},
                  status=status)
