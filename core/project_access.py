"""Which projects a user holds, and which one a request acts in.

A person picks their project with the header's switcher (kept in the session); an API token acts
in its own project; the gateway's agent token in its agent's. A signed-in user who holds no
project acts in none: every scoped query is empty and every permission refused (NO_PROJECT).
"""
from __future__ import annotations

from contextlib import contextmanager

from django.contrib.auth.models import Group
from django.core.management.base import CommandError

from core.models import Project, ProjectMembership
from core.projects import DEFAULT_SLUG, DEMO_SLUG, enter_project, project_scope
from runtime.storable import text_unstorable

SESSION_KEY = "agentops_project"
# No project has this id: a user who holds none acts in it, and sees and may do nothing.
NO_PROJECT = 0


def projects_of(user):
    """The projects `user` holds a role in (a superuser: every project), by name."""
    if not (user and user.is_authenticated and user.is_active):
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()


def holds(user, project_id: int) -> bool:
    return projects_of(user).filter(pk=project_id).exists()


def roles_in(user, project_id: int) -> list[str]:
    return sorted(ProjectMembership.objects.filter(user=user, project_id=project_id)
                  .values_list("role__name", flat=True))


def default_project() -> Project:
    project, _ = Project.objects.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})
    return project


def demo_project() -> Project:
    """The project the demo data (seed_demo) lives in."""
    project, _ = Project.objects.get_or_create(slug=DEMO_SLUG, defaults={
        "name": "Demo", "description": "The demo's users, capabilities, runs and evaluations."})
    return project


def add_project_argument(parser) -> None:
    """--project for a management command that makes or reads a project's rows."""
    parser.add_argument("--project", default=DEFAULT_SLUG, metavar="SLUG",
                        help="the slug of the project it acts in (default: %(default)s)")


@contextmanager
def command_project(slug: str):
    """A management command acts in the project named by --project, as a request acts in its own."""
    # A lone surrogate (undecodable bytes on the command line) is no slug, and no database takes it.
    project = None if text_unstorable(slug) else Project.objects.filter(slug=slug).first()
    if project is None:
        names = ", ".join(Project.objects.values_list("slug", flat=True))
        raise CommandError(f"No project {slug!r} (there are: {names or 'none'}).")
    with project_scope(project):
        yield project


def grant_role(user, role: str, project: Project | None = None) -> ProjectMembership:
    """Give `user` the role in `project` (the default project when none is named): for set-up code,
    the demo and tests. People grant roles on the roles page (core.role_grants), which audits it."""
    membership, _ = ProjectMembership.objects.get_or_create(
        project=project or default_project(), user=user, role=Group.objects.get(name=role))
    return membership


def held_projects(user) -> list[dict]:
    """The projects `user` holds, by name, each with the roles held there: {"pk", "name", "slug",
    "roles"}. One query (two for a superuser, who holds every project: those they hold a role in
    first, so that is where they act until they switch)."""
    rows = (ProjectMembership.objects.filter(user=user).order_by("project__name", "project_id")
            .values_list("project_id", "project__name", "project__slug", "role__name"))
    held: dict[int, dict] = {}
    for pk, name, slug, role in rows:
        held.setdefault(pk, {"pk": pk, "name": name, "slug": slug, "roles": []})["roles"].append(role)
    if user.is_superuser:
        every = {pk: {"pk": pk, "name": name, "slug": slug, "roles": []}
                 for pk, name, slug in Project.objects.values_list("pk", "name", "slug")}
        held = {**every, **held}
        return sorted(held.values(), key=lambda p: (not p["roles"], p["name"], p["pk"]))
    return list(held.values())


def request_project_id(request, user) -> int | None:
    """The project a signed-in person's request acts in: the session's pick while they hold it, else
    the first project they hold; NO_PROJECT when they hold none. None for anonymous requests (the
    pages refuse them; public endpoints, such as a signed Slack action, scope themselves).
    What the user holds is kept on the request for the header's switcher."""
    if not user.is_authenticated:
        return None
    request.agentops_projects = held = held_projects(user)
    session = getattr(request, "session", None)
    chosen = session.get(SESSION_KEY) if session is not None else None
    if any(p["pk"] == chosen for p in held):
        return chosen
    return held[0]["pk"] if held else NO_PROJECT


def choose_project(request, project_id: int) -> bool:
    """The switcher: act in `project_id` from the next request on, if the user holds it."""
    if not holds(request.user, project_id):
        return False
    request.session[SESSION_KEY] = project_id
    return True


class ProjectMiddleware:
    """Scope the request to its project (after authentication); token authentication, which DRF
    runs inside the view, re-scopes to the token's project (core.tokens)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with project_scope(None):
            scope_request(request, request.user)
            return self.get_response(request)


def scope_request(request, user) -> None:
    """Act in the user's project for the rest of the request (the middleware's scope ends with it)."""
    project_id = request_project_id(request, user)
    if project_id is not None:
        enter_project(project_id)
    request.agentops_project_id = project_id
