"""A run as a scenario: download it, or replay it with one capability response changed."""
from __future__ import annotations

import json

from django import forms
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from core.downloads import as_download
from core.errors import ServiceError
from core.permissions import permission_needed
from runs.models import Run
from runs.trace import scenario_export


def _run(run_id: int) -> Run:
    run = Run.objects.select_related("owner").filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


@permission_needed("runs.view_run", "view runs")
@require_GET
def scenario_download(request, run_id: int):
    run = _run(run_id)
    return as_download(JsonResponse(scenario_export.run_scenario_export(run=run), json_dumps_params={"indent": 2}),
                       scenario_export.scenario_filename(run))


class WhatIfForm(forms.Form):
    response = forms.ChoiceField(label="Response to change")
    replacement = forms.CharField(label="New response (JSON)", widget=forms.Textarea(attrs={"rows": 4}),
                                  max_length=100_000,
                                  help_text='e.g. {"raise": "timeout"}, {"return": {...}}, {"http_status": 503}')

    def __init__(self, *args, choices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["response"].choices = choices


@permission_needed("runs.view_run", "view runs")
@require_http_methods(["GET", "POST"])
def scenario_what_if(request, run_id: int):
    run = _run(run_id)
    scenario = scenario_export.run_scenario_export(run=run)
    form = WhatIfForm(request.POST or None, choices=scenario_export.response_choices(scenario))
    outcome, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            try:
                outcome = scenario_export.scenario_what_if(scenario=scenario, **form.cleaned_data)
            except ServiceError as exc:
                form.add_error("replacement", exc.message)
                status = 400
        else:
            status = 400
    context = {"run": run, "scenario": scenario, "form": form, "outcome": outcome,
               "recorded": scenario_export.scenario_replay(scenario=scenario),
               "responses": [(c["name"], i, json.dumps(r, sort_keys=True))
                             for c in scenario["capabilities"] for i, r in enumerate(c["responses"])]}
    return render(request, "runs/what_if.html", context, status=status)
