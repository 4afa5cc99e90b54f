from runtime.plan import Plan, Step, parse_plan


def test_it_parses_a_list_of_steps_with_default_ids():
    parsed = parse_plan([{"capability": "a", "arguments": {"x": 1}}, {"capability": "b", "depends_on": ["s1"]}])
    assert parsed.errors == ()
    assert [s.id for s in parsed.plan.steps] == ["s1", "s2"]
    assert parsed.plan.steps[1].depends_on == ("s1",)
    assert parsed.plan.steps[1].arguments == {}


def test_it_parses_the_object_form_with_tokens_and_cost():
    parsed = parse_plan({"steps": [{"id": "find", "capability": "a", "expected_outcome": "found"}], "tokens": 40, "cost": 0.5})
    assert parsed.errors == ()
    assert parsed.tokens == 40 and parsed.cost == 0.5
    assert parsed.plan.steps[0] == Step(id="find", capability="a", expected_outcome="found")


def test_it_collects_every_parse_error_instead_of_raising():
    parsed = parse_plan([
        "not a step",
        {"capability": "", "arguments": []},
        {"id": "x", "capability": "a", "depends_on": [1]},
        {"id": "x", "capability": "a"},
        {"id": "x", "capability": "b"},
    ])
    codes = [(e.code, e.step_id) for e in parsed.errors]
    assert ("malformed_step", "s1") in codes
    assert codes.count(("malformed_step", "s2")) == 2
    assert ("malformed_step", "x") in codes
    assert ("duplicate_step_id", "x") in codes
    assert [s.id for s in parsed.plan.steps] == ["x"]


def test_it_rejects_something_that_is_not_a_plan():
    assert [e.code for e in parse_plan("search for it").errors] == ["malformed_plan"]
    assert [e.code for e in parse_plan({"steps": "x"}).errors] == ["malformed_plan"]


def test_it_rejects_an_empty_plan():
    assert [e.code for e in parse_plan([]).errors] == ["empty_plan"]


def test_it_rejects_negative_tokens():
    assert "malformed_plan" in [e.code for e in parse_plan({"steps": [{"capability": "a"}], "tokens": -1}).errors]


def test_steps_round_trip_through_dicts():
    step = Step(id="s1", capability="a", arguments={"q": "x"}, expected_outcome="y", depends_on=("s0",))
    assert Step.from_dict(step.to_dict()) == step
    assert Plan((step,)).step("s1") is step
