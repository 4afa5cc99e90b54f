from django.apps import AppConfig


class IdentityConfig(AppConfig):
    name = "identity"
    verbose_name = "Single sign-on"
    default_auto_field = "django.db.models.BigAutoField"
