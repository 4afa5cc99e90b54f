"""The runs list's filters: one form, one meaning, for the runs list page and for bulk actions.

The page binds it to its query string; a bulk action (runs.bulk) stores that same query
string and selects its runs again from it with `filters_from_query`, so "the runs these
filters show" means the same thing on the page and in the job.
"""
from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.http import QueryDict

from capabilities.models import Capability
from core.choices import RunStatus, StopReason
from core.errors import InvalidInput, ServiceError
from runs import explorer, search, selectors
from runs.labels import label_filters_parse
from runs.models import Planner
from runtime.stop import StopKind

SORT_CHOICES = [("-created", "newest first"), ("created", "oldest first"), ("-finished", "finished, latest first"),
                ("finished", "finished, earliest first"), ("-tool_calls", "finished, most tool calls"),
                ("tool_calls", "finished, fewest tool calls"), ("-tokens", "finished, most tokens"),
                ("tokens", "finished, fewest tokens"), ("-cost", "finished, highest cost"),
                ("cost", "finished, lowest cost")]


class RunFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "any"), ("active", "active (queued, running, awaiting approval)"),
                                        ("finished", "finished (any outcome)")] + RunStatus.choices, required=False)
    stop_reason = forms.ChoiceField(label="Stop reason", choices=[("", "any")] + StopReason.choices, required=False)
    capability = forms.ChoiceField(label="Capability used", choices=[("", "any")], required=False)
    owner = forms.ChoiceField(choices=[("", "anyone")], required=False)
    planner = forms.ChoiceField(choices=[("", "any")] + Planner.choices, required=False)
    created_from = forms.DateTimeField(label="Created from", required=False,
                                       widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    created_to = forms.DateTimeField(label="Created to", required=False,
                                     widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    sort = forms.ChoiceField(label="Sort by", choices=SORT_CHOICES, required=False)
    label = forms.CharField(label="Labels", required=False, max_length=1000,
                             widget=forms.TextInput(attrs={"placeholder": "team=payments, agent"}))
    goal = forms.CharField(label="Goal contains", required=False, max_length=200)
    q = forms.CharField(label="Search", required=False, max_length=explorer.MAX_QUERY_CHARS,
                        help_text='Goals, stop details, and the arguments, outputs and errors of tool calls; '
                                  'words and "quoted phrases", all must match.')
    evaluation_runs = forms.ChoiceField(label="Evaluation runs", required=False, choices=[
        ("hide", "hidden"), ("show", "shown"), ("only", "only these")])
    # Reached from the dashboard's links; shown only while set.
    stop_kind = forms.ChoiceField(label="Stop kind", required=False, choices=[
        ("", "any"), (StopKind.BUDGET_EXHAUSTED.value, "a budget ran out"),
        (StopKind.TERMINAL_FAILURE.value, "a terminal failure")])
    stop_capability = forms.CharField(label="Stopped at capability", required=False, max_length=80)
    finished_from = forms.DateTimeField(label="Finished from", required=False,
                                        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    finished_to = forms.DateTimeField(label="Finished to", required=False,
                                      widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    repeated = forms.BooleanField(label="With repeated attempts", required=False)
    DRILL_DOWN = ("stop_kind", "stop_capability", "finished_from", "finished_to", "repeated")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        search.add_stall_kind_field(self)
        # Registries and teams are small; these stay one query each however many runs exist.
        capability, owner = self.fields["capability"], self.fields["owner"]
        assert isinstance(capability, forms.ChoiceField) and isinstance(owner, forms.ChoiceField)  # declared above
        capability.choices = [("", "any"), *((n, n) for n in Capability.objects.order_by("name")
                                             .values_list("name", flat=True))]
        owner.choices = [("", "anyone"), *((n, n) for n in get_user_model().objects.filter(is_active=True)
                                           .order_by("username").values_list("username", flat=True))]

    def clean_label(self):
        wanted, problems = label_filters_parse(self.cleaned_data["label"])
        if problems:
            raise forms.ValidationError("; ".join(problems))
        return wanted

    def clean_q(self):
        try:
            explorer.search_terms(self.cleaned_data["q"])
        except ServiceError as exc:
            raise forms.ValidationError(exc.message) from None
        return self.cleaned_data["q"]

    def filters(self) -> selectors.RunFilters:
        # An invalid field is left out of cleaned_data: the other filters still apply.
        chosen = {k: v for k, v in self.cleaned_data.items() if v not in (None, "", False)}
        if "label" in chosen:
            chosen["labels"] = chosen.pop("label")
        return selectors.RunFilters(**chosen)

    def visible_fields_now(self):
        """The drill-down fields only while one of them is set, so the everyday form stays short."""
        data = self.data if self.is_bound else {}
        return [f for f in self if f.name not in self.DRILL_DOWN or data.get(f.name)]


# What a runs-list link carries besides its filters: paging, which selects no different runs.
PAGING_PARAMS = frozenset({"page", "after", "before"})
MAX_QUERY_CHARS = 2000


def filters_from_query(query: str) -> tuple[selectors.RunFilters, str]:
    """The runs list's query string as the filters it applies, and the query normalised (paging dropped).

    Stricter than the page, which shows a bad filter beside the runs and applies the others: a
    bulk action must not act on more runs than the person meant, so an unknown parameter or an
    invalid value is refused (InvalidInput naming it). Evaluation runs are hidden unless the query
    says otherwise, as on the page by default."""
    if not isinstance(query, str) or len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"The filter must be a runs-list query string of at most {MAX_QUERY_CHARS} characters.",
                           fields={"query": f"a query string, at most {MAX_QUERY_CHARS} characters"})
    data = search.list_params(QueryDict(query.lstrip("?"), mutable=True))
    for name in PAGING_PARAMS:
        data.pop(name, None)
    data.setdefault("evaluation_runs", "hide")
    form = RunFilterForm(data)
    unknown = sorted(set(data.keys()) - set(form.fields))
    if unknown:
        raise InvalidInput(f"Unknown filter{'s' if len(unknown) > 1 else ''} in the query: {', '.join(unknown)}.",
                           fields={"query": f"unknown filter: {', '.join(unknown)}"})
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in form.errors.items())
        raise InvalidInput(f"The filter is invalid: {problems}", fields={"query": problems})
    return form.filters(), search.view_query(data)
