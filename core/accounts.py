"""Account pages: API tokens, password change, and the lock-out answer of login throttling."""
from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from core import tokens
from core.errors import ServiceError


def lockout_message() -> str:
    minutes = round(settings.AXES_COOLOFF_TIME * 60)
    return (f"Too many failed logins for this username from your address. Login is locked for {minutes} "
            "minutes; try again later or ask an administrator to unlock it.")


def lockout_response(request, original_response=None, credentials=None):
    """django-axes calls this when a login is refused because of earlier failures."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": {"code": "locked_out", "message": lockout_message()}}, status=429)
    return render(request, "registration/login.html", {"locked_out": True, "lockout_message": lockout_message()},
                  status=429)


class TokenCreateForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. “CI pipeline” or “planner agent”.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Built here: the limits are settings, read per request rather than at import.
        self.fields["expires_in_days"] = forms.IntegerField(
            label="Expires after (days)", min_value=1, max_value=settings.AGENTOPS_API_TOKEN_MAX_DAYS,
            initial=settings.AGENTOPS_API_TOKEN_DEFAULT_DAYS)


@require_http_methods(["GET", "POST"])
def token_list(request):
    """The user's own tokens; creating one shows its key on this page, once."""
    form = TokenCreateForm(request.POST or None)
    new_key = None
    status = 200
    if request.method == "POST" and form.is_valid():
        try:
            _, new_key = tokens.token_create(user=request.user, **form.cleaned_data)
            form = TokenCreateForm()
        except ServiceError as exc:
            for field, message in exc.fields.items():
                form.add_error(field if field in form.fields else None, message)
    elif request.method == "POST":
        status = 400
    return render(request, "account/tokens.html",
                  {"form": form, "new_key": new_key, "tokens": tokens.tokens_of(request.user), "now": timezone.now()},
                  status=status)


@require_POST
def token_revoke(request, token_id: int):
    try:
        token = tokens.token_revoke(user=request.user, token_id=token_id)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("account-tokens")
    messages.success(request, f"Token “{token.name}” ({token.prefix}…) is revoked.")
    return redirect("account-tokens")


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "registration/password_change.html"
    success_url = reverse_lazy("account-tokens")

    def dispatch(self, request, *args, **kwargs):
        if not settings.AGENTOPS_LOCAL_PASSWORDS:
            messages.error(request, "Local passwords are turned off here: your password is the single sign-on's.")
            return redirect("account-tokens")
        return super().dispatch(request, *args, **kwargs)

    def form_valid(self, form):
        response = super().form_valid(form)  # saving the password revokes the tokens (core.tokens)
        messages.success(self.request, "Your password is changed; your API tokens were revoked.")
        return response
