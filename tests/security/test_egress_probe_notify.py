"""Probes of the egress guard through notification channels, against loopback receivers that record every
delivery: an SMTP host that is an address dressed as an allowed subdomain was admitted by the wildcard
(the mail went to 127.0.0.1); other spellings of an address, and redirects, stay refused."""
from __future__ import annotations

import pytest

from notifications import channels
from notifications.errors import ChannelError
from tests.notifications.conftest import webhook  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

MAIL = "from=a@example.com&to=b@example.com&mode=insecure"


@pytest.fixture
def wildcard(settings):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["*.allowed.test"]
    settings.AGENTOPS_HTTP_ALLOW_PRIVATE = True
    return settings


@pytest.mark.parametrize("host", ["127.0.0.1%25.allowed.test", "127.0.0.1%.allowed.test"])
def test_an_smtp_host_dressed_as_an_allowed_subdomain_is_refused_and_gets_no_mail(wildcard, smtp_server, host):
    smtp_server.messages.clear()
    url = f"mailto://u@example.com:{smtp_server.port}?smtp={host}&{MAIL}"
    assert any("egress guard refuses" in p for p in channels.url_problems(url, channel="probe"))
    with pytest.raises(ChannelError, match="egress refused.*not on the allowlist"):
        channels.send(url, title="t", body="b", channel="probe")
    assert smtp_server.messages == []


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "017700000001", "0.0.0.0", "[::ffff:127.0.0.1]"])
def test_other_spellings_of_loopback_are_refused(smtp_server, webhook, settings, host):  # noqa: F811
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["*.allowed.test", "2130706433", "0x7f.1"]  # names never admit an address
    smtp_server.messages.clear()
    for url in (f"mailto://{host}:{smtp_server.port}?{MAIL}", f"json://{host}:{webhook.server_address[1]}/hook"):
        # Refused by the guard, or (0x7f.1, a bracketed host) by Apprise's parser before it.
        with pytest.raises(ChannelError, match="egress refused|Apprise does not understand"):
            channels.send(url, title="t", body="b", channel="probe")
    assert smtp_server.messages == [] and webhook.requests == []


def test_a_webhook_redirect_to_metadata_is_not_followed(settings, webhook):  # noqa: F811
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    webhook.redirect_to = "http://169.254.169.254/latest/meta-data/"
    with pytest.raises(ChannelError, match="HTTP 307"):
        channels.send(f"json://127.0.0.1:{webhook.server_address[1]}/hook", title="t", body="b", channel="probe")
    assert len(webhook.requests) == 1
