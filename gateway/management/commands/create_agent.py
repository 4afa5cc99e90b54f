"""python manage.py create_agent NAME --owner USER --capability CAP [--capability CAP ...]

Creates (or updates) an agent and issues it a new token, printed on the last line.
"""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from core import jsonlimits
from core.errors import ServiceError
from core.project_access import add_project_argument, command_project
from gateway import services
from runtime.storable import UNSTORABLE, text_unstorable


class Command(BaseCommand):
    help = "Register an MCP gateway agent (or update it) and print a new token for it on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--owner", required=True, help="username whose permissions the agent acts with")
        parser.add_argument("--capability", action="append", default=[], help="a capability it may see (repeat)")
        parser.add_argument("--budgets", default="{}", help='JSON, e.g. {"max_tool_calls": 20}')
        parser.add_argument("--completion", default="{}", help="JSON completion criteria (optional)")
        parser.add_argument("--expires-in-days", type=int, default=None)
        add_project_argument(parser)

    def handle(self, *args, project, **options):
        with command_project(project):
            self._create(**options)

    def _create(self, *, name, owner, capability, budgets, completion, expires_in_days, **options):
        if any(text_unstorable(text) for text in (name, owner, *capability)):
            raise CommandError(f"NAME, --owner and --capability must be text: {UNSTORABLE}.")
        user = get_user_model().objects.filter(username=owner).first()
        if user is None:
            raise CommandError(f"No user {owner!r}.")
        try:
            with transaction.atomic():   # both or neither: a refused token leaves no agent behind
                agent = services.agent_save(user=None, name=name, owner=user, capabilities=capability,
                                            budgets=jsonlimits.loads(budgets),
                                            completion=jsonlimits.loads(completion))
                token, key = services.agent_token_issue(user=None, agent=agent, name="create_agent",
                                                        expires_in_days=expires_in_days)
        except (ServiceError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Agent {agent.name!r} (owner {user.get_username()}, capabilities: "
                          f"{', '.join(agent.capabilities) or 'none'}); token {token.prefix}… expires "
                          f"{token.expires_at:%Y-%m-%d}. The token (shown once):")
        self.stdout.write(key)
