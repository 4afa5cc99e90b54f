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
    "run__project" for a run's records. A class attribute, as Django builds related managers by
    subclassing the default manager's class.

    Through a relation the rows are selected with `run_id IN (SELECT id FROM run WHERE project_id
    = ...)`, never a join: an UPDATE of the model then stays one statement on its own table, so a
    conditional UPDATE (`state = 'pending'`) is still checked against the row it changes, under
    concurrent writers; a join makes Django rewrite it as `id IN (subquery)`, whose condition is
    read from a snapshot (two decisions of one approval would both win). And a SELECT ... FOR UPDATE
    locks the model's rows only, not the run's."""

    path = "project"

    def get_queryset(self):
        queryset = super().get_queryset()
        project_id = _active.get()
        if project_id is None:
            return queryset
        relation, _, rest = self.path.partition("__")
        if not rest:
            return queryset.filter(**{self.path: project_id})
        related = self.model._meta.get_field(relation).related_model
        assert isinstance(related, type), f"{self.path}: {relation} is not a relation"
        return queryset.filter(**{f"{relation}__in": related._base_manager.filter(**{rest: project_id}).values("pk")})

    def bulk_create(self, objs, *args, **kwargs):
        """As pre_save does for save(): new rows of a model that holds its project get the one in scope
        (bulk_create sends no signals)."""
        objs = list(objs)
        if self.path == "project":
            for obj in objs:
                in_active_project(obj)
        return super().bulk_create(objs, *args, **kwargs)


def project_of(instance) -> int | None:
    """The id of the project a row belongs to, through its scoped manager's path (a run's records
    through their run); None for a row of no project."""
    path = getattr(type(instance)._default_manager, "path", None)
    if path is None:
        return getattr(instance, "project_id", None)
    *relations, last = path.split("__")
    for relation in relations:
        instance = getattr(instance, relation, None)
        if instance is None:
            return None
    return getattr(instance, f"{last}_id", None)


def in_active_project(instance) -> None:
    """Give a new row the project in scope (pre_save): code that creates rows need not pass it."""
    if getattr(instance, "project_id", None) is None:
        project_id = _active.get()
        if project_id is not None:
            instance.project_id = project_id
