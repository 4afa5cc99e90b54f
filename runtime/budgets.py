"""Budgets the runtime enforces outside the model, and the usage counted against them.

A budget is exhausted when the NEXT action would exceed it: reaching a limit
exactly on a completing step still completes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from .records import Record, declared_numbers, replace

SIDE_EFFECT_WINDOW_S = 60.0


class BudgetName(StrEnum):
    ITERATIONS = "iterations"
    REVISIONS = "revisions"
    TOOL_CALLS = "tool_calls"
    CAPABILITY_CALLS = "capability_calls"
    DEADLINE = "deadline"
    TOKENS = "tokens"
    COST = "cost"
    RETRIES = "retries"
    SIDE_EFFECT_RATE = "side_effect_rate"


class _Record:
    """A budgets or usage record, as JSON data: its dicts copied, its tuples as lists."""

    def to_dict(self: Record) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Budgets(_Record):
    max_iterations: int = 50
    max_revisions: int = 5
    max_plan_steps: int = 20
    max_plan_depth: int = 5
    max_tool_calls: int = 100
    max_calls_per_capability: dict[str, int] = field(default_factory=dict)
    deadline_s: float = 600.0
    per_call_timeout_s: float = 60.0
    max_tokens: int = 200_000
    max_cost: float = 10.0
    max_retries: int = 10
    max_side_effects_per_minute: int = 30

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Budgets:
        data = dict(data or {})
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown budgets: {', '.join(sorted(unknown))}")
        if "max_calls_per_capability" in data:
            data["max_calls_per_capability"] = {str(k): int(v) for k, v in data["max_calls_per_capability"].items()}
        return cls(**{**data, **declared_numbers(cls, data)})

    def deadline_at(self, started_at: float) -> float:
        return started_at + self.deadline_s


@dataclass(frozen=True)
class Usage(_Record):
    iterations: int = 0
    plans: int = 0          # plans received from the planner, rejected ones included
    revisions: int = 0      # plans received after the first
    tool_calls: int = 0
    calls_per_capability: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    cost: float = 0.0
    retries: int = 0
    polls: int = 0
    side_effects: int = 0
    # Only the commits inside the rate window are kept, so the state stays bounded.
    side_effect_times: tuple[float, ...] = ()
    elapsed_s: float = 0.0
    # Of tokens and cost: what planner calls lost with their worker were counted at without an
    # answer (their ceiling), so a reader can tell the estimate from what providers reported.
    estimated_tokens: int = 0
    estimated_cost: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = dict(data or {})
        data["calls_per_capability"] = dict(data.get("calls_per_capability") or {})
        data["side_effect_times"] = tuple(data.get("side_effect_times") or ())
        return cls(**data)

    def counted_call(self, capability: str, *, retry: bool, poll: bool) -> Usage:
        per = dict(self.calls_per_capability)
        per[capability] = per.get(capability, 0) + 1
        return replace(self, iterations=self.iterations + 1, tool_calls=self.tool_calls + 1,
                       calls_per_capability=per, retries=self.retries + int(retry), polls=self.polls + int(poll))

    def counted_lookup(self, capability: str) -> Usage:
        """A status lookup: a tool call and a call of its capability, not an iteration or a retry."""
        per = dict(self.calls_per_capability)
        per[capability] = per.get(capability, 0) + 1
        return replace(self, tool_calls=self.tool_calls + 1, calls_per_capability=per)

    def counted_plan(self, *, tokens: int, cost: float, received: bool) -> Usage:
        return replace(self, iterations=self.iterations + 1, tokens=self.tokens + tokens, cost=self.cost + cost,
                       plans=self.plans + int(received),
                       revisions=self.revisions + int(received and self.plans > 0))

    def counted_lost_planner_call(self, *, tokens: int, cost: float, estimated: bool) -> Usage:
        """A planner call whose worker was lost: it was made (an iteration) and spent, but brought no plan."""
        return replace(self, iterations=self.iterations + 1, tokens=self.tokens + tokens, cost=self.cost + cost,
                       estimated_tokens=self.estimated_tokens + (tokens if estimated else 0),
                       estimated_cost=self.estimated_cost + (cost if estimated else 0.0))

    def counted_side_effect(self, now: float) -> Usage:
        return replace(self, side_effects=self.side_effects + 1,
                       side_effect_times=_recent(self.side_effect_times, now) + (now,))

    def at(self, now: float, started_at: float) -> Usage:
        return replace(self, elapsed_s=max(0.0, now - started_at),
                       side_effect_times=_recent(self.side_effect_times, now))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    return list(value) if isinstance(value, tuple) else value


def _recent(times: tuple[float, ...], now: float) -> tuple[float, ...]:
    return tuple(t for t in times if now - t < SIDE_EFFECT_WINDOW_S)


def deadline_reached(budgets: Budgets, started_at: float, now: float) -> bool:
    """No time is left for another action."""
    return now >= budgets.deadline_at(started_at)


def deadline_passed(budgets: Budgets, started_at: float, now: float) -> bool:
    """A call that ended exactly on the deadline may still be verified; one after it may not."""
    return now > budgets.deadline_at(started_at)


# "Several budgets at once" (design.md): the first of these that refuses is the one reported,
# on every path that wants an action.
ORDER = (BudgetName.DEADLINE, BudgetName.ITERATIONS, BudgetName.REVISIONS, BudgetName.TOOL_CALLS,
         BudgetName.CAPABILITY_CALLS, BudgetName.RETRIES, BudgetName.TOKENS, BudgetName.COST,
         BudgetName.SIDE_EFFECT_RATE)


@dataclass(frozen=True)
class Wanted:
    """What the next action would spend: which counters it advances."""

    iteration: bool = True             # a call or a planner call (a status lookup is not one)
    revision: bool = False             # a planner call for a plan after the first
    tool_call: bool = True             # a call, a lookup, or a plan (only worth it if a step could run)
    capability: str | None = None      # a call of this capability (its own limit)
    retry: bool = False                # a retry or an idempotent re-send
    planner_call: bool = False         # spends tokens and cost: with none left it would exceed
    side_effecting: bool = False       # counts against the side-effect rate
    wait_s: float = 0.0                # sleeps this long first (a backoff or a poll interval)


def refusing_budget(budgets: Budgets, usage: Usage, wanted: Wanted, *, started_at: float,
                    now: float) -> BudgetName | None:
    """THE budget the next action is refused by, or None: the first in ORDER that refuses.
    A wait that would cross the deadline is refused by the deadline, whatever else is spent."""
    deadline_at = budgets.deadline_at(started_at)
    refuses = {
        BudgetName.DEADLINE: now >= deadline_at or now + wanted.wait_s > deadline_at,
        BudgetName.ITERATIONS: wanted.iteration and usage.iterations + 1 > budgets.max_iterations,
        BudgetName.REVISIONS: wanted.revision and usage.revisions + 1 > budgets.max_revisions,
        BudgetName.TOOL_CALLS: wanted.tool_call and usage.tool_calls + 1 > budgets.max_tool_calls,
        BudgetName.CAPABILITY_CALLS: wanted.capability is not None
        and _capability_calls_spent(budgets, usage, wanted.capability),
        BudgetName.RETRIES: wanted.retry and usage.retries + 1 > budgets.max_retries,
        BudgetName.TOKENS: wanted.planner_call and usage.tokens >= budgets.max_tokens,
        BudgetName.COST: wanted.planner_call and usage.cost >= budgets.max_cost,
        BudgetName.SIDE_EFFECT_RATE: wanted.side_effecting
        and len(_recent(usage.side_effect_times, now)) + 1 > budgets.max_side_effects_per_minute,
    }
    return next((name for name in ORDER if refuses[name]), None)


def exhausted_before_planning(budgets: Budgets, usage: Usage, *, started_at: float, now: float,
                              revision: bool) -> BudgetName | None:
    return refusing_budget(budgets, usage, Wanted(revision=revision, planner_call=True),
                           started_at=started_at, now=now)


def exceeded_after_planning(budgets: Budgets, usage: Usage) -> BudgetName | None:
    """A planner's answer spent past tokens or cost (the only budgets an answer spends)."""
    if usage.tokens > budgets.max_tokens:
        return BudgetName.TOKENS
    if usage.cost > budgets.max_cost:
        return BudgetName.COST
    return None


def _capability_calls_spent(budgets: Budgets, usage: Usage, capability: str) -> bool:
    """One more call of this capability would pass its own limit (where it has one)."""
    limit = budgets.max_calls_per_capability.get(capability)
    return limit is not None and usage.calls_per_capability.get(capability, 0) + 1 > limit


def exhausted_before_call(budgets: Budgets, usage: Usage, *, capability: str, side_effecting: bool,
                          retry: bool, started_at: float, now: float, wait_s: float = 0.0) -> BudgetName | None:
    return refusing_budget(budgets, usage, Wanted(capability=capability, retry=retry, side_effecting=side_effecting,
                                                  wait_s=wait_s), started_at=started_at, now=now)


def exhausted_before_lookup(budgets: Budgets, usage: Usage, *, capability: str, started_at: float,
                            now: float) -> BudgetName | None:
    """A status lookup is a tool call and a call of its capability (not an iteration)."""
    return refusing_budget(budgets, usage, Wanted(iteration=False, capability=capability),
                           started_at=started_at, now=now)


def retry_budget_left(budgets: Budgets, usage: Usage) -> bool:
    return usage.retries + 1 <= budgets.max_retries


def remaining_time(budgets: Budgets, started_at: float, now: float) -> float:
    return max(0.0, budgets.deadline_at(started_at) - now)
