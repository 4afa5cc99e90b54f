"""Background work queued by task name.

Services queue work without importing a tasks module: the tasks modules import the
services they call, never the other way, so no import cycle forms through them. The
task object is the registered one (eager mode and the task's own options apply).
"""
from __future__ import annotations

from celery import current_app
from celery.result import AsyncResult


def task(name: str):
    """The registered Celery task called `name`; the apps' tasks modules are imported on first use."""
    tasks = current_app.tasks
    if name not in tasks:
        # Fires Celery's autodiscovery of every installed app's tasks module.
        current_app.loader.import_default_modules()
    return tasks[name]


def send(name: str, args: tuple = (), **options) -> AsyncResult:
    """Queue the task called `name` with `args`; options as apply_async's (kwargs=, countdown=, ...)."""
    return task(name).apply_async(args, **options)
