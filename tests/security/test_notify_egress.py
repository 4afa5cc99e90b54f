"""Notification channels against real loopback receivers: where Apprise would connect is where we check,
the connection goes to the checked address, secrets go only where they are bound, viewers learn nothing.

127.0.0.2 plays the internal network (never on the allowlist); 127.0.0.1 the allowed outside.
"""
from __future__ import annotations

import socket
import threading
from http.server import ThreadingHTTPServer

import pytest

from notifications import channels, services
from notifications.errors import ChannelError
from notifications.models import Channel, Delivery, Rule
from tests.notifications.conftest import Hook, make_run, waiting_approval, webhook  # noqa: F401 (fixtures)

INTERNAL = "127.0.0.2"


def _hook(address: str, port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((address, port), Hook)
    server.daemon_threads = True
    server.requests, server.statuses, server.lock, server.redirect_to = [], [], threading.Lock(), ""
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


@pytest.fixture
def internal_hook():
    server = _hook(INTERNAL)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def internal_smtp():
    from aiosmtpd.controller import Controller

    class Inbox:
        messages: list = []

        async def handle_DATA(self, server, session, envelope):
            self.messages.append(envelope.content.decode("utf-8", "replace"))
            return "250 OK"

    inbox = Inbox()
    inbox.messages = []
    with socket.socket() as probe:
        probe.bind((INTERNAL, 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname=INTERNAL, port=port)
    controller.start()
    inbox.port = port
    yield inbox
    controller.stop()


@pytest.fixture
def allowlist(settings):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["allowed.example.com", "127.0.0.1"]
    settings.AGENTOPS_HTTP_ALLOW_PRIVATE = False
    settings.AGENTOPS_NOTIFY_EXTRA_SCHEMES = []
    settings.AGENTOPS_NOTIFY_SECRET_BINDINGS = {}
    return settings


# Apprise reads the host after the FIRST @ (and these services all take one): each must be judged as INTERNAL.
CONFUSED = [
    "json://a@{h}:{p}@allowed.example.com/x", "jsons://a@{h}:{p}@allowed.example.com/x",
    "xml://a@{h}:{p}@allowed.example.com/x", "form://a@{h}:{p}@allowed.example.com/x",
    "nctalk://user:pass@{h}:{p}@allowed.example.com/roomid", "ncloud://user:pass@{h}:{p}/admin",
    "hassio://{h}:{p}/abcdefghijklmnopqrstuvwxyz0123456789", "synology://{h}:{p}/token",
    "signal://{h}:{p}/+12345678901/+12345678902", "bark://{h}:{p}/devicekey", "kodi://{h}:{p}",
    "gotify://{h}:{p}/abcdefghijklmno", "ntfy://{h}:{p}/topic", "apprise://{h}:{p}/key",
    "workflow://{h}:{p}/abc123def/sigXYZ123456", "mmost://{h}:{p}/token", "matrix://u:p@{h}:{p}/#room",
]


class TestTheHostApprisReads:
    @pytest.mark.parametrize("template", CONFUSED)
    @pytest.mark.parametrize("extra", [False, True], ids=["default", "scheme-allowed-by-admin"])
    def test_an_internal_host_is_refused_and_receives_nothing(self, allowlist, internal_hook, template, extra):
        url = template.format(h=INTERNAL, p=internal_hook.server_address[1])
        if extra:  # even a scheme an admin allowed by name is checked on the host Apprise reads
            allowlist.AGENTOPS_NOTIFY_EXTRA_SCHEMES = [url.split(":", 1)[0]]
        with pytest.raises(ChannelError) as refused:
            channels.send(url, title="t", body="b", channel="probe")
        assert refused.value.permanent
        assert internal_hook.requests == []

    def test_an_internal_smtp_server_is_refused_and_receives_nothing(self, allowlist, internal_smtp):
        for url in (f"mailto://{INTERNAL}:{internal_smtp.port}?from=a@example.com&to=b@example.com&mode=insecure",
                    f"mailto://a@{INTERNAL}:{internal_smtp.port}@allowed.example.com?from=a@example.com"
                    "&to=b@example.com&mode=insecure"):
            with pytest.raises(ChannelError, match="egress refused"):
                channels.send(url, title="t", body="b", channel="probe")
        assert internal_smtp.messages == []

    def test_the_form_refuses_what_the_sender_would_refuse(self, allowlist, operator, internal_hook):
        for template in CONFUSED:
            url = template.format(h=INTERNAL, p=internal_hook.server_address[1])
            assert channels.url_problems(url, channel="x"), url

    def test_other_schemes_are_refused_unless_an_admin_allows_them_by_name(self, allowlist, operator):
        with pytest.raises(Exception, match="not offered.*AGENTOPS_NOTIFY_EXTRA_SCHEMES"):
            services.channel_save(user=operator, name="tg", url="tgram://123456789:abcdefg_hijklmnop/12315544/")
        allowlist.AGENTOPS_NOTIFY_EXTRA_SCHEMES = ["tgram"]
        services.channel_save(user=operator, name="tg", url="tgram://123456789:abcdefg_hijklmnop/12315544/")

    def test_chat_webhooks_post_where_their_service_lives(self):
        from notifications.senders import sender_for
        from notifications.targets import read

        def out(url):
            return sender_for(url.split(":", 1)[0]).outgoing(read(url), title="t", body="b")

        slack = out("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general")
        assert slack.url == "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"
        assert out("discord://4174216298/JHMHI8qBe7bk2ZwO5U711o3dV_js").url == \
            "https://discord.com/api/webhooks/4174216298/JHMHI8qBe7bk2ZwO5U711o3dV_js"
        teams = out("workflow://prod-01.westus.logic.azure.com/abc123def/sigXYZ123456")
        assert teams.url.startswith("https://prod-01.westus.logic.azure.com/workflows/abc123def/")
        assert teams.params["sig"] == "sigXYZ123456" and b"AdaptiveCard" in teams.content

    @pytest.mark.parametrize("private, delivered", [(False, False), (True, True)])
    def test_a_name_on_the_allowlist_follows_allow_private(self, allowlist, monkeypatch, webhook, private,
                                                           delivered):
        allowlist.AGENTOPS_HTTP_ALLOWED_HOSTS = ["hooks.internal.test"]
        allowlist.AGENTOPS_HTTP_ALLOW_PRIVATE = private
        _resolve(monkeypatch, {"hooks.internal.test": ["127.0.0.1"]})
        url = f"json://hooks.internal.test:{webhook.server_address[1]}/hook"
        if delivered:
            channels.send(url, title="t", body="b", channel="c")
            assert webhook.payloads()[0]["message"] == "b"
            assert webhook.requests[0]["headers"]["Host"] == f"hooks.internal.test:{webhook.server_address[1]}"
        else:
            with pytest.raises(ChannelError, match="allow_private is off"):
                channels.send(url, title="t", body="b", channel="c")
            assert webhook.requests == []


def _resolve(monkeypatch, answers: dict[str, list[str]]):
    """DNS for test names: each call takes the next answer (the last one repeats); other names as usual."""
    real = socket.getaddrinfo
    calls: dict[str, int] = {}

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in answers:
            return real(host, port, *args, **kwargs)
        n = calls[host] = calls.get(host, 0) + 1
        address = answers[host][min(n, len(answers[host])) - 1]
        return real(address, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return calls


class TestDnsRebinding:
    """The name answers the allowed address once (the check), then an internal one (a second lookup)."""

    def test_a_webhook_goes_to_the_checked_address(self, allowlist, monkeypatch, internal_hook):
        allowed = _hook("127.0.0.1", internal_hook.server_address[1])  # the same port on the allowed address
        try:
            allowlist.AGENTOPS_HTTP_ALLOWED_HOSTS = ["rebind.test", "127.0.0.1"]
            _resolve(monkeypatch, {"rebind.test": ["127.0.0.1", INTERNAL]})
            channels.send(f"json://rebind.test:{internal_hook.server_address[1]}/x", title="t", body="b", channel="c")
            assert len(allowed.requests) == 1 and internal_hook.requests == []
        finally:
            allowed.shutdown()
            allowed.server_close()

    def test_mail_goes_to_the_checked_address(self, allowlist, monkeypatch, internal_smtp, smtp_server):
        from aiosmtpd.controller import Controller

        allowed_messages = []

        class Allowed:
            async def handle_DATA(self, server, session, envelope):
                allowed_messages.append(envelope.content)
                return "250 OK"

        controller = Controller(Allowed(), hostname="127.0.0.1", port=internal_smtp.port)
        controller.start()
        try:
            allowlist.AGENTOPS_HTTP_ALLOWED_HOSTS = ["smtp.rebind.test", "127.0.0.1"]
            _resolve(monkeypatch, {"smtp.rebind.test": ["127.0.0.1", INTERNAL]})
            channels.send(f"mailto://smtp.rebind.test:{internal_smtp.port}?from=a@example.com&to=b@example.com"
                          "&mode=insecure", title="t", body="b", channel="c")
            assert len(allowed_messages) == 1 and internal_smtp.messages == []
        finally:
            controller.stop()


class TestSecretBinding:
    URL = "mailto://${AGENTOPS_NOTIFY_SMTP_USER}:${AGENTOPS_NOTIFY_SMTP_PASSWORD}@{host}:{port}" \
          "?from=agentops@example.com&to=ops@example.com&mode=insecure"

    @pytest.fixture
    def bound(self, allowlist, monkeypatch):
        monkeypatch.setenv("AGENTOPS_NOTIFY_SMTP_USER", "agentops")
        monkeypatch.setenv("AGENTOPS_NOTIFY_SMTP_PASSWORD", "s3cret-pw")
        allowlist.AGENTOPS_HTTP_ALLOWED_HOSTS = ["127.0.0.1", "elsewhere.example.com"]
        binding = {"hosts": ["127.0.0.1"], "channels": ["ops mail"]}
        allowlist.AGENTOPS_NOTIFY_SECRET_BINDINGS = {"AGENTOPS_NOTIFY_SMTP_USER": binding,
                                                     "AGENTOPS_NOTIFY_SMTP_PASSWORD": binding}

    def _url(self, host, port):
        return self.URL.replace("{host}", host).replace("{port}", str(port))

    def test_a_bound_secret_is_refused_to_another_channel_and_another_host(self, bound, operator, inbox):
        for name, host in (("another channel", "127.0.0.1"), ("ops mail", "elsewhere.example.com")):
            with pytest.raises(Exception, match="AGENTOPS_NOTIFY_SECRET_BINDINGS"):
                services.channel_save(user=operator, name=name, url=self._url(host, inbox.port))
            with pytest.raises(ChannelError, match="may not"):  # a row written around the form: refused at send
                channels.send(self._url(host, inbox.port), title="t", body="b", channel=name)
        assert inbox.messages == []

    def test_an_unbound_secret_is_never_sent(self, allowlist, monkeypatch, webhook):
        monkeypatch.setenv("AGENTOPS_NOTIFY_TOKEN", "tok-123")
        with pytest.raises(ChannelError, match="bound to no host"):
            channels.send(webhook.url + "?token=${AGENTOPS_NOTIFY_TOKEN}", title="t", body="b", channel="c")
        assert webhook.requests == []

    def test_a_scheme_may_not_come_from_a_secret(self, allowlist, monkeypatch):
        monkeypatch.setenv("AGENTOPS_NOTIFY_S", "nctalk")
        with pytest.raises(ChannelError):
            channels.send("${AGENTOPS_NOTIFY_S}://u:p@127.0.0.2/room", title="t", body="b", channel="c")


class TestWhatViewersSee:
    SECRETS = {
        "tgram://123456789:AAE-secret-bot-token/12315544/": ["123456789", "AAE-secret-bot-token"],
        "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general": ["T1JJ3T3L2", "TIiajkdnlazkcOXrIdevi7FQ"],
        "discord://4174216298/JHMHI8qBe7bk2ZwO5U711o3dV_js": ["4174216298", "JHMHI8qBe7bk2ZwO5U711o3dV_js"],
        "jsons://hooks.example.com/hook?token=tok-9f8e7d&x=1": ["tok-9f8e7d"],
        "jsons://hooks.example.com/hook?+Authorization=Bearer%20sk-abc": ["sk-abc"],
        "mailtos://bob:hunter2@smtp.example.com?to=x@example.com": ["hunter2"],
        "ntfys://u:pw-1@a@ntfy.example.com/topic": ["pw-1"],
    }

    def test_credentials_anywhere_in_a_url_are_masked(self, db, viewer, api_for, client_for):
        for n, url in enumerate(self.SECRETS):
            Channel.objects.create(name=f"c{n}", url=url)
        api = api_for(viewer).get("/api/notifications/channels/").content.decode()
        page = client_for(viewer).get("/notifications/").content.decode()
        for url, secrets in self.SECRETS.items():
            for secret in secrets:
                assert secret not in api and secret not in page, (url, secret)
        assert "smtp.example.com" in page and "to=x@example.com" in page  # what is not a secret stays readable

    def test_a_viewer_reads_only_that_a_delivery_failed(self, db, viewer, api_for, client_for, django_user_model):
        from django.utils import timezone

        Delivery.objects.create(rule_name="r", channel_name="c", event_key="e", subject="s", body="b",
                                status="failed", next_attempt_at=timezone.now(),
                                last_error="connection failed (ConnectError) to 10.0.0.7:6379")
        for shown in (api_for(viewer).get("/api/notifications/deliveries/").json()["results"][0]["last_error"],
                      client_for(viewer).get("/notifications/deliveries/").content.decode()):
            assert "delivery failed" in shown and "10.0.0.7" not in shown and "ConnectError" not in shown
        admin = django_user_model.objects.create_superuser("ada", password="pw")
        details = api_for(admin).get("/api/notifications/deliveries/").json()["results"][0]["last_error"]
        assert "10.0.0.7:6379" in details


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_through_a_real_worker_the_probe_gets_nothing_and_the_allowed_channel_its_message(
        celery_worker, operator, inbox, waiting_approval, internal_hook, wait_until):
    """The worker's settings (tests/conftest.py worker_env): allowlist 127.0.0.1, no private addresses."""
    from agentops.celery import app

    port = internal_hook.server_address[1]
    probe = Channel.objects.create(name="probe", url=f"json://a@{INTERNAL}:{port}@127.0.0.1:{port}/x")
    mail = services.channel_save(user=operator, name="ops mail", url=inbox.url)
    rule = Rule.objects.create(name="approvals", event="approval_requested")
    rule.channels.set([probe, mail])
    app.send_task("notifications.tick")
    wait_until(lambda: Delivery.objects.filter(status__in=["sent", "failed"]).count() == 2, timeout=60,
               message="both deliveries")
    assert Delivery.objects.get(channel=probe).status == "failed" and internal_hook.requests == []
    assert "egress refused" in Delivery.objects.get(channel=probe).last_error
    assert Delivery.objects.get(channel=mail).status == "sent" and len(inbox.messages) == 1
