"""Background work queued by task name.

Services queue work without importing a tasks module: the tasks modules import the
services they call, never the other way, so no import cycle forms through them. The
task object is the registered one (eager mode and the task's own options apply).
"""
from __future__ import annotations

import threading

from celery import current_app
from celery.result import AsyncResult

# Celery's autodiscovery is not thread-safe: a second thread that asks while the first is
# still importing the tasks modules is told "nothing to import" (a global flag in
# celery.loaders.base) and finds no task (NotRegistered), as a fresh gthread web worker's
# first requests did. So the modules are imported once, under a lock, before any lookup.
_task_modules_lock = threading.Lock()
_task_modules_imported = False


def _import_task_modules() -> None:
    global _task_modules_imported
    with _task_modules_lock:
        if not _task_modules_imported:
            # Fires Celery's autodiscovery of every installed app's tasks module.
            current_app.loader.import_default_modules()
            _task_modules_imported = True


def task(name: str):
    """The registered Celery task called `name` (NotRegistered if there is none)."""
    if not _task_modules_imported:
        _import_task_modules()
    return current_app.tasks[name]


def send(name: str, args: tuple = (), **options) -> AsyncResult:
    """Queue the task called `name` with `args`; options as apply_async's (kwargs=, countdown=, ...)."""
    return task(name).apply_async(args, **options)
