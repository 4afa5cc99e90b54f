from django.apps import AppConfig


class ReviewConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "review"
    verbose_name = "Review"

    def ready(self):
        from core.audit_log import pages_by_id, register_object_pages
        from review import autoscores, datasets, queues
        from review.models import Annotation, IncidentSummary, Score
        from runs.selectors import audit_run_pages
        from runs.signals import run_finished

        # The runtime's scores, written once a run's finish has committed (in the process that finished it).
        run_finished.connect(autoscores.on_run_finished, dispatch_uid="review.automatic_scores")
        # A finished run joins the review queues whose filter matches it.
        run_finished.connect(queues.on_run_finished, dispatch_uid="review.queue_finished_runs")
        for model in (Score, Annotation, IncidentSummary):
            register_object_pages(str(model._meta.model_name), audit_run_pages(model))
        register_object_pages("reviewqueue", pages_by_id("review:queue", "queue_id"))
        # Configs and root causes have their row on the settings page.
        register_object_pages("scoreconfig", _settings_rows("config"))
        register_object_pages("rootcausecategory", _settings_rows("root-cause"))
        from django.db.models.signals import post_save

        from core.models import Project
        from review.services import on_project_created

        # The runs list's bulk actions offer "add to an evaluation suite" (runs cannot import the evaluation).
        datasets.register_bulk_action()
        # A new project starts with the default root-cause list (its admins edit their own).
        post_save.connect(on_project_created, sender=Project, dispatch_uid="review.seed_root_causes")


def _settings_rows(anchor: str):
    from django.urls import reverse

    return lambda ids: {i: f"{reverse('review:settings')}#{anchor}-{i}" for i in ids if i.isdigit()}

