"""The runtime's frozen records: the cheap replace() and the dict form kept from pass to pass."""
from __future__ import annotations

import pytest

from runtime.plan import Step
from runtime.records import replace
from runtime.state import StepProgress


def progress() -> StepProgress:
    return StepProgress(step=Step(id="s1", capability="search", arguments={"q": "x"}), index=0)


def test_replace_changes_only_the_named_fields():
    before = progress()
    after = replace(before, attempts=2, status="succeeded")
    assert (after.attempts, after.status, after.step, after.index) == (2, "succeeded", before.step, 0)
    assert before.attempts == 0 and before.status == "pending"


def test_replace_refuses_a_field_the_record_does_not_have():
    with pytest.raises(TypeError, match="no field named attempt"):
        replace(progress(), attempt=1)


def test_the_dict_form_is_built_once_and_a_replaced_record_has_its_own():
    before = progress()
    assert before.to_dict() is before.to_dict()
    after = replace(before, attempts=1)
    assert after.to_dict()["attempts"] == 1
    assert before.to_dict()["attempts"] == 0
    assert after == StepProgress.from_dict(after.to_dict())
