"""Agent tokens: the same design as API tokens (core/tokens.py): a random key shown once,
its SHA-256 stored, an expiry, revocation. The MCP gateway resolves a bearer key here."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from core.tokens import hash_key
from gateway.models import AgentToken

KEY_PREFIX = "aog_"


def new_key() -> tuple[str, str, str]:
    """(key, its hash, the prefix shown in lists)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key), key[:12]


def default_expiry(days: int | None):
    return timezone.now() + timedelta(days=days or settings.AGENTOPS_GATEWAY_TOKEN_DEFAULT_DAYS)


@dataclass(frozen=True)
class Bearer:
    """Who an accepted key speaks for."""

    token_id: int
    agent_id: int
    agent_name: str
    owner_id: int
    project_id: int   # the agent's: every call of the session acts there


class TokenRefused(Exception):
    """The key is unknown, revoked, expired, or its agent (or owner) is disabled; the message says which."""


def bearer_for(key: str) -> Bearer:
    token = AgentToken.objects.select_related("agent", "agent__owner").filter(key_hash=hash_key(key)).first()
    now = timezone.now()
    if token is None:
        raise TokenRefused("Invalid agent token.")
    if token.revoked_at is not None:
        raise TokenRefused("This agent token was revoked.")
    if token.expires_at <= now:
        raise TokenRefused("This agent token has expired; issue a new one.")
    if not token.agent.enabled:
        raise TokenRefused(f"Agent {token.agent.name!r} is disabled.")
    if not token.agent.owner.is_active:
        raise TokenRefused(f"Agent {token.agent.name!r} acts with the roles of {token.agent.owner.get_username()!r}, "
                           "whose account is deactivated: an operator must give the agent an active owner.")
    # At most one write a minute per token, not one per request.
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        AgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return Bearer(token.pk, token.agent_id, token.agent.name, token.agent.owner_id, token.agent.project_id)
