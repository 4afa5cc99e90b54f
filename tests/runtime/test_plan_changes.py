"""One plan diff: the runtime's record of a revision and the trace page's fallback both use step_changes."""
from runtime.plan import Step, step_changes
from runtime.plan_intake import plan_changes


def test_it_names_added_removed_and_changed_steps_in_the_order_of_the_plans():
    before = (Step("s1", "search", {"q": "a"}), Step("s2", "notify"))
    after = (Step("s1", "lookup", {"q": "b"}, depends_on=("s0",)), Step("s3", "ticket"))
    changes = plan_changes(before, after)
    assert changes == {"added": ["s3 (ticket)"], "removed": ["s2 (notify)"],
                       "changed": ["s1: capability, arguments, depends_on"],
                       "summary": "added s3 (ticket); removed s2 (notify); changed s1: capability, arguments, depends_on"}


def test_the_same_steps_are_no_change():
    steps = (Step("s1", "search", {"q": "a"}),)
    assert plan_changes(steps, steps)["summary"] == "no change"


def test_stored_steps_may_lack_a_capability_or_carry_other_keys():
    changes = step_changes({"s1": {"id": "s1", "capability": "a", "note": 1}}, {"s1": {"id": "s1", "note": 2},
                                                                              "s2": {"id": "s2"}})
    assert changes == {"added": ["s2 (?)"], "removed": [], "changed": ["s1: capability, note"]}
