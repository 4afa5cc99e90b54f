from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self):
        from notifications import burn, tasks
        from runs.signals import approval_decided, run_finished

        # The task module at start, too: a fresh web worker never looks the task up by name lazily.
        approval_decided.connect(tasks.on_approval_decided, dispatch_uid="notifications.slack_refresh")
        run_finished.connect(burn.on_run_finished, dispatch_uid="notifications.usage_burn")
