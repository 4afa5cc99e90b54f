from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    # The label the app had when it lived in the project package: existing databases keep
    # their tables (agentops_*), migration history and permissions ("agentops.view_auditevent").
    label = "agentops"
    verbose_name = "AgentOps"

    def ready(self):
        from core import tokens  # noqa: F401  (revokes tokens when a password changes)
