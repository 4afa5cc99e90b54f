"""Sending one notification to one channel: one egress decision per delivery.

A channel is an Apprise URL, read by Apprise's own parser (notifications.targets). The
schemes we offer are sent by our own senders (notifications.senders), each connecting
only to the address the egress guard checked; any other scheme is refused unless an
admin allows it by name. Secrets are filled in at send time, only for the hosts and
channels they are bound to (notifications.secrets).
"""
from __future__ import annotations

from capabilities.egress import capability_guard
from capabilities.netguard import URLRefused, validate_host
from notifications import secrets, targets
from notifications.errors import ChannelError
from notifications.masking import masked, scrubbed
from notifications.senders import sender_for
from notifications.senders.base import ApprovalSender

__all__ = ["ChannelError", "masked", "send", "url_problems"]


def send(url: str, *, title: str, body: str, channel: str = "", approval=None) -> None:
    """Send or raise ChannelError (never with a secret's value in it).

    `approval`: the notice asks for a decision on it; a sender that can take the decision itself
    (Slack, e-mail) sends its own controls, bound to the request's arguments."""
    try:
        sender = sender_for(targets.scheme(url))
        expanded = secrets.expand(url)
        if targets.scheme(expanded) != targets.scheme(url):
            raise ChannelError("a channel's scheme may not come from a secret", permanent=True)
        plugin = sender.read(expanded)
        where = sender.destination(plugin)
        # A vendor service Apprise reaches by itself (tgram) binds its secrets to "tgram:".
        host = where.host if where else f"{targets.scheme(url)}:"
        problems = secrets.binding_problems(url, channel=channel, host=host)
        if problems:
            raise ChannelError("; ".join(problems), permanent=True)
        guard = capability_guard(sender.vendor_hosts)
        if approval is not None and isinstance(sender, ApprovalSender):
            sender.send_approval(plugin, approval=approval, title=title, body=body, guard=guard)
        else:
            sender.send(plugin, title=title, body=body, guard=guard)
    except ChannelError as exc:
        raise ChannelError(scrubbed(str(exc), url), permanent=exc.permanent) from None
    except Exception as exc:  # a library's own error, which may quote the URL it was given (its tokens)
        raise ChannelError(scrubbed(f"{type(exc).__name__}: {exc}", url)) from None


def url_problems(url: str, *, channel: str = "") -> list[str]:
    """For the channel form: what is wrong with the URL, without sending anything or resolving names."""
    if not isinstance(url, str) or not url.strip():
        return ["enter an Apprise URL, e.g. mailto://... or jsons://hooks.example.com/path"]
    trial = secrets.PLACEHOLDER.sub("placeholder", url)
    try:
        try:
            sender = sender_for(targets.scheme(url))
        except ChannelError:
            targets.read(trial)  # Apprise's verdict first: whether the URL means anything at all
            raise
        plugin = sender.read(trial)
        where = sender.destination(plugin)
    except ChannelError as exc:
        return [*secrets.binding_problems(url, channel=channel, host=None), str(exc)]
    # A host written as a ${...} secret is known only at send time, and checked then.
    host = (where.host if where else f"{targets.scheme(url)}:") or ""
    host = None if "placeholder" in host else host
    problems = secrets.binding_problems(url, channel=channel, host=host)
    if where is not None and host is not None:
        try:
            validate_host(host, capability_guard(sender.vendor_hosts))
        except URLRefused as exc:
            problems.append(f"the egress guard refuses it: {exc}")
    return problems
