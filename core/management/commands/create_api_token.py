"""Create an API token for a user from the command line (scripts, first setup)."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core.errors import ServiceError
from core.tokens import token_create
from runtime.storable import UNSTORABLE, text_unstorable


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print its key (shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="command line")
        parser.add_argument("--days", type=int, default=None, help="lifetime (default AGENTOPS_API_TOKEN_DEFAULT_DAYS)")
        parser.add_argument("--project", default=None, metavar="SLUG",
                            help="the project the token acts in, one the user holds (default: the first they hold)")

    def handle(self, *args, username, name, days, project, **options):
        if any(text_unstorable(text) for text in (username, name, project or "")):
            raise CommandError(f"USERNAME, --name and --project must be text: {UNSTORABLE}.")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        try:
            token, key = token_create(user=user, name=name, expires_in_days=days, project=project)
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        self.stderr.write(f"Token {token.name!r} for {username} in project {token.project.slug}, "
                          f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC:")
        self.stdout.write(key)
