from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self):
        from runs import otel

        # Before the WSGI handler loads its middleware: request spans need theirs inserted.
        otel.instrument_frameworks()
