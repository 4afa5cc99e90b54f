"""Every change to rules and channels: one atomic function each, with its audit row."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from core.audit import audit
from core.errors import InvalidInput
from core.models import AuditAction
from core.permissions import require
from notifications import channels as channel_urls
from notifications.models import Channel, Rule
from notifications.rules import params_errors
from runs.labels import labels_errors

PERMISSION = "notifications.manage_notifications"


def _refuse_if(errors: dict[str, str], what: str) -> None:
    """Refuse the change with every field error at once (none: go on)."""
    if errors:
        raise InvalidInput(f"The {what} could not be saved: " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                           fields=errors)


def _delete_audited(model, pk: int, *, user, action: str, details: Callable[[Any], dict]) -> None:
    """Delete the rule or channel `pk`, with its audit row (in the caller's transaction)."""
    row = model.objects.filter(pk=pk).first()
    if row is None:
        raise InvalidInput(f"{model.__name__} {pk} does not exist.")
    audit(actor=user, action=action, target=row, summary=f"Notification {model.__name__.lower()} {row.name} deleted",
          details=details(row))
    row.delete()


@transaction.atomic
def channel_save(*, user, name: str, url: str, enabled: bool = True, channel_id: int | None = None) -> Channel:
    require(user, PERMISSION, "manage notifications")
    errors = {}
    name = (name or "").strip()
    if not name or len(name) > 80:
        errors["name"] = "1-80 characters"
    elif Channel.objects.filter(name=name).exclude(pk=channel_id).exists():
        errors["name"] = "another channel has this name"
    problems = channel_urls.url_problems(url, channel=name)
    if problems:
        errors["url"] = "; ".join(problems)
    _refuse_if(errors, "channel")
    if channel_id is None:
        channel = Channel.objects.create(name=name, url=url.strip(), enabled=enabled, created_by=user)
    else:
        channel = Channel.objects.select_for_update().get(pk=channel_id)
        channel.name, channel.url, channel.enabled = name, url.strip(), enabled
        channel.save()
    audit(actor=user, action=AuditAction.NOTIFICATION_CHANNEL_SAVED, target=channel,
          summary=f"Notification channel {name} saved", details={"url": channel_urls.masked(channel.url),
                                                                 "enabled": enabled})
    return channel


@transaction.atomic
def channel_delete(*, user, channel_id: int) -> None:
    require(user, PERMISSION, "manage notifications")
    _delete_audited(Channel, channel_id, user=user, action=AuditAction.NOTIFICATION_CHANNEL_DELETED,
                    details=lambda channel: {"url": channel_urls.masked(channel.url)})


@transaction.atomic
def rule_save(*, user, name: str, event: str, params: dict | None = None, channel_ids: list[int] = (),
              labels: dict | None = None, enabled: bool = True, rule_id: int | None = None) -> Rule:

    require(user, PERMISSION, "manage notifications")
    params = {} if params is None else params
    labels = {} if labels is None else labels
    errors = params_errors(event, params)
    name = (name or "").strip()
    if not name or len(name) > 120:
        errors["name"] = "1-120 characters"
    found = list(Channel.objects.filter(pk__in=list(channel_ids)))
    if not channel_ids or len(found) != len(set(channel_ids)):
        errors["channels"] = "choose at least one existing channel"
    label_problems = labels_errors(labels)
    if label_problems:
        errors["labels"] = "; ".join(label_problems)
    elif labels and event == Rule.Event.USAGE_BURN:
        errors["labels"] = "a usage burn rule sums per owner or per label value (params.per), not for chosen labels"
    _refuse_if(errors, "rule")
    if rule_id is None:
        rule = Rule.objects.create(name=name, event=event, params=params, labels=labels, enabled=enabled,
                                   created_by=user)
    else:
        rule = Rule.objects.select_for_update().get(pk=rule_id)
        rule.name, rule.event, rule.params, rule.labels, rule.enabled = name, event, params, labels, enabled
        rule.save()
    rule.channels.set(found)
    audit(actor=user, action=AuditAction.NOTIFICATION_RULE_SAVED, target=rule, summary=f"Notification rule {name} saved",
          details={"event": event, "params": params, "labels": labels, "channels": sorted(c.name for c in found),
                   "enabled": enabled})
    return rule


@transaction.atomic
def rule_delete(*, user, rule_id: int) -> None:
    require(user, PERMISSION, "manage notifications")
    _delete_audited(Rule, rule_id, user=user, action=AuditAction.NOTIFICATION_RULE_DELETED,
                    details=lambda rule: {"event": rule.event})
