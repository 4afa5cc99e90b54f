"""A call that takes a while is shown on the trace while it runs, and cleared when it returns."""
import logging
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from runs.models import Run
from runs.trace.calls_in_flight import AnnouncedCalls


class SlowExecutor:
    def __init__(self, run_id, seconds):
        self.run_id, self.seconds, self.seen = run_id, seconds, None
        self.released = threading.Event()

    def execute(self, spec, arguments, **kw):
        # What the trace reads while the call runs.
        self.released.wait(self.seconds)
        self.seen = Run.objects.get(pk=self.run_id).call_in_flight
        return "observation"


@pytest.mark.django_db(transaction=True)
def test_a_slow_call_is_shown_while_it_runs_and_cleared_after(make_run):
    run = make_run(status="running")
    inner = SlowExecutor(run.pk, 0.5)
    calls = AnnouncedCalls(inner, run.pk, announce_after_s=0.05)
    spec = SimpleNamespace(name="search_documents")
    assert calls.execute(spec, {"q": "travel"}, timeout_s=30, attempt=1) == "observation"
    assert inner.seen["capability"] == "search_documents" and inner.seen["arguments"] == {"q": "travel"}
    assert inner.seen["timeout_s"] == 30 and inner.seen["attempt"] == 1
    assert Run.objects.get(pk=run.pk).call_in_flight is None


@pytest.mark.django_db(transaction=True)
def test_a_call_shown_while_the_database_is_down_is_a_warning_and_the_call_goes_on(make_run, monkeypatch):
    from django.db import OperationalError
    from django.db.models import QuerySet

    from runs.trace import calls_in_flight

    run = make_run(status="running")

    def down(self, **fields):
        raise OperationalError("connection refused")

    monkeypatch.setattr(QuerySet, "update", down)
    # The module's own log, recorded here: caplog's root handler depends on what earlier tests in the
    # process did to the logging tree (once, in CI, this record never reached it).
    records: list[logging.LogRecord] = []
    recorder = logging.Logger("runs.trace.calls_in_flight", logging.WARNING)
    recorder.addHandler(type("Records", (logging.Handler,), {"emit": lambda self, r: records.append(r)})())
    monkeypatch.setattr(calls_in_flight, "log", recorder)

    def shown():
        return list(records)

    def slow_call(spec, arguments, **kw):   # runs until the announcement was tried (a loaded machine is slow)
        deadline = time.monotonic() + 30
        while not shown() and time.monotonic() < deadline:
            time.sleep(0.01)
        return "observation"

    calls = AnnouncedCalls(SimpleNamespace(execute=slow_call), run.pk, announce_after_s=0.01)
    assert calls.execute(SimpleNamespace(name="search_documents"), {"q": "x"}, timeout_s=30, attempt=1) == "observation"
    (record,) = shown()
    assert (record.levelname, record.getMessage(), record.exc_info) == (
        "WARNING", f"run {run.pk}: could not show the call in flight: database unavailable", None)


@pytest.mark.django_db(transaction=True)
def test_a_fast_call_writes_nothing(make_run, django_assert_num_queries):
    run = make_run(status="running")
    calls = AnnouncedCalls(SimpleNamespace(execute=lambda spec, arguments, **kw: "ok"), run.pk, announce_after_s=5)
    with django_assert_num_queries(0):
        assert calls.execute(SimpleNamespace(name="x"), {}, timeout_s=1) == "ok"


def test_the_trace_shows_the_call_with_its_elapsed_time_and_timeout(client_for, viewer, make_run, make_revision,
                                                                    make_step):
    started = datetime.now(UTC) - timedelta(seconds=12)
    run = make_run(status="running", call_in_flight={"capability": "search_documents", "arguments": {"q": "travel"},
                                                     "attempt": 1, "timeout_s": 20, "started_at": started.isoformat()})
    make_step(make_revision(run))
    body = client_for(viewer).get(f"/runs/{run.pk}/").content.decode()
    assert "Calling search_documents" in body and "{&quot;q&quot;: &quot;travel&quot;}" in body
    # The page counts from the call's start to when it renders: 12 s, or a little more on a slow machine.
    elapsed = re.search(r">(\d+) s</strong> of a 20 s timeout · attempt 1", body)
    assert elapsed and 12 <= int(elapsed[1]) <= 20
    Run.objects.filter(pk=run.pk).update(status="completed", stop_reason="completed", finished_at=started)
    assert "Calling search_documents" not in client_for(viewer).get(f"/runs/{run.pk}/").content.decode()
