"""Demo data of the evaluation pages: the bundled suites, each measured once by the demo operator.

Idempotent (nothing is run when an evaluation exists); `python agentops/dev.py up` runs it after seed_demo.
"""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core.project_access import demo_project
from core.projects import project_scope
from evaluation.models import Evaluation
from evaluation.services import evaluation_run_now, evaluation_suites_sync


class Command(BaseCommand):
    help = "Sync the bundled evaluation suites and measure each once, as the demo operator (after seed_demo)."

    def handle(self, *args, **options):
        with project_scope(demo_project()):   # the demo's project (seed_demo)
            self._seed()

    def _seed(self):
        suites = evaluation_suites_sync()
        if Evaluation.objects.exists():
            return
        operator = get_user_model().objects.filter(username="operator").first()
        if operator is None:
            raise CommandError("no demo operator: run seed_demo first")
        for suite in suites:
            evaluation = evaluation_run_now(user=operator, suite_id=suite.pk, label="demo baseline")
            self.stdout.write(f"  evaluation {evaluation.pk} ({suite.name}, {evaluation.planning_mode} planner): "
                              f"{evaluation.summary.get('headline', evaluation.status)}")
