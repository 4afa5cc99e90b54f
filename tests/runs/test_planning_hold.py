"""The long polls' watcher (runs.planning_hold.RunWatch): one batch read per interval wakes exactly the
polls whose run changed; a poll also ends on its timeout or when its client goes away."""
from __future__ import annotations

import asyncio
import threading

from runs.planning_hold import RunWatch
from runs.planning_needs import PlanningMoment


def moment(revision=1, status="running") -> PlanningMoment:
    return PlanningMoment(needs_plan=False, plan_submitted=True, revision=revision, status=status, stop_reason="",
                          usage=(0, 0, 0, 0, 0.0))


class FakeRuns:
    """What the watcher reads, as db(planning_moments_of) would return it; counts the reads."""

    def __init__(self, moments):
        self.moments = dict(moments)
        self.reads: list[list[int]] = []
        self.fail = False

    def db(self, fn):
        async def read(run_ids):
            self.reads.append(sorted(run_ids))
            if self.fail:
                raise ConnectionError("database down")
            return {run_id: self.moments[run_id] for run_id in run_ids if run_id in self.moments}
        return read


def run_async(coroutine):
    """In a thread of its own: a browser test's event loop may hold this thread (pitfalls)."""
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", asyncio.run(coroutine)))
    thread.start()
    thread.join(30)
    return result["value"]


def test_one_read_per_interval_wakes_only_the_polls_whose_run_changed():
    runs = FakeRuns({1: moment(), 2: moment(), 3: moment()})

    async def scenario():
        watch = RunWatch(runs.db)
        polls = [asyncio.ensure_future(watch.until_changed(run_id, moment(), 5)) for run_id in (1, 2, 3) * 13]
        await asyncio.sleep(0.6)   # two intervals or so: nothing changed, nobody woken
        assert not any(p.done() for p in polls)
        runs.moments[2] = moment(revision=2)
        await asyncio.wait([p for i, p in enumerate(polls) if i % 3 == 1], timeout=3)
        woken = [i % 3 for i, p in enumerate(polls) if p.done()]
        for p in polls:
            p.cancel()
        return woken

    woken = run_async(scenario())
    assert woken == [1] * 13   # the 13 polls on run 2, and only those
    assert all(read == [1, 2, 3] for read in runs.reads) and len(runs.reads) < 20   # one read per interval


def test_a_poll_ends_at_its_timeout_and_the_watcher_stops_with_the_last_one():
    runs = FakeRuns({1: moment()})

    async def scenario():
        watch = RunWatch(runs.db)
        await watch.until_changed(1, moment(), 0.6)
        return watch

    watch = run_async(scenario())
    assert watch.waiting == {} and watch.poller is None


def test_a_poll_ends_when_its_client_goes_away():
    runs = FakeRuns({1: moment()})

    async def scenario():
        watch = RunWatch(runs.db)
        gone = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.1, gone.set_result, {"type": "http.disconnect"})
        started = asyncio.get_running_loop().time()
        await watch.until_changed(1, moment(), 20, gone)
        return asyncio.get_running_loop().time() - started

    assert run_async(scenario()) < 10


def test_a_vanished_run_or_a_failed_read_wakes_its_polls():
    runs = FakeRuns({})   # the run is gone

    async def vanished():
        await RunWatch(runs.db).until_changed(1, moment(), 20)

    run_async(vanished())
    failing = FakeRuns({1: moment()})
    failing.fail = True

    async def failed():
        await RunWatch(failing.db).until_changed(1, moment(), 20)

    run_async(failed())
    assert failing.reads
