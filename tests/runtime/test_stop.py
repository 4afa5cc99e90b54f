"""The stop-reason vocabulary's helpers: the prefix a query for a kind matches, and the stall kind
read from a stop detail (as the runtime writes it now, and as it wrote it before runs stored it)."""
from runtime.budgets import BudgetName
from runtime.stop import StallKind, StopKind, StopReason


def test_it_gives_the_prefix_every_qualified_reason_of_a_kind_shares():
    prefix = StopReason.prefix(StopKind.BUDGET_EXHAUSTED)
    assert str(StopReason(StopKind.BUDGET_EXHAUSTED, BudgetName.COST)).startswith(prefix)
    assert not str(StopReason(StopKind.STALLED)).startswith(prefix)
    assert not StopKind.BUDGET_EXHAUSTED.value.startswith(prefix)  # only qualified reasons match it


def test_it_reads_the_stall_kind_the_runtime_writes_first_in_the_detail():
    for kind in StallKind:
        assert StallKind.in_detail(f"{kind.value}: why; no attempt failed") is kind


def test_it_reads_the_stall_kind_from_the_words_of_older_details():
    assert StallKind.in_detail('step s1: search {"q":"x"} repeated with the same outcome (retryable timeout)') \
        is StallKind.REPEATED_WITHOUT_PROGRESS
    for words in ("the planner has no further plan after: x", "the planner proposed no plan",
                  "direct mode does not replan (x)"):
        assert StallKind.in_detail(words) is StallKind.PLANNER_EXHAUSTED
    assert StallKind.in_detail("something else") is None
