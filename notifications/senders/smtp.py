"""mailto:// and mailtos://: an email sent by us to the SMTP server Apprise's plugin names.

smtplib would resolve the name again when it connects (DNS rebinding): the socket goes to the
address the egress guard checked, while TLS (implicit or STARTTLS) still verifies the name.
"""
from __future__ import annotations

import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.utils import formataddr
from typing import Any

from capabilities.netguard import NetGuard, URLRefused
from notifications import email_links
from notifications.errors import ChannelError
from notifications.senders.base import TIMEOUT_S, ApprovalSender, Destination, Sender, refused


class PinnedSMTP(smtplib.SMTP):
    pinned_address = ""

    def _get_socket(self, host, port, timeout):
        # `host` stays the server's name (EHLO, STARTTLS's server_hostname); the socket goes to the checked address.
        return socket.create_connection((self.pinned_address, port), timeout, self.source_address)


class PinnedSMTPSSL(smtplib.SMTP_SSL, PinnedSMTP):
    """SMTP_SSL wraps what PinnedSMTP connected (its MRO), with the server's name for the certificate."""


class SmtpSender(Sender, ApprovalSender):
    def destination(self, plugin: Any) -> Destination:
        return Destination(plugin.smtp_host or "", int(plugin.port))

    def send(self, plugin: Any, *, title: str, body: str, guard: NetGuard) -> None:
        self._deliver(plugin, [self.message(plugin, title, body)], guard)

    def send_approval(self, plugin: Any, *, approval: Any, title: str, body: str, guard: NetGuard) -> None:
        """One mail per recipient: an approver's carries decision links that work for them alone."""
        plain, recipients = self.message(plugin, title, body)
        mails = []
        for address in recipients:
            approvers = email_links.approvers_for(address)
            text = body
            if approvers:
                links = email_links.issue(approval=approval, user=approvers[0])
                text += (f"\n\nDecide here, signed in as {approvers[0].get_username()} (each link works once, "
                         f"until {links['expires_at']}; forwarded, it decides nothing):\n"
                         f"Approve: {links['approve']}\nReject: {links['reject']}\n")
            message = EmailMessage()
            message["From"], message["To"], message["Subject"] = plain["From"], address, title
            if plain["Reply-To"]:
                message["Reply-To"] = plain["Reply-To"]
            message.set_content(text)
            mails.append((message, [address]))
        self._deliver(plugin, mails, guard)

    def _deliver(self, plugin: Any, mails: list[tuple[EmailMessage, list[str]]], guard: NetGuard) -> None:
        where = self.destination(plugin)
        try:
            checked = guard.check_host(where.host, where.port, scheme="smtp")
        except URLRefused as exc:
            raise refused(exc) from None
        context = ssl.create_default_context()
        cls = PinnedSMTPSSL if plugin.secure_mode == "ssl" else PinnedSMTP
        kwargs = {"context": context} if cls is PinnedSMTPSSL else {}
        try:
            smtp = cls(timeout=TIMEOUT_S, **kwargs)
            smtp.pinned_address = checked.address
            with smtp:
                smtp.connect(where.host, where.port)
                if plugin.secure_mode == "starttls":
                    smtp.ehlo()
                    smtp.starttls(context=context)
                    smtp.ehlo()
                if plugin.user and plugin.password:
                    smtp.login(plugin.user, plugin.password)
                for message, recipients in mails:
                    smtp.send_message(message, from_addr=plugin.from_addr[1], to_addrs=recipients)
        except smtplib.SMTPAuthenticationError as exc:
            raise ChannelError(f"SMTP login refused ({exc.smtp_code})", permanent=True) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise ChannelError(f"SMTP failed ({type(exc).__name__}: {exc})"[:300]) from None

    @staticmethod
    def message(plugin: Any, title: str, body: str) -> tuple[EmailMessage, list[str]]:
        to = [address for _name, address in plugin.targets]
        if not to:
            raise ChannelError("the channel names no recipient (to=...)", permanent=True)
        message = EmailMessage()
        name, sender = plugin.from_addr
        message["From"] = formataddr((name or "", sender))
        message["To"] = ", ".join(to)
        if plugin.cc:
            message["Cc"] = ", ".join(sorted(plugin.cc))
        if plugin.reply_to:
            message["Reply-To"] = ", ".join(sorted(plugin.reply_to))
        message["Subject"] = title
        message.set_content(body)
        return message, [*to, *sorted(plugin.cc), *sorted(plugin.bcc)]


SMTP = SmtpSender()
