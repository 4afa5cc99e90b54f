"""The sign-in backend: mozilla-django-oidc's code flow, with its calls and its checks made ours.

mozilla-django-oidc keeps the state, nonce and PKCE verifier in the session and drops each on
first use (a replayed callback finds nothing). What it leaves out is done here: every call to
the provider goes through the egress guard (identity.provider), not `requests`; the ID token's
issuer, audience, expiry and issue time are checked, not only its signature and nonce; and users
are found by (issuer, sub), never by e-mail address."""
from __future__ import annotations

import json
import logging
from typing import Any

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from core.backends import NoGlobalRoles
from identity import provider as op
from identity.services import sso_sign_in
from runtime.storable import storable_value

SUBJECT_MAX = 255   # OpenID Connect Core 1.0, 2: sub "MUST NOT exceed 255 ASCII characters"

log = logging.getLogger(__name__)


class SignInRefused(Exception):
    """A sign-in the provider's answer does not support; the message is safe to show.

    Not a SuspiciousOperation: mozilla-django-oidc swallows those in get_or_create_user, and the
    sign-in page should say why."""


class OidcBackend(NoGlobalRoles, OIDCAuthenticationBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django builds every backend for every authenticate() (a password login too): nothing
        # here reaches the provider; its endpoints are read when a callback is handled.
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.AGENTOPS_OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.AGENTOPS_OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request, **kwargs):
        # Only the callback view passes a nonce: a password login (or a /login/?code=...) never
        # sends a code to the provider.
        if not settings.AGENTOPS_OIDC_ENABLED or request is None or "nonce" not in kwargs:
            return None
        try:
            self.provider = op.provider()
        except op.ProviderError as exc:
            raise SignInRefused(str(exc)) from None
        self.OIDC_OP_TOKEN_ENDPOINT = self.provider.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = self.provider.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = self.provider.jwks_uri
        return super().authenticate(request, **kwargs)

    def get_token(self, payload):
        # client_secret_basic: the method every provider must support (OpenID Connect Core §9).
        payload = {k: v for k, v in payload.items() if k not in ("client_id", "client_secret")}
        try:
            answer = op.post_json(self.provider.token_endpoint, self.provider.hosts(), data=payload,
                                  auth=(self.OIDC_RP_CLIENT_ID, self.OIDC_RP_CLIENT_SECRET))
        except op.ProviderError as exc:
            raise SignInRefused(f"The provider did not exchange the code: {exc}") from None
        if not isinstance(answer.get("id_token"), str):
            raise SignInRefused("The provider's token answer has no ID token.")
        return answer

    def retrieve_matching_jwk(self, token):
        try:
            header = jwt.get_unverified_header(token)
            jwks = op.get_json(self.provider.jwks_uri, self.provider.hosts())
        except jwt.PyJWTError:
            raise SignInRefused("The ID token is not a JWT.") from None
        except op.ProviderError as exc:
            raise SignInRefused(f"The provider's keys could not be read: {exc}") from None
        keys = [k for k in jwks.get("keys", []) if isinstance(k, dict) and k.get("kid") == header.get("kid")
                and k.get("alg", header.get("alg")) == header.get("alg") and k.get("use", "sig") == "sig"]
        if len(keys) != 1:
            raise SignInRefused("No key of the provider matches the ID token's signature.")
        return jwt.PyJWK(keys[0])

    def verify_token(self, token, **kwargs):
        """The signature with the provider's key, then every claim the sign-in rests on."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise SignInRefused("The ID token is not a JWT.") from None
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SignInRefused(f"The ID token is signed with {header.get('alg')!r}, not {self.OIDC_RP_SIGN_ALGO}.")
        key = self.retrieve_matching_jwk(token)
        try:
            payload = jwt.decode(token, key, algorithms=[self.OIDC_RP_SIGN_ALGO], audience=self.OIDC_RP_CLIENT_ID,
                                 issuer=self.provider.issuer, leeway=settings.AGENTOPS_OIDC_CLOCK_SKEW_S,
                                 options={"require": ["iss", "aud", "exp", "iat", "sub"]})
        except jwt.ExpiredSignatureError:
            raise SignInRefused("The ID token has expired.") from None
        except jwt.InvalidAudienceError:
            raise SignInRefused("The ID token was issued for another client (audience).") from None
        except jwt.InvalidIssuerError:
            raise SignInRefused("The ID token was issued by another issuer.") from None
        except jwt.ImmatureSignatureError:
            raise SignInRefused("The ID token is issued in the future.") from None
        except jwt.PyJWTError as exc:
            raise SignInRefused(f"The ID token is not valid ({type(exc).__name__}).") from None
        audiences = payload["aud"] if isinstance(payload["aud"], list) else [payload["aud"]]
        # Core §3.1.3.7: with several audiences, the token must be authorized for us (azp).
        if len(audiences) > 1 and payload.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SignInRefused("The ID token was issued for another client (azp).")
        if kwargs.get("nonce") is None or payload.get("nonce") != kwargs["nonce"]:
            raise SignInRefused("The ID token's nonce is not this sign-in's (a replay?).")
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        claims = dict(payload)
        if self.provider.userinfo_endpoint and access_token:
            try:
                info = op.get_json(self.provider.userinfo_endpoint, self.provider.hosts(),
                                   headers={"Authorization": f"Bearer {access_token}"})
            except op.ProviderError as exc:
                raise SignInRefused(f"The provider's user info could not be read: {exc}") from None
            # Core §5.3.2: the user info must be about the ID token's subject.
            if str(info.get("sub")) != str(payload["sub"]):
                raise SignInRefused("The provider's user info is about another subject.")
            claims.update(info)
        return claims

    def get_user(self, user_id):
        # The session's user, on every request: a user deactivated here is signed out at once, as
        # ModelBackend does for password sessions (mozilla-django-oidc's get_user does not check).
        user = super().get_user(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None

    def verify_claims(self, claims):
        return bool(claims.get("sub"))

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        if not self.verify_claims(claims):
            raise SignInRefused("The provider sent no subject.")
        if len(str(claims["sub"])) > SUBJECT_MAX:
            raise SignInRefused(f"The provider's subject identifier is longer than OpenID Connect allows "
                                f"({SUBJECT_MAX} characters); ask its administrator.")
        # What the provider sent, as the database can keep it: each NUL character and lone surrogate as U+FFFD.
        claims = storable_value(claims, json.dumps(claims))
        user = sso_sign_in(issuer=self.provider.issuer, claims=claims)
        if user is None:
            log.info("sign-in refused: no user linked to this provider account and AGENTOPS_OIDC_CREATE_USERS is off")
        return user
