"""core.queue looks tasks up by name: many threads of a fresh process do it at once."""
import importlib
import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from core import queue

ROOT = Path(__file__).resolve().parents[2]

APP = """from celery import Celery
app = Celery("fresh", fixups=[], set_as_current=False)
app.autodiscover_tasks([__name__])
"""
# A slow import holds the window open in which the other threads look the task up.
TASKS = """import time
from {package} import app
time.sleep(0.3)

@app.task(name="fresh.slow", shared=False)
def slow():
    return "done"
"""


@pytest.fixture
def fresh_app(tmp_path, monkeypatch):
    """A Celery app whose tasks module nobody has imported yet, as in a web worker just started."""
    package = f"fresh_{uuid.uuid4().hex}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(APP)
    (tmp_path / package / "tasks.py").write_text(TASKS.format(package=package))
    monkeypatch.syspath_prepend(str(tmp_path))
    app = importlib.import_module(package).app
    monkeypatch.setattr(queue, "current_app", app)
    monkeypatch.setattr(queue, "_task_modules_imported", False)
    yield app
    for name in (package, f"{package}.tasks"):
        sys.modules.pop(name, None)


def test_it_finds_the_task_from_every_thread_of_a_fresh_app(fresh_app):
    gate = threading.Barrier(8)
    found, failed = [], []

    def look_up():
        gate.wait()
        try:
            found.append(queue.task("fresh.slow").name)
        except Exception as exc:  # noqa: BLE001 - counted, then asserted on
            failed.append(repr(exc))

    threads = [threading.Thread(target=look_up) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == [] and found == ["fresh.slow"] * 8


def test_an_unknown_name_is_still_not_registered(fresh_app):
    from celery.exceptions import NotRegistered

    with pytest.raises(NotRegistered):
        queue.task("fresh.nothing_by_this_name")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_no_first_start_on_a_fresh_gunicorn_worker_loses_its_task():
    """bench/first_starts.py at a reduced size: 10 fresh gunicorn (gthread) servers, 16 starts each."""
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "first_starts.py"), "--starts", "10",
                             "--concurrency", "16", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=230)
    assert result.stdout.strip(), result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["started"] == 160 and figures["other_statuses"] == [], figures["first_failing_log"]
    assert figures["not_registered"] == 0, figures["first_failing_log"]
    assert figures["queued"] == figures["started"]
