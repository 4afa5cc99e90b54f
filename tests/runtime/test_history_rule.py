import itertools

from runs.runtime.history import HistoryEntry, appended, repeated_without_progress
from runs.runtime.observation import ErrorCode, Observation
from runs.runtime.signatures import action_signature, outcome_fingerprint, signature_text

SIG = signature_text(action_signature("search", {"q": "travel"}))
OTHER = signature_text(action_signature("search", {"q": "policy"}))
TIMEOUT = Observation.failure(ErrorCode.TIMEOUT)
FP = outcome_fingerprint(TIMEOUT)


ATTEMPT_NUMBERS = itertools.count(1)


def entry(signature=SIG, observation=TIMEOUT, kind="call"):
    return HistoryEntry(attempt_id=f"a{next(ATTEMPT_NUMBERS)}", capability="search", arguments={}, signature=signature,
                        fingerprint=outcome_fingerprint(observation), kind=kind, observation=observation)


def test_the_same_signature_and_outcome_again_is_repeated_without_progress():
    assert repeated_without_progress((entry(),), signature=SIG, fingerprint=FP)


def test_a_different_outcome_is_not_a_repeat():
    assert not repeated_without_progress((entry(),), signature=SIG,
                                         fingerprint=outcome_fingerprint(Observation.failure(ErrorCode.SERVER_ERROR)))


def test_a_different_signature_is_not_a_repeat():
    assert not repeated_without_progress((entry(),), signature=OTHER, fingerprint=FP)


def test_a_retry_the_policy_allowed_is_exempt():
    assert not repeated_without_progress((entry(),), signature=SIG, fingerprint=FP, allowed_retry=True)


def test_a_poll_the_policy_allowed_is_exempt():
    assert not repeated_without_progress((entry(),), signature=SIG, fingerprint=FP, allowed_poll=True)


def test_a_repeat_beyond_policy_is_not_exempt_even_after_earlier_retries():
    history = (entry(), entry(kind="retry"), entry(kind="retry"))
    assert repeated_without_progress(history, signature=SIG, fingerprint=FP, allowed_retry=False)


def test_a_state_change_in_between_resets_the_rule():
    changed = entry(signature=OTHER, observation=Observation.success({"ok": 1}, state_changed=True))
    assert not repeated_without_progress((entry(), changed), signature=SIG, fingerprint=FP)


def test_a_state_change_before_the_earlier_attempt_does_not_reset_it():
    changed = entry(signature=OTHER, observation=Observation.success({"ok": 1}, state_changed=True))
    assert repeated_without_progress((changed, entry()), signature=SIG, fingerprint=FP)


def test_an_attempt_outside_the_window_is_forgotten():
    history = ()
    history = appended(history, entry(), window=3)
    for _ in range(3):
        history = appended(history, entry(signature=OTHER), window=3)
    assert len(history) == 3
    assert not repeated_without_progress(history, signature=SIG, fingerprint=FP)


def test_entries_round_trip_through_dicts():
    e = entry()
    assert HistoryEntry.from_dict(e.to_dict()) == e
