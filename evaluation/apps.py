from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    name = "evaluation"
    verbose_name = "Evaluation"

    def ready(self):
        from core.audit_log import pages_by_id, register_object_pages

        # The audit log links an evaluation's rows to its page.
        register_object_pages("evaluation", pages_by_id("evaluation:detail", "evaluation_id"))
