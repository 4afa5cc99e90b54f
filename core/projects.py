"""Projects: which one a request, a task or a worker's pass acts in, and the querysets scoped to it.

Every object of the product belongs to one project. Code that serves a person (a page, an API call,
the gateway) runs inside `project_scope(project)`; inside it the default manager of every scoped
model returns only that project's rows, and permissions are the roles the user holds there
(core.backends). Outside any scope (the worker between runs, sweeps, migrations, management
commands) managers return every row: those paths act on rows they already selected by key, and the
worker enters the run's project before it advances it.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from django.db import models

# The id of the project in scope; None outside any scope.
_active: ContextVar[int | None] = ContextVar("agentops_project", default=None)

DEFAULT_SLUG = "default"
DEMO_SLUG = "demo"


def active_project_id() -> int | None:
    return _active.get()


@contextmanager
def project_scope(project):
    """Act in `project` (a Project or its id) until the block ends."""
    token = _active.set(project if project is None or isinstance(project, int) else project.pk)
    try:
        yield
    finally:
        _active.reset(token)


def enter_project(project) -> None:
    """Act in `project` for the rest of this context (a request: the middleware resets it after)."""
    _active.set(project if project is None or isinstance(project, int) else project.pk)


class ProjectScopedManager(models.Manager):
    """The default manager of a model that belongs to a project: in a project's scope, only its rows.

    `path` is the lookup from the model to its project id: "project" for a model that holds it,
    "run__project" for a run's records (one join, on the run's primary key): a class attribute,
    as Django builds related managers by subclassing the default manager's class."""

    path = "project"

    @classmethod
    def via(cls, path: str) -> ProjectScopedManager:
        """The manager of a model whose project is reached through `path`."""
        return type(f"ProjectScopedManager_{path}", (cls,), {"path": path, "__module__": cls.__module__})()

    def get_queryset(self):
        queryset = super().get_queryset()
        project_id = _active.get()
        return queryset if project_id is None else queryset.filter(**{self.path: project_id})


def in_active_project(instance) -> None:
    """Give a new row the project in scope (pre_save): code that creates rows need not pass it."""
    if getattr(instance, "project_id", None) is None:
        project_id = _active.get()
        if project_id is not None:
            instance.project_id = project_id
