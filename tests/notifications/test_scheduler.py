"""The production path: celery beat ticks, a real worker finds the event and emails a real SMTP server."""
import subprocess
import sys

import pytest

from notifications import services
from notifications.models import Delivery
from runs import services as run_services
from runs.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_approval_request_reaches_the_inbox_through_beat_and_a_worker(
        celery_worker, worker_env, tmp_path, operator, inbox, wait_until):
    from django.conf import settings

    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    mail = services.channel_save(user=operator, name="ops mail", url=inbox.url)
    services.rule_save(user=operator, name="approvals", event="approval_requested", channel_ids=[mail.pk])
    # A second channel that can never work (nothing listens on port 9): it must hold up nothing.
    dead = services.channel_save(user=operator, name="dead", url=inbox.url.replace(str(inbox.port), "9"))
    services.rule_save(user=operator, name="approvals, dead", event="approval_requested", channel_ids=[dead.pk])
    run = run_services.run_start(
        owner=operator, goal="Open a ticket", planner="scripted",
        planner_config={"plans": [[{"capability": "create_ticket", "arguments": {"title": "Printer on fire"}}]]},
        completion={"capability": "create_ticket", "path": "ticket_id", "exists": True}, budgets={"deadline_s": 300})
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "beat", "--loglevel", "WARNING",
         "-s", str(tmp_path / "beat-schedule")],
        cwd=settings.BASE_DIR, env={**worker_env, "AGENTOPS_NOTIFY_INTERVAL_S": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: Run.objects.get(pk=run.pk).status == "awaiting_approval", message="the approval request")
        wait_until(lambda: inbox.messages, timeout=60, message="the email")
    finally:
        beat.terminate()
        beat.wait(timeout=20)
    mail_text = inbox.messages[0]["content"]
    assert f"Approval needed: run #{run.pk}" in mail_text and "/runs/approvals/#approval-" in mail_text
    sent = Delivery.objects.get(channel=mail)
    assert sent.status == "sent" and sent.run_id == run.pk
    failing = Delivery.objects.get(channel=dead)
    assert failing.status in ("pending", "failed") and failing.attempts >= 1 and failing.last_error
