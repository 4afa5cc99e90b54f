"""AgentOps project package: settings, URLs, the Celery app and cross-cutting models."""
from .celery import app as celery_app

__all__ = ("celery_app",)
