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

        # The audit log links a run's rows, and its approvals' and plan submissions', to the run's page.
        from core.audit_log import pages_by_id, register_object_pages
        from runs.models import Approval, PlanSubmission
        from runs.selectors import audit_run_pages
        register_object_pages("run", pages_by_id("runs:detail", "run_id"))
        register_object_pages("approval", audit_run_pages(Approval))
        register_object_pages("plansubmission", audit_run_pages(PlanSubmission))

        # Before the WSGI handler loads its middleware: request spans need theirs inserted.
        otel.instrument_frameworks()
