"""Across runs: the tool-call explorer (every attempt, filtered and searched) and failure groups."""
from __future__ import annotations

from typing import cast

from django import forms
from django.contrib.auth import get_user_model
from django.shortcuts import render
from django.views.decorators.http import require_GET

from capabilities.models import Capability
from core.choices import ErrorCategory, ErrorCode, ObservationStatus, SideEffectStatus
from core.errors import ServiceError
from core.permissions import bad_request, permission_needed
from core.replica import reads_from_replica
from runs import explorer, failures
from runs.labels import label_filters_parse
from runs.pagination import InvalidCursor


def _capabilities() -> list[tuple[str, str]]:
    # Registries are small: one query, however many calls exist.
    return [("", "any")] + [(n, n) for n in Capability.objects.order_by("name").values_list("name", flat=True)]


class AttemptFilterForm(forms.Form):
    q = forms.CharField(label="Search", required=False, max_length=explorer.MAX_QUERY_CHARS,
                        help_text='Arguments, outputs and errors: words and "quoted phrases", all must match.')
    capability = forms.ChoiceField(choices=[("", "any")], required=False)
    status = forms.ChoiceField(choices=[("", "any")] + ObservationStatus.choices, required=False)
    error_code = forms.ChoiceField(label="Error code", choices=[("", "any")] + ErrorCode.choices, required=False)
    error_category = forms.ChoiceField(label="Error category", choices=[("", "any")] + ErrorCategory.choices,
                                       required=False)
    http_status = forms.IntegerField(label="HTTP status", required=False, min_value=100, max_value=599)
    latency_min_s = forms.FloatField(label="Latency from (s)", required=False, min_value=0)
    latency_max_s = forms.FloatField(label="Latency to (s)", required=False, min_value=0)
    side_effect_status = forms.ChoiceField(label="Side effect", choices=[("", "any")] + SideEffectStatus.choices,
                                           required=False)
    label = forms.CharField(label="Run labels", required=False, max_length=1000,
                            widget=forms.TextInput(attrs={"placeholder": "team=payments"}))
    owner = forms.ChoiceField(choices=[("", "anyone")], required=False)
    agent = forms.CharField(label="Agent", required=False, max_length=100)
    started_from = forms.DateTimeField(label="From", required=False,
                                       widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    started_to = forms.DateTimeField(label="To", required=False,
                                     widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    fingerprint = forms.RegexField(label="Failure group", regex=r"^[0-9a-f]{32}$", required=False,
                                   widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["capability"]).choices = _capabilities()
        cast(forms.ChoiceField, self.fields["owner"]).choices = [("", "anyone")] + [
            (n, n) for n in get_user_model().objects.filter(is_active=True).order_by("username")
            .values_list("username", flat=True)]

    def clean_q(self):
        try:
            explorer.search_terms(self.cleaned_data["q"])
        except ServiceError as exc:
            raise forms.ValidationError(exc.message) from None
        return self.cleaned_data["q"]

    def clean_label(self):
        wanted, problems = label_filters_parse(self.cleaned_data["label"])
        if problems:
            raise forms.ValidationError("; ".join(problems))
        return wanted

    def filters(self) -> explorer.AttemptFilters:
        chosen = {k: v for k, v in self.cleaned_data.items() if v not in (None, "")}
        if "label" in chosen:
            chosen["labels"] = chosen.pop("label")
        return explorer.AttemptFilters(**chosen)


@reads_from_replica
@permission_needed("runs.view_run", "view runs")
@require_GET
def call_list(request):
    form = AttemptFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        # Every problem named, nothing searched: a filter left out would answer with other calls.
        return render(request, "runs/calls.html", {"form": form, "page": None, "count_cap": explorer.COUNT_CAP}, status=400)
    filters = form.filters() if form.is_bound else explorer.AttemptFilters()
    try:
        page = explorer.attempt_page(filters=filters, after=request.GET.get("after"),
                                     before=request.GET.get("before"), number=_page(request))
    except InvalidCursor as exc:
        return bad_request(request, str(exc))
    context = {"form": form, "page": page, "count_cap": explorer.COUNT_CAP}
    return render(request, "runs/calls.html#calls_table" if request.htmx else "runs/calls.html", context)


def _page(request) -> int:
    try:
        return min(max(1, int(request.GET.get("page") or 1)), 1_000_000)
    except ValueError:
        return 1


class GroupFilterForm(forms.Form):
    capability = forms.ChoiceField(choices=[("", "any")], required=False)
    error_code = forms.ChoiceField(label="Error code", choices=[("", "any")] + ErrorCode.choices, required=False)
    error_category = forms.ChoiceField(label="Error category", choices=[("", "any")] + ErrorCategory.choices,
                                       required=False)
    http_status = forms.IntegerField(label="HTTP status", required=False, min_value=100, max_value=599)
    seen_within_days = forms.TypedChoiceField(label="Last seen", coerce=int, empty_value=None, required=False,
                                              choices=[("", "any time"), ("1", "last 24 hours"),
                                                       ("7", "last 7 days"), ("30", "last 30 days")])
    sort = forms.ChoiceField(label="Sort by", required=False, choices=[
        ("-last_seen", "last seen"), ("-attempts", "most failures"), ("-runs", "most runs affected"),
        ("-first_seen", "newest groups")])

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["capability"]).choices = _capabilities()

    def filters(self) -> failures.GroupFilters:
        return failures.GroupFilters(**{k: v for k, v in self.cleaned_data.items() if v not in (None, "")})


GROUPS_PER_PAGE = 50


@reads_from_replica
@permission_needed("runs.view_run", "view runs")
@require_GET
def failure_groups(request):
    form = GroupFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        return render(request, "runs/failures.html", {"form": form, "groups": []}, status=400)
    filters = form.filters() if form.is_bound else failures.GroupFilters()
    number = _page(request)
    groups, more = failures.group_list(filters=filters, limit=GROUPS_PER_PAGE, offset=(number - 1) * GROUPS_PER_PAGE)
    context = {"form": form, "groups": groups, "more": more, "number": number, "trend_days": failures.TREND_DAYS}
    return render(request, "runs/failures.html#groups_table" if request.htmx else "runs/failures.html", context)
