"""Two runs side by side (runs.trace.compare_page builds the page's data): `/runs/compare/?a=<id>&b=<id>`.

Reached from the runs list (tick two runs, Compare: the form sends `run` twice, which is
redirected to the page's own address), from an evaluation's twin runs, and by URL.
"""
from __future__ import annotations

from urllib.parse import urlencode

from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from core.permissions import bad_request, permission_needed
from core.replica import reads_from_replica
from runs.trace.compare_page import ATTEMPTS_SHOWN, RunMissing, compare_page, compare_runs_get

TRUE_WORDS = ("1", "on", "true", "yes")


def compare_url(a_id: int, b_id: int, **more) -> str:
    return f"{reverse('runs:compare')}?{urlencode({'a': a_id, 'b': b_id, **more})}"


def _run_id(raw: str) -> int | None:
    try:
        value = int(raw.strip())
    except (ValueError, AttributeError):
        return None
    return value if 0 < value < 2**63 else None


def compare_ids(query) -> tuple[int, int] | str:
    """The two run ids a query asks for, or what is wrong with it (in words, naming the field)."""
    ids = []
    for field in ("a", "b"):
        raw = query.get(field)
        if not raw:
            return f"Say which runs to compare: “{field}” is missing (/runs/compare/?a=<run id>&b=<run id>)."
        value = _run_id(raw)
        if value is None:
            return f"“{field}” must be a run id (a whole number), not “{raw[:40]}”."
        ids.append(value)
    if ids[0] == ids[1]:
        return f"“a” and “b” are the same run (#{ids[0]}): choose two different runs."
    return ids[0], ids[1]


def _page_int(raw) -> int:
    try:
        return min(max(1, int(raw or 1)), 1_000_000)
    except ValueError:
        return 1


@reads_from_replica
@permission_needed("runs.view_run", "view runs")
@require_GET
def run_compare(request):
    picked = request.GET.getlist("run")
    if picked and "a" not in request.GET and "b" not in request.GET:
        # The runs list's checkboxes: exactly two, then the page's own address.
        if len(picked) != 2:
            return bad_request(request, f"Tick two runs to compare (you ticked {len(picked)}).")
        found = compare_ids({"a": picked[0], "b": picked[1]})
        return bad_request(request, found) if isinstance(found, str) else redirect(compare_url(*found))
    found = compare_ids(request.GET)
    if isinstance(found, str):
        return bad_request(request, found)
    try:
        a, b = compare_runs_get(a_id=found[0], b_id=found[1])
    except RunMissing as exc:
        template = "forbidden.html#message" if request.htmx else "forbidden.html"
        return render(request, template, {"message": exc.message, "title": "Not found"}, status=404)
    differences_only = request.GET.get("differences", "").lower() in TRUE_WORDS
    page = compare_page(a, b, page_number=_page_int(request.GET.get("page")), differences_only=differences_only)
    context = {**page.context(), "sides": [page.a, page.b], "attempts_shown": ATTEMPTS_SHOWN, "swap_url": compare_url(b.pk, a.pk),
               "differences_url": compare_url(a.pk, b.pk, **({} if differences_only else {"differences": 1}))}
    template = "runs/compare.html#compare_steps" if request.htmx else "runs/compare.html"
    return render(request, template, context)
