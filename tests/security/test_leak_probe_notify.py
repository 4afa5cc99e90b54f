"""A channel's secrets never reach a delivery's error, however the send fails.

A channel URL may hold its secrets inline (a password, a token in the path or the query, a token
written as the user) or as ${AGENTOPS_NOTIFY_...} names. A send that fails may quote the URL it was
given: our sender's ChannelError, or a library's own exception (here the webhook sender made to fail
so, as a library bug would). Neither the error the outbox stores nor its log line keeps any of them.
"""
from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from notifications import channels, outbox, services
from notifications.errors import ChannelError
from notifications.models import Delivery
from notifications.senders import SENDERS

PASSWORD, PATH_TOKEN, QUERY_TOKEN, ENV_TOKEN = "pw-CANARY-1a", "path-CANARY-2b", "query-CANARY-3c", "env-CANARY-4d"
CANARIES = (PASSWORD, PATH_TOKEN, QUERY_TOKEN, ENV_TOKEN)


@pytest.fixture
def channel_url(settings, monkeypatch):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["hooks.example.com"]
    settings.AGENTOPS_NOTIFY_SECRET_BINDINGS = {"AGENTOPS_NOTIFY_HOOK": {"hosts": ["hooks.example.com"], "channels": []}}
    monkeypatch.setenv("AGENTOPS_NOTIFY_HOOK", ENV_TOKEN)
    return (f"json://ops:{PASSWORD}@hooks.example.com/hooks/{PATH_TOKEN}/${{AGENTOPS_NOTIFY_HOOK}}"
            f"?token={QUERY_TOKEN}")


def _quoting(error_class):
    def send(self, plugin, **kwargs):
        raise error_class(f"POST https://ops:{PASSWORD}@hooks.example.com/hooks/{PATH_TOKEN}/{ENV_TOKEN}"
                          f"?token={QUERY_TOKEN} failed: 502 (token {QUERY_TOKEN.replace('-', '%2D')})")
    return send


@pytest.mark.parametrize("error_class", [ChannelError, RuntimeError], ids=["our error", "a library's"])
def test_a_send_error_quoting_the_url_keeps_none_of_its_secrets(channel_url, monkeypatch, error_class):
    monkeypatch.setattr(type(SENDERS["json"]), "send", _quoting(error_class))
    with pytest.raises(ChannelError) as raised:
        channels.send(channel_url, title="t", body="b", channel="ops")
    message = str(raised.value)
    assert "hooks.example.com" in message and "502" in message   # still says what happened
    assert not [c for c in CANARIES if c in message], message


def test_the_outbox_stores_and_logs_a_library_error_scrubbed(channel_url, monkeypatch, operator, caplog, db):
    monkeypatch.setattr(type(SENDERS["json"]), "send", _quoting(RuntimeError))
    channel = services.channel_save(user=operator, name="ops", url=channel_url)
    delivery = Delivery.objects.create(channel=channel, channel_name="ops", rule_name="r", event_key="probe",
                                       subject="s", body="b", next_attempt_at=timezone.now())
    with caplog.at_level(logging.WARNING):
        outbox.deliver(delivery.pk)
    delivery.refresh_from_db()
    assert "RuntimeError" in delivery.last_error
    assert not [c for c in CANARIES if c in delivery.last_error + caplog.text]
