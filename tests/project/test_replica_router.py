"""Which database a read goes to (core/replica.py); the real replica is in test_read_replica.py."""
from django.test import RequestFactory

from core import replica
from core.replica import REPLICA, ReplicaRouter, RequestReads, reads_from_replica
from runs.models import Run

router = ReplicaRouter()


def in_request(state):
    token = replica._request.set(state)
    return lambda: replica._request.reset(token)


def test_outside_a_request_everything_uses_the_primary():
    assert router.db_for_read(Run) == "default" and router.db_for_write(Run) == "default"


def test_a_write_turns_the_rest_of_the_requests_reads_to_the_primary():
    state = RequestReads(reads_from=REPLICA)
    done = in_request(state)
    try:
        assert router.db_for_read(Run) == REPLICA
        assert router.db_for_write(Run) == "default"
        assert router.db_for_read(Run) == "default" and state.wrote
    finally:
        done()


def test_migrations_run_on_the_primary_only():
    assert router.allow_migrate("default", "runs") and not router.allow_migrate(REPLICA, "runs")


def test_without_a_replica_a_marked_page_reads_the_primary(settings):
    assert REPLICA not in settings.DATABASES
    seen = []
    view = reads_from_replica(lambda request: seen.append(router.db_for_read(Run)) or "page")
    done = in_request(RequestReads())
    try:
        assert view(RequestFactory().get("/runs/")) == "page" and seen == ["default"]
    finally:
        done()


def test_a_streamed_download_reads_each_chunk_from_the_replica_until_something_writes():
    state = RequestReads()

    def chunks():
        yield router.db_for_read(Run)
        yield router.db_for_read(Run)
        router.db_for_write(Run)
        yield router.db_for_read(Run)

    assert list(replica._reading_from_replica(state, chunks())) == [REPLICA, REPLICA, "default"]
    assert state.reads_from == "default" and replica._request.get() is None
