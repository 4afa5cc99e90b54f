"""DRF permission classes built from Django permissions."""
from rest_framework.permissions import BasePermission


def require_perm(*perms: str) -> type[BasePermission]:
    """A permission class granting access to authenticated users holding every perm."""

    class HasPerms(BasePermission):
        message = f"You need the permission{'s' if len(perms) > 1 else ''}: {', '.join(perms)}."

        def has_permission(self, request, view):
            user = request.user
            return bool(user and user.is_authenticated and user.has_perms(perms))

    HasPerms.__name__ = "Has_" + "_".join(p.replace(".", "_") for p in perms)
    return HasPerms
