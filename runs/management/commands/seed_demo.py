"""Demo data for a first look: users per role, the bundled capabilities, a few runs.

The evaluation app adds its own (seed_demo_evaluations: the bundled suites, measured once).

Idempotent: users and runs are created once; passwords are generated on the
first run, kept in var/demo-credentials.json (git-ignored) and printed each time.
"""
import json
import secrets

from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from capabilities.kinds.python.sync import python_capabilities_sync
from core.project_access import demo_project, grant_role
from core.projects import project_scope
from core.roles import OPERATOR, REGISTRY_ADMIN, VIEWER, sync_role_groups
from runs import services
from runs.models import Run
from runs.worker import engine

DEMO_USERS = (
    ("admin", None, "superuser: everything, including the Django admin"),
    ("operator", OPERATOR, "starts and cancels runs, approves and rejects steps"),
    ("reviewer", OPERATOR, "a second operator, for four-eyes approvals"),
    ("viewer", VIEWER, "reads everything"),
    ("registry", REGISTRY_ADMIN, "creates, edits and disables capabilities"),
)

DEMO_RUNS = (
    # (goal, completion, planner, planner_config)
    ("Find the travel policy",
     {"capability": "get_document", "path": "id", "exists": True}, "rules", {}),
    ("Find the holiday rules",
     {"capability": "get_document", "path": "id", "exists": True}, "rules", {}),
    ("Find the remote work equipment policy",
     {"capability": "get_document", "path": "id", "exists": True}, "rules", {}),
    ("Find the quantum teleportation reimbursement policy",
     {"capability": "search_documents", "path": "documents.0.id", "exists": True}, "scripted",
     {"plans": [[{"capability": "search_documents", "arguments": {"q": "quantum teleportation"}}],
                [{"capability": "search_documents", "arguments": {"q": "quantum teleportation"}}]]}),
    ("Open a ticket about the expenses policy and wait until it is resolved",
     {"capability": "get_ticket_status", "path": "status", "equals": "resolved"}, "rules", {}),
)


class Command(BaseCommand):
    help = "Load demo users (one per role), sync the bundled capabilities and run a few demo runs."

    def add_arguments(self, parser):
        parser.add_argument("--no-runs", action="store_true", help="users and capabilities only")

    def handle(self, *args, no_runs, **options):
        sync_role_groups(apps)
        # Everything the demo makes lives in the "demo" project; its users hold their roles there.
        with project_scope(demo_project()):
            python_capabilities_sync()
            credentials = self._users()
            if not no_runs:
                self._runs()
        self.stdout.write(self.style.SUCCESS("Demo users (also in var/demo-credentials.json):"))
        for username, group, what in DEMO_USERS:
            self.stdout.write(f"  {username:<9} {credentials[username]:<22} {group or 'superuser':<15} {what}")

    def _users(self) -> dict[str, str]:
        path = settings.VAR_DIR / "demo-credentials.json"
        credentials = json.loads(path.read_text()) if path.exists() else {}
        for username, group, _ in DEMO_USERS:
            if User.objects.filter(username=username).exists() and username in credentials:
                continue
            password = credentials.get(username) or secrets.token_urlsafe(12)
            user, _ = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.is_superuser = user.is_staff = group is None
            user.save()
            # The superuser holds every project, and acts first where it holds a role: the demo.
            for role in [group] if group else [OPERATOR, REGISTRY_ADMIN]:
                grant_role(user, role, demo_project())
            credentials[username] = password
        path.write_text(json.dumps(credentials, indent=2))
        path.chmod(0o600)
        return credentials

    def _runs(self) -> None:
        if Run.objects.exists():
            return
        operator = User.objects.get(username="operator")
        for goal, completion, planner, config in DEMO_RUNS:
            run = services.run_start(owner=operator, goal=goal, completion=completion,
                                     budgets={"deadline_s": 3600, "max_revisions": 5},
                                     planner=planner, planner_config=config)
            # Advanced here, in-process, so the demo has finished runs before the worker starts.
            engine.run_advance(run_id=run.pk, worker="seed-demo")
            run.refresh_from_db()
            self.stdout.write(f"  run {run.pk}: {run.status} {run.stop_reason} — {goal}")
