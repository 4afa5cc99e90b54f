"""The architecture review checklist (seed, "Architecture Review Checklist"),
answered from the live configuration: the registry's current versions, recent
runs and the latest evaluation. Each item is pass / warn / fail with evidence
that links to the capability or run it concerns. Every query is bounded.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from capabilities.models import Capability
from core.choices import FINISHED_STATUSES
from evaluation.models import Evaluation
from runs.models import PlanRevision, Run
from runtime.observation import RETRYABLE_CODES

PASS, WARN, FAIL = "pass", "warn", "fail"
RECENT = timedelta(days=7)
EVIDENCE_LIMIT = 20
# A single call allowed to hang longer than this holds a worker slot and most deadlines hostage.
SANE_TIMEOUT_S = 120.0
# Budgets beyond these are, in practice, no budget at all.
UNBOUNDED_DEADLINE_S = 86_400
UNBOUNDED_COUNT = 10_000
# A polling policy that may run longer than this is not a bounded wait.
MAX_POLL_SPAN_S = 86_400
MAX_POLL_ATTEMPTS = 1_000
EVALUATION_STALE_AFTER = timedelta(days=30)


@dataclass
class Evidence:
    text: str
    url: str = ""


@dataclass
class ReadinessItem:
    key: str
    question: str
    status: str
    answer: str
    evidence: list[Evidence] = field(default_factory=list)
    more: int = 0   # evidence items left out to keep the page bounded

    @property
    def status_label(self) -> str:
        return {PASS: "pass", WARN: "warn", FAIL: "fail"}[self.status]


def _worst(*statuses: str) -> str:
    return FAIL if FAIL in statuses else WARN if WARN in statuses else PASS


def _capability_url(name: str) -> str:
    return reverse("capabilities:detail", args=[name])


def _run_url(run_id: int) -> str:
    return reverse("runs:detail", args=[run_id])


def _bounded(items: list[Evidence]) -> tuple[list[Evidence], int]:
    return items[:EVIDENCE_LIMIT], max(0, len(items) - EVIDENCE_LIMIT)


def _current_versions():
    """Enabled capabilities with their current version: what a planner can choose today."""
    # A registry holds tens to hundreds of capabilities; cap it anyway.
    return list(Capability.objects.filter(enabled=True, current_version__isnull=False)
                .select_related("current_version").order_by("name")[:2000])


# -- the checks ----------------------------------------------------------------------------

def check_validation(capabilities) -> ReadinessItem:
    since = timezone.now() - RECENT
    rejected = PlanRevision.objects.filter(accepted=False, created_at__gte=since).count()
    loose = [c for c in capabilities if not (c.current_version.schema or {}).get("properties")
             and (c.current_version.schema or {}).get("additionalProperties", True) is not False]
    evidence = [Evidence(f"{c.name} v{c.current_version.number}: its schema declares no properties, so any "
                         "arguments pass validation", _capability_url(c.name)) for c in loose]
    evidence, more = _bounded(evidence)
    evidence.insert(0, Evidence(f"{len(capabilities)} enabled capabilities in the registry; every plan step is "
                                f"validated against them. {rejected} plan(s) rejected by validation in the last 7 days."))
    return ReadinessItem(
        "validation", "Can every proposed action be validated against a registered capability?",
        WARN if loose else PASS,
        f"{len(loose)} capability schema(s) accept arbitrary arguments." if loose
        else "Every enabled capability has an argument schema the runtime validates plans against.",
        evidence, more)


def check_side_effects(capabilities) -> ReadinessItem:
    evidence, statuses = [], []
    for c in capabilities:
        v = c.current_version
        if v.side_effect not in ("write", "external"):
            continue
        missing = [what for what, ok in (("permission", bool(v.permission)),
                                         ("approval", v.requires_approval)) if not ok]
        if missing:
            statuses.append(FAIL if len(missing) == 2 else WARN)
            lacks = "needs neither a permission nor an approval" if len(missing) == 2 else (
                "needs no permission" if missing == ["permission"] else "requires no approval")
            evidence.append(Evidence(f"{c.name} v{v.number} ({v.side_effect}) {lacks}", _capability_url(c.name)))
    evidence, more = _bounded(evidence)
    status = _worst(*statuses)
    answer = {PASS: "Every side-effecting capability requires a permission and an approval.",
              WARN: "Some side-effecting capabilities lack a permission or an approval.",
              FAIL: "Some side-effecting capabilities need neither a permission nor an approval."}[status]
    return ReadinessItem("authorization", "Is authorization enforced immediately before protected actions?",
                         status, answer, evidence, more)


def check_failure_classes(capabilities) -> ReadinessItem:
    """Retry classification: an empty retry_on means the default retryable set
    (timeout, connection_error, rate_limited, server_error), which is a classification.
    Flagged: terminal codes in retry_on, blind retries of a side effect, and timeouts
    over SANE_TIMEOUT_S."""
    evidence, statuses = [], []
    for c in capabilities:
        v = c.current_version
        terminal_codes = {code for code in (v.retry_on or []) if code not in {r.value for r in RETRYABLE_CODES}}
        if terminal_codes:
            statuses.append(WARN)
            evidence.append(Evidence(f"{c.name} v{v.number} lists terminal failures as retryable: "
                                     f"{', '.join(sorted(terminal_codes))}", _capability_url(c.name)))
        if v.side_effect in ("write", "external") and v.retry_max_attempts > 1 and not (v.idempotent or v.status_lookup):
            statuses.append(FAIL)
            evidence.append(Evidence(f"{c.name} v{v.number} retries a side effect up to {v.retry_max_attempts} times "
                                     "with neither an idempotency key nor a status lookup", _capability_url(c.name)))
        if not v.timeout_s or v.timeout_s > SANE_TIMEOUT_S:
            statuses.append(WARN)
            evidence.append(Evidence(f"{c.name} v{v.number} has a timeout of {v.timeout_s:g} s "
                                     f"(over {SANE_TIMEOUT_S:g} s)", _capability_url(c.name)))
    evidence, more = _bounded(evidence)
    status = _worst(*statuses)
    answer = ("Every capability has a timeout and a retry classification (an empty list means the default "
              "transient set: timeout, connection error, rate limited, server error)." if status == PASS
              else "Some capabilities' retry or timeout policy needs attention.")
    return ReadinessItem("failure_classes", "Are transient and terminal failures treated differently?",
                         status, answer, evidence, more)


def check_polling(capabilities) -> ReadinessItem:
    evidence, statuses = [], []
    polling = [c for c in capabilities if c.current_version.polling_max_attempts or c.current_version.polling_interval_s]
    for c in polling:
        v = c.current_version
        attempts, interval = v.polling_max_attempts, v.polling_interval_s or 0
        if not attempts:
            statuses.append(FAIL)
            evidence.append(Evidence(f"{c.name} v{v.number} polls without an attempt limit", _capability_url(c.name)))
        elif attempts > MAX_POLL_ATTEMPTS or attempts * interval > MAX_POLL_SPAN_S:
            statuses.append(WARN)
            evidence.append(Evidence(f"{c.name} v{v.number} may poll {attempts} times every {interval:g} s "
                                     f"({attempts * interval / 3600:.1f} h)", _capability_url(c.name)))
        else:
            evidence.append(Evidence(f"{c.name} v{v.number}: at most {attempts} polls every {interval:g} s",
                                     _capability_url(c.name)))
    evidence, more = _bounded(evidence)
    status = _worst(*statuses)
    answer = ("Repeated identical calls stop a run as stalled unless they are polls; "
              + (f"all {len(polling)} polling capabilities have an attempt limit." if status == PASS and polling
                 else "no capability polls." if not polling else "some polling policies are unbounded or very long."))
    return ReadinessItem("polling", "Can the runtime detect repeated actions without misclassifying legitimate "
                         "polling?", status, answer, evidence, more)


def _recent_runs():
    # Runs an evaluation made are experiments with suite-defined budgets: review live operations only.
    return Run.objects.filter(created_at__gte=timezone.now() - RECENT, evaluation__isnull=True)


def _runs_found(key: str, question: str, runs, *, severity: str, shown: tuple[str, ...],
                describe: Callable[[dict], str], found: str, clear: str) -> ReadinessItem:
    """A check whose problems are runs: it passes when `runs` is empty, else it is `severity`, with
    the newest EVIDENCE_LIMIT of them (their `shown` fields, as `describe` words them) as evidence.
    `found` is the answer then, formatted with the number of runs as {total}."""
    total = runs.count()
    evidence = [Evidence(describe(row), _run_url(row["pk"]))
                for row in runs.order_by("-created_at").values("pk", *shown)[:EVIDENCE_LIMIT]]
    return ReadinessItem(key, question, severity if total else PASS, found.format(total=total) if total else clear,
                         evidence, max(0, total - EVIDENCE_LIMIT))


def check_completion(capabilities=None) -> ReadinessItem:
    return _runs_found(
        "completion", "Are completion criteria independent of the model's confidence?",
        _recent_runs().filter(Q(completion__isnull=True) | Q(completion={})), severity=FAIL, shown=("goal",),
        describe=lambda run: f"run {run['pk']}: {run['goal'][:80]}",
        found="{total} run(s) in the last 7 days had no completion criteria.",
        clear="Every run in the last 7 days carried application-owned completion criteria.")


def _budgets_in_words(run: dict) -> str:
    budgets = run["budgets"] or {}
    return (f"run {run['pk']}: deadline {budgets.get('deadline_s')} s, {budgets.get('max_tool_calls')} tool calls, "
            f"{budgets.get('max_iterations')} iterations")


def check_budgets(capabilities=None) -> ReadinessItem:
    unbounded = (Q(budgets__deadline_s__gt=UNBOUNDED_DEADLINE_S) | Q(budgets__max_tool_calls__gt=UNBOUNDED_COUNT)
                 | Q(budgets__max_iterations__gt=UNBOUNDED_COUNT))
    return _runs_found(
        "budgets", "Are iteration, tool, time, and token/cost budgets enforced outside the model?",
        _recent_runs().filter(unbounded), severity=WARN, shown=("budgets",), describe=_budgets_in_words,
        found="{total} run(s) in the last 7 days had effectively unbounded budgets (deadline over a day, or over "
              f"{UNBOUNDED_COUNT:,} tool calls or iterations).",
        clear="The runtime enforces every budget; no run in the last 7 days had an effectively unbounded one.")


def check_stop_reasons(capabilities=None) -> ReadinessItem:
    # The database constraint makes this impossible; the check shows it stays so.
    return _runs_found(
        "stop_reasons", "Does every stop path produce a traceable reason?",
        Run.objects.filter(status__in=FINISHED_STATUSES, stop_reason=""), severity=FAIL, shown=(),
        describe=lambda run: f"run {run['pk']} finished without a stop reason",
        found="{total} finished run(s) have no recorded stop reason.",
        clear="Every finished run records its stop reason (a database constraint enforces it).")


def check_evaluation(capabilities=None) -> ReadinessItem:
    question = "Have we measured planning against a simpler baseline on the same tasks?"
    latest = (Evaluation.objects.select_related("suite").filter(status=Evaluation.Status.COMPLETED)
              .order_by("-finished_at", "-id").first())
    if latest is None:
        return ReadinessItem("evaluation", question, WARN,
                             "No evaluation has been completed: planning has not been measured against direct "
                             "execution.", [Evidence("Start one on the Evaluation page", reverse("evaluation:index"))])
    summary = latest.summary or {}
    modes = summary.get("modes") or {}
    evidence = [Evidence(f"Evaluation {latest.pk} of suite {latest.suite.name}"
                         f"{' (' + latest.label + ')' if latest.label else ''}, finished "
                         f"{timezone.localtime(latest.finished_at):%Y-%m-%d %H:%M}",
                         reverse("evaluation:detail", args=[latest.pk]))]
    if summary.get("headline"):
        evidence.append(Evidence(summary["headline"]))
    for mode in ("direct", "planning"):
        m = modes.get(mode) or {}
        if m:
            evidence.append(Evidence(
                f"{mode}: success {100 * (m.get('success_rate') or 0):.0f} %, mean tool calls "
                f"{m.get('mean_tool_calls') or 0:.2f}, tokens {m.get('total_tokens', 0)}, cost "
                f"{m.get('total_cost', 0):.4f}, mean latency {m.get('mean_latency_s') or 0:.2f} s (simulated)"))
    stale = latest.finished_at and timezone.now() - latest.finished_at > EVALUATION_STALE_AFTER
    return ReadinessItem(
        "evaluation", question, WARN if stale else PASS,
        ("Last measured more than 30 days ago: measure again after policy changes." if stale
         else "Planning was measured against the direct baseline recently."), evidence)


CHECKS = (check_validation, check_side_effects, check_failure_classes, check_polling, check_completion,
          check_budgets, check_stop_reasons, check_evaluation)


def readiness_review() -> list[ReadinessItem]:
    capabilities = _current_versions()
    return [check(capabilities) for check in CHECKS]
