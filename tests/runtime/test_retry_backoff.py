import random

from runtime.capability import RetryPolicy
from runtime.observation import ErrorCode, Observation
from runtime.retry import backoff_s, retry_allowed, retry_delay_s

POLICY = RetryPolicy(max_attempts=3, backoff_base_s=1.0, backoff_cap_s=4.0)


def test_backoff_grows_exponentially_within_jitter_and_is_capped():
    rng = random.Random(1)
    for retry_number, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (10, 4.0)]:
        delay = backoff_s(POLICY, retry_number, rng)
        assert ceiling / 2 <= delay <= ceiling


def test_backoff_is_deterministic_with_a_seeded_rng():
    assert backoff_s(POLICY, 2, random.Random(7)) == backoff_s(POLICY, 2, random.Random(7))


def test_retry_after_is_a_floor():
    throttled = Observation.failure(ErrorCode.RATE_LIMITED, retry_after_s=30)
    assert retry_delay_s(POLICY, throttled, 1, random.Random(0)) == 30
    assert retry_delay_s(POLICY, Observation.failure(ErrorCode.RATE_LIMITED, retry_after_s=0.01), 3,
                         random.Random(0)) >= 2.0


def test_retry_is_allowed_only_for_retryable_codes_within_attempts():
    timeout = Observation.failure(ErrorCode.TIMEOUT)
    assert retry_allowed(POLICY, timeout, attempts_made=2)
    assert not retry_allowed(POLICY, timeout, attempts_made=3)
    assert not retry_allowed(POLICY, Observation.failure(ErrorCode.NOT_FOUND), attempts_made=1)
    assert not retry_allowed(POLICY, Observation.success(1), attempts_made=1)
    only_5xx = RetryPolicy(retry_on=frozenset({ErrorCode.SERVER_ERROR}))
    assert not retry_allowed(only_5xx, timeout, attempts_made=1)
