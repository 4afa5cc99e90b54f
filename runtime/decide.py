"""The one explicit control decision after every observation.

Precedence (design.md): complete > budget exhausted > terminal failure > stalled >
retryable -> retry or replan > continue or replan. One exception comes first: once
the deadline has passed no verification runs, so even a promising output stops
the run budget_exhausted:deadline.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .budgets import BudgetName
from .completion import is_empty
from .observation import Observation, Status
from .stop import ReplanReason


class Decision(StrEnum):
    COMPLETE = "complete"
    STOP_BUDGET = "stop_budget"
    STOP_TERMINAL_FAILURE = "stop_terminal_failure"
    STOP_STALLED = "stop_stalled"
    RETRY = "retry"
    POLL = "poll"
    CONTINUE = "continue"
    REPLAN = "replan"
    # Not an outcome of decide(): the controller records it on an attempt whose side
    # effect is unknown, before it resolves the outcome by key or status lookup.
    RESOLVE = "resolve"
    # Nor this: an operator's cancel that arrived while the call was in flight, recorded on
    # that call's attempt (design.md "Cancel"), whatever the observation would have decided.
    STOP_CANCELLED = "stop_cancelled"


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str
    budget: BudgetName | None = None              # for STOP_BUDGET
    replan_reason: ReplanReason | None = None     # for REPLAN


def decide(
    observation: Observation,
    *,
    repeated_without_progress: bool,
    budget_exhausted: BudgetName | str | bool | None,
    completion_verified: bool,
    deadline_passed: bool = False,
    retry_allowed: bool = False,
    retry_budget_left: bool = True,
    polling: bool = False,
    poll_allowed: bool = False,
    has_next_step: bool = False,
) -> Verdict:
    if deadline_passed:
        return Verdict(Decision.STOP_BUDGET, "the deadline passed during the call: no verification runs",
                       budget=BudgetName.DEADLINE)
    if completion_verified:
        return Verdict(Decision.COMPLETE, "the completion criteria are met")
    if budget_exhausted:
        name = BudgetName(budget_exhausted) if isinstance(budget_exhausted, str) else None
        return Verdict(Decision.STOP_BUDGET, f"the next action would exceed the {name or 'run'} budget",
                       budget=name)
    if observation.status is Status.TERMINAL:
        code = observation.error_code.value if observation.error_code else "unknown"
        why = observation.error_message or observation.retry_guidance
        reason = f"terminal failure ({code}): {why}" if why else f"terminal failure ({code})"
        return Verdict(Decision.STOP_TERMINAL_FAILURE, reason)
    if repeated_without_progress and not observation.state_changed:
        return Verdict(Decision.STOP_STALLED, "the same action had the same outcome with no state change in between")
    if observation.status is Status.RETRYABLE:
        return _after_retryable(observation, retry_allowed, retry_budget_left)
    return _after_ok(observation, polling, poll_allowed, has_next_step)


def _after_retryable(observation: Observation, retry_allowed: bool, retry_budget_left: bool) -> Verdict:
    code = observation.error_code.value if observation.error_code else "error"
    if retry_allowed and not retry_budget_left:
        return Verdict(Decision.STOP_BUDGET, f"{code} is retryable but the run's retry budget is spent",
                       budget=BudgetName.RETRIES)
    if retry_allowed:
        return Verdict(Decision.RETRY, f"{code} is retryable and the retry policy has attempts left")
    # The step itself failed (dependency_failed would blame a step it depends on): its path is blocked.
    return Verdict(Decision.REPLAN, f"{code}: the retry policy is spent, the step has failed",
                   replan_reason=ReplanReason.PATH_BLOCKED)


def _after_ok(observation: Observation, polling: bool, poll_allowed: bool, has_next_step: bool) -> Verdict:
    if polling and poll_allowed:
        return Verdict(Decision.POLL, "polling: the result does not meet the polling condition yet")
    if polling:
        return Verdict(Decision.REPLAN, "polling reached its attempt limit without meeting its condition",
                       replan_reason=ReplanReason.PATH_BLOCKED)
    if has_next_step:
        return Verdict(Decision.CONTINUE, "ok: continue with the next step")
    if is_empty(observation.output):
        return Verdict(Decision.REPLAN, "the plan is done and its last result was empty",
                       replan_reason=ReplanReason.RESULT_NOT_FOUND)
    return Verdict(Decision.REPLAN, "the plan is done without meeting the completion criteria",
                   replan_reason=ReplanReason.NEW_INFORMATION)
