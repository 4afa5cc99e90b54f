"""Register the @capability functions in the registry (also run after every migrate)."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from capabilities.kinds.python.sync import python_capabilities_sync


class Command(BaseCommand):
    help = ("Create or update registry rows for the python functions registered with @capability in the "
            "capability modules (settings.AGENTOPS_CAPABILITY_MODULES, default: the demo functions).")

    def add_arguments(self, parser):
        parser.add_argument("--module", action="append", default=[], dest="modules",
                            help="Also sync the @capability functions of this module (repeatable).")

    def handle(self, *args, modules, **options):
        configured = tuple(settings.AGENTOPS_CAPABILITY_MODULES)
        result = python_capabilities_sync(modules=configured + tuple(modules))
        for label, names in (("created", result.created), ("updated", result.updated),
                             ("unchanged", result.unchanged)):
            if names:
                self.stdout.write(f"{label}: {', '.join(names)}")
        if result.errors:
            for name, message in result.errors.items():
                self.stderr.write(f"{name}: {message}")
            raise CommandError(f"{len(result.errors)} capabilities could not be synced")
        self.stdout.write(self.style.SUCCESS(
            f"{len(result.created)} created, {len(result.updated)} updated, {len(result.unchanged)} unchanged"))
