"""A project's per-day quotas, as the runtime asks for them (runtime.ports.Quotas).

A quota counts the project's runs started since midnight UTC (evaluation runs and forks included:
they spend as much): how many there are, and the tokens and cost they have used. The runs quota
refuses a run before its first plan once that many runs started before it today; the tokens and cost quotas
refuse planner calls once the day's runs reached them (capability calls, which spend neither, go
on, as with a run's own token budget). Either way the run stops `quota_exhausted:<quota>`, and a
notification rule on stopped runs (stop reason quota_exhausted) tells whoever asked.
"""
from __future__ import annotations

import math
from datetime import UTC, datetime, time

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from core.audit import audit
from core.errors import InvalidInput, NotAllowed
from core.models import AuditAction, Project
from runs.models import Run
from runs.services import budget_errors
from runtime.state import RunState
from runtime.stop import QuotaName

QUOTA_FIELDS = ("quota_runs_per_day", "quota_tokens_per_day", "quota_cost_per_day")


def day_start(now: datetime) -> datetime:
    return datetime.combine(now.astimezone(UTC).date(), time.min, tzinfo=UTC)


class ProjectQuotas:
    def __init__(self, *, run_id: int, project_id: int, runs: int | None, tokens: int | None, cost: float | None):
        self.run_id, self.project_id = run_id, project_id
        self.runs, self.tokens, self.cost = runs, tokens, cost

    @classmethod
    def for_run(cls, run: Run) -> ProjectQuotas | None:
        """The run's project's quotas (read once per worker slice); None when it sets none."""
        runs, tokens, cost = Project.objects.filter(pk=run.project_id).values_list(*QUOTA_FIELDS).first() or (None,) * 3
        if runs is None and tokens is None and cost is None:
            return None
        return cls(run_id=run.pk, project_id=run.project_id, runs=runs, tokens=tokens, cost=cost)

    def _today(self):
        return Run.objects.filter(project_id=self.project_id, created_at__gte=day_start(timezone.now()))

    def refusal(self, state: RunState, *, planning: bool) -> tuple[str, str] | None:
        # Before its first plan, a run has done nothing yet: past the quota, it stops before it does.
        not_begun = state.usage.iterations == 0 and state.usage.plans == 0
        if self.runs is not None and not_begun:
            before = self._today().filter(pk__lt=self.run_id).count()
            if before >= self.runs:
                return (QuotaName.RUNS_PER_DAY.value,
                        f"the project's quota of {self.runs} runs a day is reached ({before} started today, UTC)")
        if planning and (self.tokens is not None or self.cost is not None):
            spent = self._today().aggregate(tokens=Sum("tokens"), cost=Sum("cost"))
            tokens, cost = spent["tokens"] or 0, spent["cost"] or 0.0
            if self.tokens is not None and tokens >= self.tokens:
                return (QuotaName.TOKENS_PER_DAY.value, f"the project's quota of {self.tokens} tokens a day is "
                                                        f"reached ({tokens} spent by today's runs, UTC)")
            if self.cost is not None and cost >= self.cost:
                return (QuotaName.COST_PER_DAY.value, f"the project's quota of {self.cost:g} cost a day is "
                                                      f"reached ({cost:.4f} spent by today's runs, UTC)")
        return None


# -- setting them --------------------------------------------------------------------------------

def _limit_error(value, kind: type) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        return f"must be {'a whole number' if kind is int else 'a number'}, or null for no quota"
    if not math.isfinite(value) or value < 0 or value > 1e15:
        return "must be a finite number from 0 to 10^15, or null for no quota"
    return None


@transaction.atomic
def project_limits_save(*, actor, project: Project, default_budgets: dict, runs_per_day: int | None,
                        tokens_per_day: int | None, cost_per_day: float | None) -> Project:
    """A superuser sets a project's default budgets and per-day quotas (None: no quota); audited."""
    if not (actor and actor.is_authenticated and actor.is_superuser):
        raise NotAllowed("Only a superuser sets a project's quotas and default budgets.")
    errors = dict(budget_errors(default_budgets))
    for name, value, kind in (("runs_per_day", runs_per_day, int), ("tokens_per_day", tokens_per_day, int),
                              ("cost_per_day", cost_per_day, float)):
        problem = _limit_error(value, kind)
        if problem:
            errors[name] = problem
    if errors:
        raise InvalidInput("The limits could not be saved: " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                           fields=errors)
    project = Project.objects.select_for_update().get(pk=project.pk)
    before = {"default_budgets": project.default_budgets, **{f: getattr(project, f) for f in QUOTA_FIELDS}}
    project.default_budgets = default_budgets
    project.quota_runs_per_day, project.quota_tokens_per_day = runs_per_day, tokens_per_day
    project.quota_cost_per_day = None if cost_per_day is None else float(cost_per_day)
    project.save(update_fields=["default_budgets", *QUOTA_FIELDS])
    after = {"default_budgets": project.default_budgets, **{f: getattr(project, f) for f in QUOTA_FIELDS}}
    audit(actor=actor, action=AuditAction.PROJECT_LIMITS_SAVED, target=project, project_id=project.pk,
          summary=f"Quotas and default budgets of {project.name} saved", details={"before": before, "after": after})
    return project
