from django.apps import AppConfig


class AgentOpsConfig(AppConfig):
    name = "agentops"
    verbose_name = "AgentOps"

    def ready(self):
        from agentops import tokens  # noqa: F401  (revokes tokens when a password changes)
