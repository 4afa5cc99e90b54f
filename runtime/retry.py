"""When to retry a retryable observation, and how long to wait first."""
from __future__ import annotations

import random

from .capability import RetryPolicy
from .observation import Observation, Status


def retry_allowed(policy: RetryPolicy, observation: Observation, *, attempts_made: int) -> bool:
    """attempts_made counts the tries of this call so far, the first included."""
    return (observation.status is Status.RETRYABLE
            and observation.error_code in policy.retry_on
            and attempts_made < policy.max_attempts)


def exponential_backoff_s(base_s: float, cap_s: float, retry_number: int) -> float:
    """base_s doubled for every retry after the first, never above cap_s."""
    return min(cap_s, base_s * float(2 ** max(0, retry_number - 1)))


def jittered_backoff_s(base_s: float, cap_s: float, retry_number: int, rng: random.Random) -> float:
    """Capped exponential backoff with "equal jitter": half fixed, half random.

    The fixed half keeps a floor so retries never hammer the callee; the random
    half spreads many runs retrying the same dependency.
    """
    ceiling = exponential_backoff_s(base_s, cap_s, retry_number)
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def backoff_s(policy: RetryPolicy, retry_number: int, rng: random.Random) -> float:
    return jittered_backoff_s(policy.backoff_base_s, policy.backoff_cap_s, retry_number, rng)


def retry_delay_s(policy: RetryPolicy, observation: Observation, retry_number: int, rng: random.Random) -> float:
    """A throttled callee's Retry-After is a floor, not a suggestion."""
    delay = backoff_s(policy, retry_number, rng)
    if observation.retry_after_s is not None:
        delay = max(delay, float(observation.retry_after_s))
    return delay
