"""What a call's session lock holds on PostgreSQL: its session and run rows, not its agent's nor its
owner's. A plain FOR UPDATE over the join locked those too: every session of one agent took turns, and
100 sessions at once deadlocked with the inserts of new sessions (which check the agent's key)."""
from __future__ import annotations

import threading
import uuid

import pytest
from django.db import close_old_connections, connection, transaction

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL only")]


def open_session(agent):
    from gateway import services

    return services.session_open(agent_id=agent.pk, token_id=None, mcp_session_id=uuid.uuid4().hex,
                                 client_name="pytest", client_version="1")


def test_a_call_holding_its_session_holds_up_no_other_session_of_the_agent(agent_token):
    from gateway import services

    agent, _token = agent_token()
    held = open_session(agent)
    other = open_session(agent)
    locked, release, errors = threading.Event(), threading.Event(), []

    def hold():
        try:
            with transaction.atomic():
                services._locked_session(held.pk)
                locked.set()
                release.wait(10)
        except Exception as exc:   # surfaced below
            errors.append(exc)
        finally:
            close_old_connections()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            # Another session's call, and a new session of the same agent (its insert checks the agent's
            # key, its run's insert the owner's): neither waits for the held call.
            assert services._locked_session(other.pk).agent_id == agent.pk
            assert open_session(agent).agent_id == agent.pk
    finally:
        release.set()
        holder.join(10)
    assert not errors
