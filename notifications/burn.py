"""Usage burn rules: tokens or cost over a rolling window, per owner or per label value, past a limit.

Looked at when a run finishes (runs.signals.run_finished, sent once its finish has committed, in
the worker that finished it): one query for the enabled burn rules, then per rule one indexed sum
over the usage rollup (runs.dashboard.usage.window_spend), which already holds the run. A rule
fires once per crossing: BurnState's conditional UPDATE from "within" to "over" is won by one
process, and only that one writes the deliveries; runs finishing while the subject stays over add
nothing. A finish that finds the subject back within its limit re-arms the rule.

The window is whole clock hours: the current hour and the window_hours - 1 before it.
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.projects import project_scope
from notifications import outbox, rules
from notifications.models import BurnState, Rule, RuleEvent
from notifications.tasks import send_due
from runs.dashboard.usage import window_spend
from runs.models import Run

log = logging.getLogger(__name__)


def on_run_finished(sender, *, run_id: int, **kwargs) -> None:
    """runs.signals.run_finished: check the burn rules the run's owner and labels fall under."""
    burn_rules = [r for r in Rule.objects.filter(enabled=True, event=RuleEvent.USAGE_BURN).prefetch_related("channels")
                  if any(c.enabled for c in r.channels.all())]
    if not burn_rules:
        return
    run = Run.objects.filter(pk=run_id, evaluation__isnull=True).values("project_id", "owner_id", "owner__username",
                                                                         "labels").first()
    if run is None:
        return
    fired = 0
    now = timezone.now()
    # A sweep finishes runs in no project's scope: the run's project's rules only, over its usage alone.
    with project_scope(run["project_id"]):
        for rule in burn_rules:
            if rule.project_id != run["project_id"]:
                continue
            try:
                fired += check(rule, run, now)
            except Exception:  # one broken rule must not stop the others, nor the worker
                log.exception("usage burn rule %s could not be evaluated for run %s", rule.pk, run_id)
    if fired:
        try:
            send_due.delay()
        except Exception:  # the deliveries are written; the scheduler's next tick sends them
            log.exception("could not queue sending the usage burn notices of run %s", run_id)


def check(rule: Rule, run: Mapping[str, Any], now: datetime) -> int:
    """Fire `rule` for the run's owner or label value if it has just gone over; returns deliveries written."""
    p = rules.full_params(rule)
    if p["per"] == "owner":
        subject, shown = f"owner:{run['owner_id']}", f"owner {run['owner__username']}"
        spend = window_spend(hours=p["window_hours"], now=now, owner_id=run["owner_id"])
    else:
        value = (run["labels"] or {}).get(p["label_key"])
        if value is None:
            return 0
        subject, shown = f"label:{p['label_key']}={value}", f"label {p['label_key']}={value}"
        spend = window_spend(hours=p["window_hours"], now=now, label=(p["label_key"], value))
    used = spend[p["measure"]]
    if used <= p["limit"]:
        BurnState.objects.filter(rule=rule, subject=subject, over=True).update(over=False, changed_at=now)
        return 0
    with transaction.atomic():
        BurnState.objects.bulk_create([BurnState(rule=rule, subject=subject, over=False, changed_at=now)],
                                      ignore_conflicts=True)
        if not BurnState.objects.filter(rule=rule, subject=subject, over=False).update(
                over=True, changed_at=now, crossings=F("crossings") + 1):
            return 0   # over already (or another worker just fired it)
        crossing = BurnState.objects.get(rule=rule, subject=subject).crossings
        return outbox.write_deliveries(rule, [c for c in rule.channels.all() if c.enabled],
                                       [_notice(rule, p, subject, shown, used, spend, crossing)], now)


def _notice(rule, p: dict, subject: str, shown: str, used: float, spend: dict, crossing: int) -> rules.Notice:
    hours = p["window_hours"]
    amount = f"{used:,.0f} tokens" if p["measure"] == "tokens" else f"{used:,.4g} in cost"
    limit = f"{p['limit']:,.0f} tokens" if p["measure"] == "tokens" else f"{p['limit']:,.4g}"
    window = "24h" if hours <= 24 else "7d" if hours <= 168 else "30d"
    query = ("group=owner" if p["per"] == "owner" else f"group=label&label_key={p['label_key']}")
    digest = hashlib.sha256(subject.encode()).hexdigest()[:16]
    return rules.Notice(
        key=f"burn:{digest}:{crossing}",
        subject=f"Usage burn: {shown} used {amount} in {hours} h (limit {limit})",
        body=(f"Rule {rule.name}: runs of {shown} that finished in the last {hours} whole hours used "
              f"{spend['tokens']:,} tokens and {spend['cost']:,.4g} in cost over {spend['runs']} runs; the limit is "
              f"{limit}. You will be told again only after it is back within the limit and passes it again."),
        link=f"{settings.AGENTOPS_BASE_URL}/usage/?window={window}&{query}")
