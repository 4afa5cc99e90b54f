"""Sync the bundled evaluation suites and evaluate one now: planning against direct execution.

Runs in this process with the same runner the Celery task uses, prints a row per
task with its verdict and the aggregate per mode (or JSON with --json), exits 0.
"""
import json as jsonlib

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core import jsonlimits
from core.errors import ServiceError
from core.project_access import add_project_argument, command_project
from evaluation import export
from evaluation.models import Evaluation, EvaluationSuite
from evaluation.selectors import task_rows
from evaluation.services import evaluation_run_now, evaluation_suites_sync
from evaluation.suites import SuiteError
from runtime.storable import UNSTORABLE, text_unstorable

SYSTEM_USER = "agentops-evaluation"


class Command(BaseCommand):
    help = "Run an evaluation suite in direct and planning mode and print the verdicts (syncs bundled suites first)."

    def add_arguments(self, parser):
        parser.add_argument("--suite", default="standard", help="suite name (default: standard)")
        parser.add_argument("--label", default="", help="a label to find this evaluation again as a baseline")
        parser.add_argument("--user", default=None,
                            help="owner of the evaluation's runs (default: the first superuser)")
        parser.add_argument("--planning-mode", choices=["scripted", "rules", "llm"], default=None,
                            help="the planner in planning mode (default: the suite's own)")
        parser.add_argument("--planner-config", default="{}", help="that planner's settings as JSON (llm)")
        parser.add_argument("--json", action="store_true", help="print the evaluation as JSON")
        add_project_argument(parser)

    def handle(self, *args, project, **options):
        with command_project(project):
            self._evaluate(**options)

    def _evaluate(self, *, suite, label, user, planning_mode, planner_config, **options):
        if any(text_unstorable(text) for text in (suite, label, user or "")):
            raise CommandError(f"--suite, --label and --user must be text: {UNSTORABLE}.")
        try:
            planner_config = jsonlimits.loads(planner_config)
        except ValueError as exc:
            raise CommandError(f"--planner-config is not valid JSON: {exc}") from None
        try:
            evaluation_suites_sync()
        except SuiteError as exc:
            raise CommandError(str(exc)) from None
        row = EvaluationSuite.objects.filter(name=suite).first()
        if row is None:
            names = ", ".join(EvaluationSuite.objects.order_by("name").values_list("name", flat=True))
            raise CommandError(f"no suite {suite!r} (there are: {names or 'none'})")
        try:
            evaluation = evaluation_run_now(user=self._owner(user), suite_id=row.pk, label=label,
                                            planning_mode=planning_mode, planner_config=planner_config)
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        if options["json"]:
            self.stdout.write(jsonlib.dumps(export.evaluation_dict(evaluation), indent=2, default=str))
        else:
            self._table(evaluation)
        if evaluation.status != Evaluation.Status.COMPLETED:
            raise CommandError(f"evaluation {evaluation.pk} {evaluation.status}: {evaluation.error[:2000]}")

    def _owner(self, username):
        User = get_user_model()
        if username:
            user = User.objects.filter(username=username).first()
            if user is None:
                raise CommandError(f"no user {username!r}")
            return user
        user = User.objects.filter(is_superuser=True, is_active=True).order_by("pk").first()
        if user is None:
            # Runs need an owner; an inactive account that cannot log in owns them when nobody else can.
            user, _ = User.objects.get_or_create(username=SYSTEM_USER, defaults={"is_active": False})
            if user.has_usable_password():
                user.set_unusable_password()
                user.save(update_fields=["password"])
        return user

    def _table(self, evaluation):
        w = self.stdout.write
        w(f"Evaluation {evaluation.pk} of suite {evaluation.suite.name}"
          f"{' (' + evaluation.label + ')' if evaluation.label else ''}: {evaluation.status}")
        w(f"{'task':<40} {'direct':<34} {'planning':<34} verdict")
        for row in task_rows(evaluation):
            cells = []
            for r in (row.direct, row.planning):
                outcome = "ok" if r.verified_success else (r.stop_reason or r.status)
                cells.append(f"{outcome[:20]:<20} {r.tool_calls:>2}c {r.tokens:>5}t {r.simulated_latency_s:>5.1f}s")
            mark = "" if not row.verdict_expected or row.verdict_expected == row.verdict_code else "  (expected " \
                + row.verdict_expected + ")"
            w(f"{row.task[:40]:<40} {cells[0]:<34} {cells[1]:<34} {row.verdict_code}{mark}")
        summary = evaluation.summary or {}
        w("")
        for mode, m in (summary.get("modes") or {}).items():
            w(f"{mode:<9} success {m['successes']}/{m['tasks']} ({(m['success_rate'] or 0) * 100:.0f} %), "
              f"mean tool calls {m['mean_tool_calls']:.2f}, repeated-action rate "
              f"{(m['repeated_action_rate'] or 0) * 100:.1f} %, mean latency {m['mean_latency_s']:.2f} s, "
              f"tokens {m['total_tokens']}, cost {m['total_cost']:.4f}, stall rate {(m['stall_rate'] or 0) * 100:.0f} %, "
              f"budget stops {(m['budget_stop_rate'] or 0) * 100:.0f} %, recovery rate "
              + (f"{m['recovery_rate'] * 100:.0f} %" if m.get("recovery_rate") is not None else "—"))
        w(summary.get("headline", ""))
        w(f"Verdicts as the suite expects: {summary.get('expectations_met', 0)} of {summary.get('expectations_total', 0)}")
