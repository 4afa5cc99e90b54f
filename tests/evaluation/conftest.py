"""Fixtures for the evaluation tests: the bundled suite synced, evaluations run in-process."""
from __future__ import annotations

import pytest


@pytest.fixture
def standard_suite(db):
    from evaluation.services import evaluation_suites_sync

    return next(s for s in evaluation_suites_sync() if s.name == "standard")


@pytest.fixture
def run_suite(db):
    """Run an evaluation of a suite now, in this process, through the production runner."""
    from evaluation.services import evaluation_run_now

    def run(suite, user, label=""):
        return evaluation_run_now(user=user, suite_id=suite.pk, label=label)

    return run


@pytest.fixture
def small_suite(db):
    """A two-task suite: a simple lookup and an empty result that needs a broader query."""
    import json

    from evaluation.models import EvaluationSuite
    from evaluation.suites import SUITES_DIR

    tasks = json.loads((SUITES_DIR / "standard.json").read_text())["tasks"]
    chosen = [t for t in tasks if t["name"] in ("lookup-policy-by-id", "empty-result-needs-broader-query")]
    return EvaluationSuite.objects.create(name="small", description="two tasks", tasks=chosen)
