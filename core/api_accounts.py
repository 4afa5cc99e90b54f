"""The API of API tokens: a user lists, creates and revokes their own; scripts log in for one.

POST /api/auth/token/ takes a username and password, so it goes through Django's
authenticate() with the request: django-axes counts its failures and locks it out
exactly like the login page.
"""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response

from core import tokens
from core.accounts import lockout_message
from core.api import PAGE_PARAMETERS, ApiView, page_response, paginated, validated


class TokenOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's first characters, to recognise it.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    revoked_reason = serializers.CharField(allow_blank=True)
    project = serializers.CharField(source="project.slug", help_text="The project the token acts in (its slug).")


class NewTokenOutput(TokenOutput):
    key = serializers.CharField(help_text="The token itself; shown only in this answer. "
                                          "Send it as 'Authorization: Token <key>'.")


class TokenCreateInput(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    expires_in_days = serializers.IntegerField(min_value=1, required=False,
                                               help_text="1 to AGENTOPS_API_TOKEN_MAX_DAYS (default 365); "
                                                         "default AGENTOPS_API_TOKEN_DEFAULT_DAYS (90).")
    project = serializers.SlugField(max_length=50, required=False,
                                    help_text="The slug of the project the token acts in, one you hold a role in "
                                              "(default: the one you act in, else the first you hold). A token "
                                              "makes tokens for its own project only.")

    def validate_expires_in_days(self, value):
        if value > settings.AGENTOPS_API_TOKEN_MAX_DAYS:
            raise serializers.ValidationError(f"At most {settings.AGENTOPS_API_TOKEN_MAX_DAYS} days.")
        return value


def new_token_body(token, key: str, output=TokenOutput) -> dict:
    """A token just issued: its fields, and the key, shown only in this answer."""
    return {**output(token).data, "key": key}


class TokenListCreateApi(ApiView):
    permission_classes = [IsAuthenticated]

    @extend_schema(operation_id="tokens_list", parameters=PAGE_PARAMETERS, responses=paginated(TokenOutput))
    def get(self, request):
        return page_response(self, request, tokens.tokens_of(request.user), TokenOutput)

    @extend_schema(request=TokenCreateInput, responses={201: NewTokenOutput})
    def post(self, request):
        token, key = tokens.token_create(user=request.user, minted_by=tokens.minting_token(request),
                                         **validated(TokenCreateInput, request.data))
        return Response(new_token_body(token, key), status=201)


class TokenRevokeApi(ApiView):
    permission_classes = [IsAuthenticated]

    @extend_schema(request=None, responses=TokenOutput)
    def post(self, request, token_id: int):
        return Response(TokenOutput(tokens.token_revoke(user=request.user, token_id=token_id)).data)


class TokenLoginApi(ApiView):
    """Exchange a username and password for a new token (throttled like the login page)."""

    authentication_classes = []
    permission_classes = [AllowAny]

    class TokenLoginInput(TokenCreateInput):
        username = serializers.CharField(max_length=150)
        password = serializers.CharField(max_length=4096, style={"input_type": "password"})
        name = serializers.CharField(max_length=100, required=False, default="API login")

    @extend_schema(request=TokenLoginInput, responses={201: NewTokenOutput}, auth=[])
    def post(self, request):
        if not settings.AGENTOPS_LOCAL_PASSWORDS:
            # Single sign-on only (docs/sso.md): a person signs in at the provider and makes tokens on
            # the tokens page; the tokens themselves keep working.
            raise exceptions.PermissionDenied("Local passwords are turned off here: sign in through single sign-on "
                                              "and create a token on /account/tokens/.")
        values = dict(validated(self.TokenLoginInput, request.data))
        # The Django request, not DRF's wrapper: axes flags a lock-out on it for its middleware.
        user = authenticate(request._request, username=values.pop("username"), password=values.pop("password"))
        if getattr(request._request, "axes_locked_out", False):

            raise Throttled(lockout_message())
        if user is None or not user.is_active:
            raise exceptions.AuthenticationFailed("The username and password did not match.")
        token, key = tokens.token_create(user=user, **values)
        return Response(new_token_body(token, key), status=201)


class Throttled(exceptions.APIException):
    status_code = 429
    default_code = "locked_out"
