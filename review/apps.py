from django.apps import AppConfig


class ReviewConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "review"
    verbose_name = "Review"

    def ready(self):
        from core.audit_log import register_object_pages
        from review import autoscores
        from review.models import Annotation, IncidentSummary, Score
        from runs.selectors import audit_run_pages
        from runs.signals import run_finished

        # The runtime's scores, written once a run's finish has committed (in the process that finished it).
        run_finished.connect(autoscores.on_run_finished, dispatch_uid="review.automatic_scores")
        for model in (Score, Annotation, IncidentSummary):
            register_object_pages(str(model._meta.model_name), audit_run_pages(model))
