"""Write a recorded run as a scenario file; `run_scenario` on it reproduces the run's decisions."""
import json

from django.core.management.base import BaseCommand, CommandError

from runs.models import Run
from runs.trace.scenario_export import run_scenario_export


class Command(BaseCommand):
    help = "Export run RUN as a scenario file (recorded observations as responses, recorded plans as the planner)."

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, metavar="RUN", help="the run's id")
        parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")

    def handle(self, *args, run, output, **options):
        found = Run.objects.select_related("owner").filter(pk=run).first()
        if found is None:
            raise CommandError(f"Run {run} does not exist.")
        text = json.dumps(run_scenario_export(run=found), indent=2, default=str) + "\n"
        if output:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
            self.stderr.write(f"Wrote {output}: python manage.py run_scenario {output}")
        else:
            self.stdout.write(text, ending="")
