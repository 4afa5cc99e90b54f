"""API tokens: created, listed and revoked by their owner; only a hash is stored.

The API page (/account/tokens/) and the API (/api/tokens/) call these functions.
A client sends `Authorization: Token <key>` (or `Bearer <key>`).
"""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models.signals import pre_save
from django.dispatch import receiver
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from core.audit import audit
from core.errors import InvalidInput, NotAllowed, ServiceError
from core.models import ApiToken, AuditAction
from core.project_access import held_projects
from core.projects import active_project_id, enter_project

KEY_PREFIX = "ao_"
REVOKED_BY_OWNER = "revoked by owner"
REVOKED_PASSWORD_CHANGED = "password changed"


class TokenNotFound(ServiceError):
    # Someone else's token is "not found" too: its existence is none of the caller's business.
    status = 404
    code = "not_found"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@transaction.atomic
def token_create(*, user, name: str, expires_in_days: int | None = None,
                 minted_by: ApiToken | None = None, project: str | None = None) -> tuple[ApiToken, str]:
    """A new token for `user`, acting in one project: `project` (a slug the user holds a role in), else
    the project the request acts in, else the first the user holds; a token minted by a token acts
    in that token's project. Returns the row and the key, which is never shown again.

    minted_by: the token the request authenticated with; the new one never outlives it (a stolen
    1-day token must not become a 365-day one)."""
    name = (name or "").strip()
    days = settings.AGENTOPS_API_TOKEN_DEFAULT_DAYS if expires_in_days is None else expires_in_days
    errors = {}
    if not name or len(name) > 100:
        errors["name"] = "Give the token a name of 1 to 100 characters (what uses it)."
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= settings.AGENTOPS_API_TOKEN_MAX_DAYS:
        errors["expires_in_days"] = f"A token lives 1 to {settings.AGENTOPS_API_TOKEN_MAX_DAYS} days."
    project_id = _token_project(user, project, minted_by)
    if errors:
        raise InvalidInput("The token could not be created: " + "; ".join(errors.values()), fields=errors)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    expires_at = capped_expiry(timezone.now() + timedelta(days=days), minted_by)
    token = ApiToken.objects.create(user=user, project_id=project_id, name=name, key_hash=hash_key(key),
                                    prefix=key[:10], expires_at=expires_at)
    audit(actor=user, action=AuditAction.TOKEN_CREATED, target=token, summary=f"API token {name!r} created",
          details={"prefix": token.prefix, "expires_at": token.expires_at.isoformat()})
    return token, key


def _token_project(user, slug: str | None, minted_by: ApiToken | None) -> int:
    held = {p["slug"]: p["pk"] for p in held_projects(user)}
    if minted_by is not None:
        if slug and held.get(slug) != minted_by.project_id:
            raise NotAllowed("A token makes tokens for its own project only.")
        return minted_by.project_id
    if slug:
        if slug not in held:
            raise NotAllowed(f"You hold no role in a project {slug!r}.")
        return held[slug]
    acting = active_project_id()
    if acting is not None and acting in held.values():
        return acting
    if not held:
        raise NotAllowed("You hold a role in no project, and a token acts in one: ask for a role first.")
    return next(iter(held.values()))


def minting_token(request) -> ApiToken | None:
    """The API token a request authenticated with (None for a browser session): a token it mints,
    for its user or for an agent, never outlives it."""
    return request.auth if isinstance(request.auth, ApiToken) else None


def capped_expiry(expires_at, minted_by: ApiToken | None):
    return expires_at if minted_by is None else min(expires_at, minted_by.expires_at)


def tokens_of(user):
    """Every token of the user, whichever project each acts in (the page shows the project)."""
    return ApiToken.objects.filter(user=user).select_related("project").order_by("-created_at", "-id")


@transaction.atomic
def token_revoke(*, user, token_id: int) -> ApiToken:
    """Revoke one of the user's own tokens (revoking twice is harmless)."""
    token = ApiToken.objects.select_for_update().filter(pk=token_id).first()
    if token is None or token.user_id != user.pk:
        raise TokenNotFound("You have no such token.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.revoked_reason = REVOKED_BY_OWNER
        token.save(update_fields=["revoked_at", "revoked_reason"])
        audit(actor=user, action=AuditAction.TOKEN_REVOKED, target=token,
              summary=f"API token {token.name!r} revoked", details={"prefix": token.prefix})
    return token


def tokens_revoke_all(*, user, reason: str) -> int:
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_reason=reason)


@receiver(pre_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="core.tokens.revoke_on_password_change")
def _revoke_on_password_change(sender, instance, update_fields=None, raw=False, **kwargs):
    """Whatever changes a password (the page, the admin, changepassword) revokes the tokens."""
    if raw or instance.pk is None or (update_fields is not None and "password" not in update_fields):
        return
    old = sender.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
    if old is not None and old != instance.password:
        tokens_revoke_all(user=instance, reason=REVOKED_PASSWORD_CHANGED)


class ApiTokenAuthentication(BaseAuthentication):
    keywords = (b"token", b"bearer")

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in self.keywords:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: send 'Authorization: Token <key>'.")
        try:
            key = parts[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        token = ApiToken.objects.select_related("user").filter(key_hash=hash_key(key)).first()
        now = timezone.now()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed(f"This token was revoked ({token.revoked_reason}).")
        if token.expires_at <= now:
            raise exceptions.AuthenticationFailed("This token has expired; create a new one under Account → API tokens.")
        # At most one write a minute per token, not one per request.
        if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        # The token acts in its project, with its user's roles there, for the rest of the request
        # (the project middleware resets the scope when the response is made).
        enter_project(token.project_id)
        request._request.agentops_project_id = token.project_id
        return token.user, token

    def authenticate_header(self, request):
        return "Token"


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the token header."""

    target_class = ApiTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "Token-based authentication: 'Token <key>' (a key from /api/tokens/)."}
