from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self):
        # At ready(), not at import: app modules import models, which need the app registry.
        from capabilities import usage
        from runs import otel

        # The registry's pages show usage read from this app's attempts (capabilities.usage).
        from runs.dashboard import capability_usage
        usage.use_reader(capability_usage)

        # Before the WSGI handler loads its middleware: request spans need theirs inserted.
        otel.instrument_frameworks()
