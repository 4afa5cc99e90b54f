from runs.runtime.budgets import Budgets
from runs.runtime.capability import CapabilitySpec, SideEffect
from runs.runtime.plan import parse_plan
from runs.runtime.sim.simulation import StaticAuthorizer, StaticRegistry
from runs.runtime.validation import find_cycles, plan_depth, validate_plan

SEARCH = CapabilitySpec(name="search", schema={"type": "object",
                                               "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
                                               "required": ["q"], "additionalProperties": False},
                        max_argument_bytes=40)
TICKET = CapabilitySpec(name="ticket", side_effect=SideEffect.WRITE, permission="tickets.create")
READ_PROTECTED = CapabilitySpec(name="hr_read", side_effect=SideEffect.READ, permission="hr.read")
OLD = CapabilitySpec(name="old", enabled=False)
REGISTRY = StaticRegistry([SEARCH, TICKET, OLD, READ_PROTECTED])


DEFAULT_BUDGETS = Budgets()


def errors_of(steps, budgets=DEFAULT_BUDGETS, permissions=None):
    parsed = parse_plan(steps)
    assert parsed.errors == ()
    return validate_plan(parsed.plan, REGISTRY, budgets, StaticAuthorizer(permissions))


def codes(errors):
    return sorted((e.code, e.step_id) for e in errors)


def test_a_valid_plan_has_no_errors():
    assert errors_of([{"capability": "search", "arguments": {"q": "x"}}]) == ()


def test_it_rejects_an_unknown_capability():
    assert codes(errors_of([{"capability": "nope"}])) == [("unknown_capability", "s1")]


def test_it_rejects_a_disabled_capability():
    assert codes(errors_of([{"capability": "old"}])) == [("disabled_capability", "s1")]


def test_it_lists_every_schema_error_not_only_the_first():
    errors = errors_of([{"capability": "search", "arguments": {"n": "five", "extra": True}}])
    assert [e.code for e in errors] == ["invalid_arguments"] * 3
    text = " ".join(e.message for e in errors)
    assert "'q' is a required property" in text and "extra" in text and "n:" in text


def test_it_rejects_arguments_over_the_size_limit():
    assert codes(errors_of([{"capability": "search", "arguments": {"q": "x" * 50}}])) == [("arguments_too_large", "s1")]


def test_it_rejects_an_unknown_dependency():
    steps = [{"capability": "search", "arguments": {"q": "x"}, "depends_on": ["s9"]}]
    assert codes(errors_of(steps)) == [("unknown_dependency", "s1")]


def test_it_rejects_a_cyclic_dependency_once_per_cycle():
    errors = errors_of([{"id": "a", "capability": "search", "arguments": {"q": "x"}, "depends_on": ["b"]},
                        {"id": "b", "capability": "search", "arguments": {"q": "x"}, "depends_on": ["a"]},
                        {"id": "c", "capability": "search", "arguments": {"q": "x"}, "depends_on": ["c"]}])
    assert [e.code for e in errors] == ["cyclic_dependency", "cyclic_dependency"]
    assert "a -> b -> a" in errors[0].message


def test_it_rejects_too_many_steps():
    steps = [{"capability": "search", "arguments": {"q": "x"}}] * 3
    assert codes(errors_of(steps, Budgets(max_plan_steps=2))) == [("too_many_steps", None)]


def test_it_rejects_a_plan_deeper_than_the_budget():
    steps = [{"id": "a", "capability": "search", "arguments": {"q": "x"}},
             {"id": "b", "capability": "search", "arguments": {"q": "x"}, "depends_on": ["a"]},
             {"id": "c", "capability": "search", "arguments": {"q": "x"}, "depends_on": ["b"]}]
    assert codes(errors_of(steps, Budgets(max_plan_depth=2))) == [("too_deep", None)]
    assert errors_of(steps, Budgets(max_plan_depth=3)) == ()


def test_it_rejects_a_side_effect_the_owner_may_not_use():
    assert codes(errors_of([{"capability": "ticket"}], permissions=["docs.read"])) == [("permission_denied", "s1")]
    assert errors_of([{"capability": "ticket"}], permissions=["tickets.create"]) == ()


def test_a_read_capability_is_checked_for_permission_only_at_the_point_of_action():
    assert errors_of([{"capability": "hr_read"}], permissions=[]) == ()


def test_it_lists_every_error_of_every_step_together():
    steps = [{"capability": "nope"}, {"capability": "old"}, {"capability": "search", "arguments": {}},
             {"capability": "ticket", "depends_on": ["zz"]}]
    assert codes(errors_of(steps, Budgets(max_plan_steps=3), permissions=[])) == [
        ("disabled_capability", "s2"), ("invalid_arguments", "s3"), ("permission_denied", "s4"),
        ("too_many_steps", None), ("unknown_capability", "s1"), ("unknown_dependency", "s4")]


def test_an_invalid_capability_schema_is_reported_not_raised():
    registry = StaticRegistry([CapabilitySpec(name="bad", schema={"type": "nonsense"})])
    parsed = parse_plan([{"capability": "bad"}])
    assert [e.code for e in validate_plan(parsed.plan, registry, Budgets(), StaticAuthorizer())] == ["invalid_schema"]


def test_depth_and_cycles_helpers():
    assert plan_depth({"a": (), "b": ("a",), "c": ("a", "b")}) == 3
    assert plan_depth({}) == 0
    assert find_cycles({"a": ("b",), "b": ()}) == []
