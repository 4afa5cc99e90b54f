"""The one permission mechanism: Django permissions, asked through `allowed()`.

Services call `require()` and raise NotAllowed (the API's exception handler answers 403
JSON); pages are guarded by `permission_needed`, which answers a 403 page (or, to htmx,
a fragment) saying what is missing; API views name their permission per method.
"""
from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.shortcuts import render
from rest_framework.permissions import BasePermission

from core.errors import NotAllowed


def allowed(user, *perms: str) -> bool:
    """An active, signed-in user holding every permission named (none named: signed in suffices)."""
    return bool(user is not None and user.is_authenticated and user.is_active and user.has_perms(perms))


def require(user, perm: str, action: str) -> None:
    """For services: refuse with a message that says what the user may not do."""
    if not allowed(user, perm):
        raise NotAllowed(f"You do not have permission to {action}.")


def forbidden(request, message: str, status: int = 403):
    """A refusal as a page, or to htmx the fragment that replaces the target."""
    template = "forbidden.html#message" if request.htmx else "forbidden.html"
    return render(request, template, {"message": message}, status=status)


def bad_request(request, message: str):
    """A request the page cannot answer (a bad parameter in a link): a 400 that says so, not "Not allowed"."""
    template = "forbidden.html#message" if request.htmx else "forbidden.html"
    return render(request, template, {"message": message, "title": "Bad request"}, status=400)


def permission_needed(perm: str, action: str):
    """Guard a page: sign-in first, then a 403 saying what is missing."""

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not allowed(request.user, perm):
                return forbidden(request, f"You do not have permission to {action}.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


class MethodPermission(BasePermission):
    """For API views: the permission named in the view's `required_perms` for the request's method
    (GET's for a method not named)."""

    def has_permission(self, request, view) -> bool:
        perms = view.required_perms
        return allowed(request.user, perms.get(request.method, perms.get("GET")))


def require_perm(*perms: str) -> type[BasePermission]:
    """A permission class for an API view that needs the same permissions for every method."""

    class HasPerms(BasePermission):
        message = f"You need the permission{'s' if len(perms) > 1 else ''}: {', '.join(perms)}."

        def has_permission(self, request, view):
            return allowed(request.user, *perms)

    HasPerms.__name__ = "Has_" + "_".join(p.replace(".", "_") for p in perms)
    return HasPerms
