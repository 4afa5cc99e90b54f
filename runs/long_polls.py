"""The per-user cap on open planning long polls, counted in the database so it holds across web processes.

A long poll takes a slot before it waits and gives it back when it answers (or its client goes
away). A slot also ends on its own at expires_at, so the slots of a web process that died stop
counting within GRACE_S of their wait.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from core.errors import TooBusy
from runs.models import OpenLongPoll

# How long a slot outlives its wait: the answer's own work, a slow client.
GRACE_S = 10


@transaction.atomic
def long_poll_open(*, user_id: int, run_id: int, wait_s: int) -> int:
    """Take one of the user's long-poll slots for `wait_s` seconds; raise TooBusy when all are taken."""
    # Opens by one user are serialized on their row, so two processes never both take the last slot;
    # FOR NO KEY UPDATE: the user's other work (rows that refer to them check their key) goes on.
    list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user_id).values_list("pk", flat=True))
    now = timezone.now()
    OpenLongPoll.objects.filter(user_id=user_id, expires_at__lte=now).delete()
    open_ends = list(OpenLongPoll.objects.filter(user_id=user_id).order_by("expires_at")
                     .values_list("expires_at", flat=True)[:settings.AGENTOPS_LONG_POLL_MAX_PER_USER])
    if len(open_ends) >= settings.AGENTOPS_LONG_POLL_MAX_PER_USER:
        retry_after = (open_ends[0] - now).total_seconds() - GRACE_S
        raise TooBusy(f"You already hold {len(open_ends)} open long polls, the most one user may "
                      f"(AGENTOPS_LONG_POLL_MAX_PER_USER); retry when one has answered.", retry_after=retry_after)
    slot = OpenLongPoll.objects.create(user_id=user_id, run_id=run_id,
                                       expires_at=now + timedelta(seconds=wait_s + GRACE_S))
    return slot.pk


def long_poll_close(*, slot_id: int) -> None:
    OpenLongPoll.objects.filter(pk=slot_id).delete()
