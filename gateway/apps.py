from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "MCP gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from core.audit_log import pages_by_id, register_object_pages
        from gateway.selectors import audit_agent_token_pages

        # The audit log links an agent's rows, and its tokens', to the agent's page.
        register_object_pages("agent", pages_by_id("gateway:agent", "agent_id"))
        register_object_pages("agenttoken", audit_agent_token_pages)
