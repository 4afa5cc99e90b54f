"""Fixtures for the review tests: the reviewer role, a finished run with one attempt, and a hostile corpus."""
from __future__ import annotations

import itertools
import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest

_seq = itertools.count(1)

# Every new text field is fed these; none may come back as live markup on a page or in the API's html.
XSS_CORPUS = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(2)">',
    "<svg/onload=alert(3)>",
    "[click](javascript:alert(4))",
    '"><iframe src="javascript:alert(5)"></iframe>',
    "<a href='data:text/html,<script>alert(6)</script>'>x</a>",
    "{{ 7|safe }} {% now 'Y' %}",
    '<div style="background:url(javascript:alert(8))">',
    "![x](javascript:alert(9))",
    "<details open ontoggle=alert(10)>",
]
# What would run, were any of the corpus rendered as markup. Read with an HTML parser, as a browser
# reads it: escaped text (&lt;img ...) and attribute values are not markup.
_LIVE_TAGS = {"script", "img", "svg", "iframe", "style", "object", "embed", "math"}
# Rendered markdown has no business holding these at all (a page's own markup may: its forms).
_FORM_TAGS = {"details", "form", "input", "button", "textarea", "select"}
_URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href"}


class _Markup(HTMLParser):
    def __init__(self, *, page: bool):
        super().__init__()
        self.page, self.problems = page, []

    def handle_starttag(self, tag, attrs):
        own_script = self.page and tag == "script" and dict(attrs).get("src", "").startswith("/static/")
        if (tag in _LIVE_TAGS or (not self.page and tag in _FORM_TAGS)) and not own_script:
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on") or name == "style":
                self.problems.append(f"<{tag} {name}=...>")
            if name in _URL_ATTRIBUTES and re.match(r"\s*(javascript|data|vbscript):", value or "", re.I):
                self.problems.append(f"<{tag} {name}={value[:40]}>")


def assert_inert(html: str, *, page: bool = False) -> None:
    parser = _Markup(page=page)
    parser.feed(html)
    parser.close()
    assert not parser.problems, parser.problems


@pytest.fixture
def finished_run(db, operator):
    """A stopped run with one step and one attempt, written as the worker writes them."""
    from django.utils import timezone

    from runs.models import Attempt, PlanRevision, Run, Step

    now = timezone.now()
    run = Run.objects.create(
        goal="Find the travel policy", completion={"capability": "search_documents", "path": "id", "exists": True},
        budgets={"deadline_s": 60}, planner="scripted", owner=operator, status="stopped", stop_reason="stalled",
        stop_detail="The same search failed twice.", trace_id=f"trace{next(_seq):027d}", started_at=now,
        finished_at=now)
    revision = PlanRevision.objects.create(run=run, number=1, accepted=True, steps=[], reason_code="initial")
    step = Step.objects.create(run=run, revision=revision, index=0, key="s1", capability_name="search_documents",
                               arguments={"q": "travel"}, arguments_hash="h")
    Attempt.objects.create(run=run, step=step, uid=f"a{next(_seq):08d}", number=1, capability_name="search_documents",
                           signature="search_documents:{}", signature_hash="sig", started_at=now,
                           ended_at=now + timedelta(seconds=1), latency_s=1, status="terminal", error_code="not_found",
                           trace_id=run.trace_id, span_id="span0000000001")
    return run


@pytest.fixture
def attempt(finished_run):
    return finished_run.attempts.get()


@pytest.fixture
def configs(db):
    """Three configs a reviewer scores with, one of each kind."""
    from review.models import ScoreConfig

    return {
        "helpful": ScoreConfig.objects.create(name="helpful", kind="numeric", min_value=1, max_value=5,
                                              description="How helpful the run was, 1 to 5."),
        "verdict": ScoreConfig.objects.create(name="verdict", kind="categorical",
                                              categories=["good", "bad", "unclear"]),
        "safe": ScoreConfig.objects.create(name="safe", kind="boolean"),
    }
