"""Searching runs beyond the plain column filters: labels, goal text, stall kind, `q`; saved views.

runs.selectors.run_list applies `apply_search`; the API applies the same function, so a
filter means the same thing on the page and in the API.
"""
from __future__ import annotations

from urllib.parse import urlencode

from django.db import transaction
from django.http import QueryDict

from core.choices import StallKind
from core.errors import InvalidInput
from runs.explorer import run_text_search
from runs.labels import runs_with_labels
from runs.models import Run, SavedView
from runtime.storable import UNSTORABLE, text_unstorable

MAX_SAVED_VIEWS = 50
# Query parameters a saved view keeps (paging is not a view).
VIEW_PARAMS = ("status", "stop_reason", "capability", "owner", "planner", "created_from", "created_to", "sort",
               "label", "goal", "stall_kind", "stop_kind", "stop_capability", "finished_from", "finished_to",
               "repeated", "evaluation_runs", "q")


def has_stall_kind() -> bool:
    """Runs record their stall kind once that field exists (added by another change)."""
    return any(f.name == "stall_kind" for f in Run._meta.get_fields())


def apply_search(runs, filters):
    if filters.labels:
        runs = runs_with_labels(runs, filters.labels)
    if filters.goal:
        runs = runs.filter(goal__icontains=filters.goal)
    if filters.stall_kind and has_stall_kind():
        runs = runs.filter(stall_kind=filters.stall_kind)
    if filters.q:
        runs = run_text_search(runs, filters.q)
    return runs


# -- saved views ------------------------------------------------------------------------------

def saved_views(*, user) -> list[SavedView]:
    return list(SavedView.objects.filter(user=user).order_by("name")) if user.is_authenticated else []


def list_params(params) -> QueryDict:
    """The runs list's query with its labels as one `label` value: `label=` is the name the API,
    the dashboard and the README use, repeatable; `labels=` (the page's old name) still works."""
    data = params.copy() if isinstance(params, QueryDict) else QueryDict(params, mutable=True)
    wanted = data.getlist("label") + data.getlist("labels")
    data.pop("labels", None)
    if wanted:
        data.setlist("label", [", ".join(v for v in wanted if v)])
    return data


def view_query(params) -> str:
    """The part of a runs-list query string worth saving, in a stable order."""
    pairs = list_params(params).lists()
    kept = [(k, v) for k, values in pairs if k in VIEW_PARAMS for v in values if v]
    return urlencode(sorted(kept))


@transaction.atomic
def saved_view_save(*, user, name: str, query: str) -> SavedView:
    """Save (or replace) the user's view of that name."""
    name = (name or "").strip()
    if not name or len(name) > 80:
        raise InvalidInput("Name the view (1-80 characters).", fields={"name": "1-80 characters"})
    if text_unstorable(name):
        raise InvalidInput(f"The view's name: {UNSTORABLE}.", fields={"name": "no NUL characters"})
    if len(query) > 2000:
        raise InvalidInput("These filters are too long to save.", fields={"query": "at most 2,000 characters"})
    query = view_query(query)
    existing = SavedView.objects.select_for_update().filter(user=user, name=name).first()
    if existing is None and SavedView.objects.filter(user=user).count() >= MAX_SAVED_VIEWS:
        raise InvalidInput(f"You have {MAX_SAVED_VIEWS} saved views: delete one first.")
    if existing is not None:
        existing.query = query
        existing.save(update_fields=["query"])
        return existing
    return SavedView.objects.create(user=user, name=name, query=query)


@transaction.atomic
def saved_view_delete(*, user, view_id: int) -> None:
    deleted, _ = SavedView.objects.filter(user=user, pk=view_id).delete()
    if not deleted:
        raise InvalidInput(f"You have no saved view {view_id}.")


def add_stall_kind_field(form) -> None:
    """The runs filter form gets a stall-kind choice once runs record it."""
    if not has_stall_kind():
        return
    from django import forms

    form.fields["stall_kind"] = forms.ChoiceField(label="Stall kind", choices=[("", "any"), *StallKind.choices],
                                                  required=False)
