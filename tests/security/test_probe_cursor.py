"""Forged page cursors (`?after=`, `?before=`) on every keyset list, page and API: a 400 saying the
cursor is invalid, never a 500, on both stacks."""
from __future__ import annotations

import base64

import pytest

pytestmark = pytest.mark.django_db


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


CURSORS = {
    "deep": _cursor("[" * 3000 + "]" * 3000),                              # RecursionError
    "id-past-64-bits": _cursor(f'["2026-01-01T00:00:00+00:00", {2**64}]'),  # OverflowError on SQLite
    "id-past-a-float": _cursor(f'["2026-01-01T00:00:00+00:00", 1{"0" * 400}]'),
    "before-year-1-in-utc": _cursor('["0001-01-01T00:00:00+05:00", 1]'),   # OverflowError converting to UTC
    "after-9999-in-utc": _cursor('["9999-12-31T23:59:59-05:00", 1]'),
    "nul": _cursor('["2026-01-01\\u0000", 1]'),
    "nan": _cursor("[NaN, 1]"),
    "list": _cursor("[[1], 1]"),                                          # a generated column took anything
    "object": _cursor('[{"a": 1}, 1]'),
    "truncated": "abc",
}
LISTS = ["/runs/?after=", "/runs/?before=", "/runs/?sort=-tokens&after=", "/runs/?sort=-cost&after=",
         "/runs/?sort=tool_calls&before=", "/runs/calls/?after=", "/audit/?after=", "/api/runs/?after=",
         "/api/calls/?after=", "/api/audit/?after="]


@pytest.fixture
def admin(db):
    from django.contrib.auth.models import User

    return User.objects.create_superuser("root", "root@example.com", "pw-root-long-enough")


@pytest.mark.parametrize("name", list(CURSORS))
def test_a_forged_cursor_is_a_400_on_every_list(client, admin, name):
    client.force_login(admin)
    client.raise_request_exception = False   # every failing list named, not the first one raised
    answers = {url: client.get(url + CURSORS[name]).status_code for url in LISTS}
    assert answers == dict.fromkeys(LISTS, 400)


@pytest.mark.parametrize("sort, field", [("-tokens", "final_tokens"), ("-created", "created_at"),
                                         ("-cost", "final_cost")])
def test_a_cursor_the_list_hands_out_still_pages(client, admin, sort, field):
    from django.utils import timezone

    from core.pagination import encode_cursor
    from runs.models import Run

    for n in range(3):
        Run.objects.create(goal=f"goal {n}", completion={"capability": "x", "path": "id", "exists": True},
                           budgets={"deadline_s": 60}, planner="scripted", owner=admin, status="stopped",
                           stop_reason="stalled", trace_id=f"{n}" * 32, started_at=timezone.now(),
                           finished_at=timezone.now(), tokens=10 * n, cost=0.5 * n)
    first = Run.objects.order_by(f"-{field}", "-id").first()
    client.force_login(admin)
    response = client.get(f"/runs/?sort={sort}&after={encode_cursor(getattr(first, field), first.pk)}")
    assert response.status_code == 200
    assert "goal 1" in response.content.decode() and "goal 2" not in response.content.decode()
