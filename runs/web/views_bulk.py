"""Bulk actions pages (runs.bulk): the runs list's "Act on these runs" → a preview with the count
and a confirmation → the job's page, its progress polled by htmx until it is done."""
from __future__ import annotations

import json

from django import forms
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from core.errors import ServiceError
from core.permissions import permission_needed
from runs import bulk, request_keys
from runs.labels import KEY_RULE, LabelsField
from runs.models_bulk import BulkAction, BulkActionKind
from runtime.ids import random_hex


class BulkForm(forms.Form):
    query = forms.CharField(required=False, max_length=2000, widget=forms.HiddenInput)
    action = forms.ChoiceField(choices=[("", "choose an action")] + BulkActionKind.choices, required=False)
    add = LabelsField(label="Labels to set", required=False, max_length=2000,
                      help_text="For “change labels”: key=value, comma separated (e.g. incident=42).",
                      widget=forms.TextInput(attrs={"placeholder": "incident=42"}))
    remove = forms.CharField(label="Label keys to remove", required=False, max_length=1000,
                             help_text="For “change labels”: keys, comma separated.",
                             widget=forms.TextInput(attrs={"placeholder": "team"}))
    comment = forms.CharField(label="Comment", required=False, max_length=5000,
                              help_text="For approve or reject: recorded with each decision.")
    suite = forms.CharField(label="Suite", required=False, max_length=120,
                            help_text="For “add to an evaluation suite”: the suite's name (a new name makes a new "
                                      "suite; a bundled suite cannot take runs).")
    completion_expected = forms.ChoiceField(
        label="Expected: should planning mode verify success?", required=False,
        choices=[("", "no expectation"), ("yes", "yes, it should complete"),
                 ("no", "no, it should stop without completing")],
        help_text="For “add to an evaluation suite”: the reviewer's expected outcome of each task.")
    note = forms.CharField(label="Note", required=False, max_length=2000,
                           help_text="For “add to an evaluation suite”: kept with each task.")
    # The hashes the preview showed (approve/reject), carried by the confirmation form.
    expected = forms.CharField(required=False, widget=forms.HiddenInput)
    # Drawn per confirmation shown: a double submit opens the job the first one started (runs.request_keys).
    request_key = forms.CharField(required=False, max_length=255, widget=forms.HiddenInput)

    def clean_remove(self):
        keys = [k.strip() for k in self.cleaned_data["remove"].split(",") if k.strip()]
        return keys

    def parameters(self) -> dict:
        data, action = self.cleaned_data, self.cleaned_data.get("action")
        if action == BulkActionKind.LABEL:
            return {"add": data.get("add") or {}, "remove": data.get("remove") or []}
        if action in bulk.DECIDE:
            return {"comment": data.get("comment", "")}
        if action == BulkActionKind.SUITE:
            expected = {"yes": True, "no": False}.get(data.get("completion_expected") or "")
            return {"suite": (data.get("suite") or "").strip(), "create": True, "completion_expected": expected,
                    "note": data.get("note", "")}
        return {}


def _context(form, *, preview=None, error=None) -> dict:
    return {"form": form, "preview": preview, "error": error, "key_rule": KEY_RULE,
            "action_label": BulkActionKind(preview.action).label if preview else "",
            "expected_json": json.dumps(preview.approvals) if preview and preview.approvals else "",
            "request_key": random_hex(16)}


@permission_needed("runs.view_run", "view runs")
@require_GET
def bulk_preview(request):
    """The action chosen for the filter's runs: how many, which may be acted on, and a confirmation."""
    form = BulkForm(request.GET or None)
    preview, error, status = None, None, 200
    if form.is_bound and form.is_valid() and form.cleaned_data["action"]:
        try:
            action = form.cleaned_data["action"]
            bulk.parameters_clean(action, form.parameters())
            preview = bulk.bulk_preview(user=request.user, action=action, query=form.cleaned_data["query"])
        except ServiceError as exc:
            error, status = exc.message, exc.status
    elif form.is_bound and form.errors:
        status = 400
    return render(request, "runs/bulk_preview.html", _context(form, preview=preview, error=error), status=status)


@permission_needed("runs.view_run", "view runs")
@require_POST
def bulk_start(request):
    form = BulkForm(request.POST)
    if form.is_valid() and form.cleaned_data["action"]:
        data = form.cleaned_data
        try:
            expected = json.loads(data["expected"]) if data["expected"] else None
            arguments = {"action": data["action"], "query": data["query"], "parameters": form.parameters(),
                         "expected_hashes": expected if data["action"] in bulk.DECIDE else None}
            job = request_keys.form_once(user=request.user, key=data["request_key"] or None, endpoint="runs.bulk",
                                         data=arguments, start=lambda: bulk.bulk_start(user=request.user, **arguments))
        except ValueError:
            error, status = "The confirmation was damaged: preview again.", 400
        except ServiceError as exc:
            error, status = exc.message, exc.status
        else:
            return redirect("runs:bulk_job", job_id=job.pk)
    else:
        error, status = "Choose an action.", 400
    return render(request, "runs/bulk_preview.html", _context(form, error=error), status=status)


@permission_needed("runs.view_run", "view runs")
@require_GET
def bulk_job(request, job_id: int):
    try:
        job = bulk.bulk_get(user=request.user, job_id=job_id)
    except BulkAction.DoesNotExist:
        raise Http404("No such bulk action.") from None
    if request.htmx:
        # 286 tells htmx to stop polling, once the finished job is shown.
        return render(request, "runs/bulk_job.html#progress", {"job": job}, status=286 if job.is_finished else 200)
    return render(request, "runs/bulk_job.html", {"job": job})
