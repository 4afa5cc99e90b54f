"""Usage figures for the registry list: calls, error rate and p95 latency over 24 h, from the database."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from capabilities.usage import Usage, capability_usage

pytestmark = pytest.mark.django_db


def test_it_counts_calls_errors_and_nearest_rank_p95_per_capability(make_attempt):
    for latency in range(1, 21):  # 1..20 s, two of them failed
        make_attempt("alpha", latency_s=float(latency), status="terminal" if latency in (3, 7) else "ok")
    make_attempt("beta", latency_s=0.5)
    usage = capability_usage()
    assert usage["alpha"] == Usage(calls=20, errors=2, p95_latency_s=19.0)
    assert usage["alpha"].error_rate == pytest.approx(0.1)
    assert usage["beta"] == Usage(calls=1, errors=0, p95_latency_s=0.5)


def test_attempts_older_than_24_hours_do_not_count(make_attempt):
    make_attempt("alpha", latency_s=9.0, started_at=timezone.now() - timedelta(hours=25))
    make_attempt("alpha", latency_s=1.0)
    assert capability_usage()["alpha"] == Usage(calls=1, errors=0, p95_latency_s=1.0)


def test_it_takes_two_queries_whatever_the_data(make_attempt, django_assert_num_queries):
    for i in range(30):
        make_attempt(f"cap_{i % 3}", latency_s=i / 10)
    with django_assert_num_queries(2):
        usage = capability_usage(names=["cap_0", "cap_1", "cap_2", "unused"])
    assert sorted(usage) == ["cap_0", "cap_1", "cap_2"]
    assert usage["cap_0"].p95_latency_s == pytest.approx(2.7)


def test_no_attempts_means_no_figures():
    assert capability_usage(names=["search_documents"]) == {}
    assert Usage().error_rate is None


def test_an_evaluations_simulated_capability_of_the_same_name_is_not_counted(make_attempt, operator):
    # A new capability named like a simulated one an evaluation ran earlier starts with no usage.
    from evaluation.models import Evaluation, EvaluationSuite
    from runs.models import Attempt, Run

    simulated = make_attempt("refund_order", latency_s=3.0)
    suite = EvaluationSuite.objects.create(name="refunds", tasks=[{"name": "a"}])
    evaluation = Evaluation.objects.create(suite=suite, started_by=operator)
    Run.objects.filter(pk=simulated.run_id).update(evaluation=evaluation)
    assert capability_usage(names=["refund_order"]) == {}
    from capabilities.usage import capability_recent_attempts

    assert list(capability_recent_attempts(name="refund_order")) == []
    Run.objects.filter(pk=simulated.run_id).update(evaluation=None)
    assert capability_usage(names=["refund_order"])["refund_order"].calls == 1
    assert Attempt.objects.count() == 1
