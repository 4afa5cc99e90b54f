"""The per-user cap on open planning long polls (runs.long_polls), and the API's answer at the cap."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import TooBusy
from runs import services
from runs.long_polls import GRACE_S, long_poll_close, long_poll_open
from runs.models import OpenLongPoll
from tests.conftest import off_the_event_loop

STEP = {"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"}, "expected_outcome": "x"}


@pytest.fixture
def cap(settings):
    settings.AGENTOPS_LONG_POLL_MAX_PER_USER = 2
    return 2


@pytest.fixture
def waiting_run(db, operator, manual_advance):
    """An external run with its first plan submitted and nobody advancing it: a long poll on it waits."""
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    run = services.run_start(owner=operator, goal="Wait", planner="external", budgets={"deadline_s": 300},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True})
    services.plan_submit(run_id=run.pk, user=operator, revision=1, steps=[STEP])
    return run


class TestTheCap:
    def test_it_refuses_one_more_than_the_cap_saying_when_to_retry(self, cap, viewer):
        for _ in range(cap):
            long_poll_open(user_id=viewer.pk, run_id=1, wait_s=25)
        with pytest.raises(TooBusy, match="AGENTOPS_LONG_POLL_MAX_PER_USER") as refused:
            long_poll_open(user_id=viewer.pk, run_id=1, wait_s=25)
        assert 1 <= refused.value.retry_after <= 25

    def test_the_cap_is_per_user(self, cap, viewer, operator):
        for _ in range(cap):
            long_poll_open(user_id=viewer.pk, run_id=1, wait_s=25)
        assert long_poll_open(user_id=operator.pk, run_id=1, wait_s=25)

    def test_a_closed_slot_frees_its_place(self, cap, viewer):
        slots = [long_poll_open(user_id=viewer.pk, run_id=1, wait_s=25) for _ in range(cap)]
        long_poll_close(slot_id=slots[0])
        assert long_poll_open(user_id=viewer.pk, run_id=1, wait_s=25)

    def test_a_dead_processs_slots_stop_counting_when_they_expire(self, cap, viewer):
        for _ in range(cap):
            long_poll_open(user_id=viewer.pk, run_id=1, wait_s=25)
        OpenLongPoll.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        assert long_poll_open(user_id=viewer.pk, run_id=1, wait_s=25)
        assert OpenLongPoll.objects.filter(user=viewer).count() == 1   # the expired ones are gone

    def test_a_slot_lasts_its_wait_and_the_grace(self, viewer):
        slot = OpenLongPoll.objects.get(pk=long_poll_open(user_id=viewer.pk, run_id=1, wait_s=25))
        assert timedelta(seconds=25 + GRACE_S - 2) < slot.expires_at - timezone.now() <= timedelta(seconds=25 + GRACE_S)


@pytest.mark.django_db(transaction=True)   # the request may be served on a thread of its own (below)
class TestTheApiAtTheCap:
    """Through the DRF view as WSGI serves it (the view holds the wait itself, with a slot), on a thread
    without an event loop (tests.conftest.off_the_event_loop: after a browser test, Playwright's loop
    runs on this one). The ASGI path is tested in tests/security/test_web_starvation.py."""

    def test_one_more_long_poll_is_answered_429_with_retry_after(self, cap, waiting_run, viewer, api_for):
        for _ in range(cap):
            long_poll_open(user_id=viewer.pk, run_id=waiting_run.pk, wait_s=25)
        response = off_the_event_loop(api_for(viewer).get, f"/api/runs/{waiting_run.pk}/planning/", {"wait": 1})
        assert response.status_code == 429, response.content
        assert int(response["Retry-After"]) >= 1
        assert response.json()["error"]["code"] == "too_many_requests"
        # A read that waits for nothing takes no slot and is not refused.
        assert off_the_event_loop(api_for(viewer).get, f"/api/runs/{waiting_run.pk}/planning/").status_code == 200

    def test_a_long_poll_gives_its_slot_back_when_it_answers(self, cap, waiting_run, viewer, api_for):
        response = off_the_event_loop(api_for(viewer).get, f"/api/runs/{waiting_run.pk}/planning/", {"wait": 1})
        assert response.status_code == 200 and response.json()["plan_submitted"] is True
        assert not OpenLongPoll.objects.exists()

    def test_a_poll_with_nothing_to_wait_for_takes_no_slot(self, cap, viewer, operator, api_for, manual_advance):
        from capabilities.kinds.python.sync import python_capabilities_sync

        python_capabilities_sync()
        run = services.run_start(owner=operator, goal="Plan", planner="external", budgets={"deadline_s": 300},
                                 completion={"capability": "search_documents", "path": "a", "exists": True})
        for _ in range(cap):
            long_poll_open(user_id=viewer.pk, run_id=run.pk, wait_s=25)
        response = off_the_event_loop(api_for(viewer).get, f"/api/runs/{run.pk}/planning/", {"wait": 25})
        assert response.status_code == 200 and response.json()["needs_plan"] is True
