"""Celery tasks: thin interfaces to the evaluation runner and services. They take ids and are safe to repeat."""
from celery import shared_task

from evaluation.runner import evaluation_run
from evaluation.services import evaluation_fail_stale


@shared_task(name="evaluation.run_evaluation", acks_late=True, ignore_result=True)
def run_evaluation(evaluation_id: int) -> None:
    # Claims the evaluation with a conditional UPDATE: a repeated delivery finds it taken and returns.
    evaluation_run(evaluation_id=evaluation_id)


@shared_task(name="evaluation.fail_stale_evaluations", ignore_result=True)
def fail_stale_evaluations() -> int:
    return evaluation_fail_stale()
