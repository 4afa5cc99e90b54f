"""Registry-wide rate limits: refusals are waits, admission is atomic across workers."""
import threading

import pytest
from django.db import connection

from capabilities.models import RateLimitWindow
from capabilities.ratelimit import RateLimitedExecutor, admit, as_observation
from core.projects import active_project_id, project_scope
from runs.models import Run
from runtime.capability import CapabilitySpec, RateLimit
from runtime.observation import AdmissionRefused, Observation

SPEC = CapabilitySpec(name="limited", rate_limit=RateLimit(2, 60.0))


@pytest.mark.django_db
class TestAdmit:
    def test_it_admits_up_to_the_limit_then_says_how_long_to_wait(self):
        assert admit(SPEC, now=1000.0) is None
        assert admit(SPEC, now=1010.0) is None
        assert admit(SPEC, now=1020.0) == pytest.approx(40.0)
        # Refusals take no slot: the window still holds exactly the two admissions.
        assert RateLimitWindow.objects.get(capability_name="limited").admitted == [1000.0, 1010.0]

    def test_the_window_slides(self):
        admit(SPEC, now=1000.0), admit(SPEC, now=1010.0)
        assert admit(SPEC, now=1060.5) is None
        assert RateLimitWindow.objects.get(capability_name="limited").admitted == [1010.0, 1060.5]

    def test_a_capability_without_a_limit_is_always_admitted_and_stores_nothing(self):
        assert admit(CapabilitySpec(name="free")) is None
        assert not RateLimitWindow.objects.exists()

    def test_the_executor_refuses_without_calling_the_callee(self):
        calls = []

        class Inner:
            def execute(self, spec, arguments, **kw):
                calls.append(arguments)
                return Observation.success({"ok": True})

        executor = RateLimitedExecutor(Inner())
        one = CapabilitySpec(name="one", rate_limit=RateLimit(1, 60.0))
        assert executor.execute(one, {"n": 1}).status.value == "ok"
        refused = executor.execute(one, {"n": 2})
        assert isinstance(refused, AdmissionRefused) and 59 < refused.retry_after_s <= 60
        assert calls == [{"n": 1}]
        shown = as_observation(refused)
        assert shown.error_code.value == "rate_limited" and shown.retry_after_s == refused.retry_after_s


@pytest.mark.django_db(transaction=True)
def test_concurrent_admissions_never_overshoot_the_limit():
    """Eight threads, each with its own database connection, race for three slots."""
    spec = CapabilitySpec(name="raced", rate_limit=RateLimit(3, 60.0))
    admit(CapabilitySpec(name="raced"))  # no limit: nothing created
    results, barrier = [], threading.Barrier(8)
    project_id = active_project_id()   # each worker's pass acts in the run's project

    def contend():
        try:
            barrier.wait()
            with project_scope(project_id):
                results.append(admit(spec))
        finally:
            connection.close()

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is None for r in results) == 3
    assert len(RateLimitWindow.objects.get(capability_name="raced").admitted) == 3
    assert not Run.objects.exists()
