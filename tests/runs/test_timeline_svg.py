"""The timeline's SVG renderer: typed rows and numbers in, markup out, with nothing of Django in between."""
from pathlib import Path

import grimp

from runs.trace import timeline_svg as svg
from runs.trace.timeline_svg import ApprovalRow, AttemptRow, RevisionRow, RunFrame, TriggeringAttempt

ROOT = Path(__file__).resolve().parents[2]


def test_the_renderer_imports_nothing_of_django_nor_any_model():
    graph = grimp.build_graph("runs", "runtime", include_external_packages=True)
    imported = graph.find_upstream_modules("runs.trace.timeline_svg")
    assert not {m for m in imported if m.split(".")[0] in ("django", "rest_framework", "celery")}, imported
    assert not {m for m in imported if m.endswith(".models") or ".models." in m}, imported


def attempt(uid, started, ended, *, kind="call", status="ok", code="", capability="search", repeated=False,
            step_id=1, number=1, signature="sig"):
    return AttemptRow(uid=uid, started=started, ended=ended, kind=kind, status=status, error_code=code,
                      capability=capability, repeated=repeated, step_id=step_id, step_key="s1", revision=1,
                      number=number, signature_hash=signature)


FRAME = RunFrame(run_id=7, stop_reason="stalled", origin=1000.0, end=1010.0, finished=True, stop_uid="c",
                 stop_kind="attempt")


def test_it_draws_a_repeat_its_wait_and_the_stop_from_rows_alone():
    rows = [attempt("a", 1001.0, 1002.0, status="retryable", code="timeout"),
            attempt("b", 1004.0, 1005.0, kind="retry", number=2),
            attempt("c", 1007.0, 1008.0, kind="retry", status="retryable", code="timeout", repeated=True, number=3)]
    revisions = [RevisionRow(number=1, reason_code="initial", accepted=True, created=1000.5, trigger=None),
                 RevisionRow(number=2, reason_code="result_not_found", accepted=False, created=1009.0,
                             trigger=TriggeringAttempt(uid="c", capability="search", number=3, status="retryable",
                                                       error_code="timeout", ended=1008.0))]
    approvals = [ApprovalRow(kind="step", step_key="s1", state="approved", requested=1000.6, decided=1000.9)]
    markup = svg.render_attempts(FRAME, rows, revisions, approvals)
    assert markup.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and markup.endswith("</svg>")
    assert "<title id=\"timeline-title\">Timeline of run 7</title>" in markup
    assert "3 attempts over 10.0 s in 4 lanes; stopped: stalled" in markup  # Planner, Approvals, Waits, search
    assert "backoff before retry r1·s1#2: 2.0 s" in markup
    assert "r1·s1#3 retry search: retryable timeout; repeats r1·s1#1 without progress; stopped the run" in markup
    assert 'class="repeat-link"><title>r1·s1#3 repeats r1·s1#1</title>' in markup
    assert "planner: revision 2 (result_not_found, rejected) after search #3 (retryable timeout)" in markup
    assert "approval of step s1: approved, waited 0 s" in markup
    assert 'class="stop-line"><title>stopped: stalled</title>' in markup


def test_it_escapes_what_the_rows_hold():
    rows = [attempt("a", 1001.0, 1002.0, capability="<b>&'\"")]
    markup = svg.render_attempts(FRAME, rows, [], [])
    assert "<b>" not in markup and "&lt;b&gt;&amp;&#x27;&quot;" in markup


def test_nothing_recorded_draws_nothing():
    assert svg.render_attempts(FRAME, [], [], []) is None
