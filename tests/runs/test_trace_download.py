"""The trace JSON download writes outputs and usage as stored, and stays valid JSON."""
from __future__ import annotations

import json
from datetime import UTC


def test_outputs_and_usage_come_through_unchanged(client_for, viewer, make_run, make_revision, make_step,
                                                 make_attempt):
    run = make_run(status="stopped", stop_reason="stalled")
    step = make_step(make_revision(run))
    tricky = {"text": 'quote " backslash \\ newline \n ünïcödé', "nested": [1, 2.5, None, True, {"k": []}]}
    from datetime import datetime

    at = datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)
    attempt = make_attempt(step, number=1, output=tricky, signature_hash="h1", started_at=at)
    make_attempt(step, number=2, output=None, signature_hash="h2", decision="")
    body = b"".join(client_for(viewer).get(f"/runs/{run.pk}/trace.json").streaming_content)
    first, second = json.loads(body)["attempts"]
    assert first["observation"]["output"] == tricky
    assert first["decision"]["usage"] == {"tool_calls": 1, "tokens": 100}
    assert first["decision"]["decision"] == "continue"
    assert first["started_at"] == "2026-03-04T05:06:07.000890Z"
    assert datetime.fromisoformat(first["ended_at"].replace("Z", "+00:00")) == attempt.ended_at
    assert second["observation"]["output"] is None and second["decision"] is None
