"""Creating projects: a superuser's act (an instance-wide change), audited in the new project."""
from __future__ import annotations

import re

from django.db import IntegrityError, transaction

from core.audit import audit
from core.errors import Conflict, InvalidInput, NotAllowed
from core.models import AuditAction, Project
from runtime.storable import UNSTORABLE, text_unstorable

SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,49}$")


def project_create(*, actor, slug: str, name: str, description: str = "") -> Project:
    if not (actor and actor.is_authenticated and actor.is_superuser):
        raise NotAllowed("Only a superuser creates projects.")
    slug, name = (slug or "").strip(), (name or "").strip()
    errors = {}
    if not SLUG.match(slug):
        errors["slug"] = "A slug is 1 to 50 lowercase letters, digits and hyphens, starting with a letter or digit."
    if not name or len(name) > 100:
        errors["name"] = "Give the project a name of 1 to 100 characters."
    elif text_unstorable(name):
        errors["name"] = f"The project's name: {UNSTORABLE}."
    if errors:
        raise InvalidInput("The project could not be created: " + "; ".join(errors.values()), fields=errors)
    try:
        with transaction.atomic():
            project = Project.objects.create(slug=slug, name=name, description=description[:300])
            audit(actor=actor, action=AuditAction.PROJECT_CREATED, target=project, summary=f"Project {name} created",
                  details={"slug": slug}, project_id=project.pk)
    except IntegrityError:
        raise Conflict(f"A project with the slug {slug!r} exists already.") from None
    return project
