"""The sign-in page (local passwords and the provider's button), the provider's redirect and callback, sign-out."""
from __future__ import annotations

import logging
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import SuspiciousOperation
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_POST
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from identity import provider as op
from identity.backend import SignInRefused

log = logging.getLogger(__name__)
# Set in the session by a sign-in through the provider: sign-out then ends the provider's session too.
SSO_SESSION_KEY = "agentops_sso"


def sign_in_context() -> dict:
    return {"sso_enabled": settings.AGENTOPS_OIDC_ENABLED, "sso_name": settings.AGENTOPS_OIDC_PROVIDER_NAME,
            "passwords_off": not settings.AGENTOPS_LOCAL_PASSWORDS}


def sign_in_refused(request, reason: str, status: int = 403):
    log.warning("single sign-on refused: %s", reason)
    return render(request, "registration/login.html", {**sign_in_context(), "sso_error": reason}, status=status)


class SignInForm(AuthenticationForm):
    """Django's form, refusing a username longer than any account's before authenticate(): django-axes records
    each failed sign-in, and PostgreSQL refuses such a username in its column (255 characters): a 500."""

    def clean_username(self):
        username = self.cleaned_data["username"]
        if len(username) > (self.username_field.max_length or 254):   # Django's own bound for the field
            raise self.get_invalid_login_error()
        return username


class LoginView(auth_views.LoginView):
    """The login form when local passwords are on; the provider's button when single sign-on is configured."""

    authentication_form = SignInForm

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), **sign_in_context()}

    def post(self, request, *args, **kwargs):
        if not settings.AGENTOPS_LOCAL_PASSWORDS:
            return sign_in_refused(request, "Local passwords are turned off here: sign in with "
                                            f"{settings.AGENTOPS_OIDC_PROVIDER_NAME}.")
        return super().post(request, *args, **kwargs)


@method_decorator(login_not_required, name="dispatch")
class OidcStartView(OIDCAuthenticationRequestView):
    """Redirects to the provider's authorization endpoint with a fresh state, nonce and PKCE challenge."""

    def __init__(self, *args, **kwargs):
        # The endpoint is discovered on the request, not when the URL conf is loaded.
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.AGENTOPS_OIDC_CLIENT_ID

    def get(self, request):
        if not settings.AGENTOPS_OIDC_ENABLED:
            return sign_in_refused(request, "Single sign-on is not configured here.", status=404)
        try:
            self.OIDC_OP_AUTH_ENDPOINT = op.provider().authorization_endpoint
        except op.ProviderError as exc:
            return sign_in_refused(request, str(exc), status=502)
        return super().get(request)


@method_decorator(login_not_required, name="dispatch")
class OidcCallbackView(OIDCAuthenticationCallbackView):
    """The provider's redirect back: the state is used up, the code exchanged, the ID token checked."""

    def get(self, request):
        if not settings.AGENTOPS_OIDC_ENABLED:
            return sign_in_refused(request, "Single sign-on is not configured here.", status=404)
        error = request.GET.get("error")
        state = request.GET.get("state")
        if "code" in request.GET and state not in request.session.get("oidc_states", {}):
            # A state this browser's session never issued, or already used (mozilla-django-oidc
            # drops it on first use): a replayed or forged callback.
            return sign_in_refused(request, "This sign-in was not started here or was already used; start again.",
                                   status=400)
        try:
            response = super().get(request)
        except SignInRefused as exc:
            return sign_in_refused(request, str(exc))
        except SuspiciousOperation:
            return sign_in_refused(request, "This sign-in was not started here or was already used; start again.",
                                   status=400)
        if getattr(self, "user", None) is not None and request.user.is_authenticated:
            request.session[SSO_SESSION_KEY] = True
            return response
        if error:
            return sign_in_refused(request, f"{settings.AGENTOPS_OIDC_PROVIDER_NAME} refused the sign-in "
                                            f"({error[:60]}).")
        if getattr(self, "user", None) is not None and not self.user.is_active:
            return sign_in_refused(request, "This account is disabled in AgentOps; ask an administrator.")
        return sign_in_refused(request, "No AgentOps account is linked to this sign-in, and new accounts are "
                                        "not created here; ask an administrator.")


@require_POST
@login_not_required
def logout(request):
    """Signs out here, and at the provider when the session came from it and it has an end-session endpoint."""
    target = reverse(settings.LOGOUT_REDIRECT_URL)
    id_token = request.session.get("oidc_id_token")
    if settings.AGENTOPS_OIDC_ENABLED and request.session.get(SSO_SESSION_KEY):
        try:
            end_session = op.provider().end_session_endpoint
        except op.ProviderError:
            end_session = ""
        if end_session:
            # RP-Initiated Logout 1.0: the provider ends its session and sends the browser back here.
            params = {"client_id": settings.AGENTOPS_OIDC_CLIENT_ID,
                      "post_logout_redirect_uri": request.build_absolute_uri(target)}
            if id_token:
                params["id_token_hint"] = id_token
            target = end_session + ("&" if "?" in end_session else "?") + urlencode(params)
    auth.logout(request)
    return HttpResponseRedirect(target)
