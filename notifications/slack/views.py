"""Slack's requests to us (interactions, the /agentops command) and the profile page's Slack section.

Slack's requests carry no session or CSRF token: their signature is the authentication, checked
on the raw body before anything in it is read.
"""
from __future__ import annotations

import logging
from urllib.parse import parse_qs

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from core import jsonlimits
from notifications.models import SlackLink
from notifications.slack import interactions, linking, signing

log = logging.getLogger(__name__)


def _verified_form(request) -> dict[str, str] | HttpResponse:
    body = request.body
    try:
        signing.verify(body=body, timestamp=request.headers.get("X-Slack-Request-Timestamp"),
                       signature=request.headers.get("X-Slack-Signature"))
    except signing.Refused as exc:
        log.warning("Slack request refused: %s", exc)
        return HttpResponse(f"Refused: {exc}.", status=401, content_type="text/plain")
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


@login_not_required
@csrf_exempt
@require_POST
def slack_interactions(request):
    form = _verified_form(request)
    if isinstance(form, HttpResponse):
        return form
    try:
        payload = jsonlimits.loads(form.get("payload", ""))
    except jsonlimits.JSONLimitError as exc:
        return HttpResponse(f"The payload is refused: {exc}", status=400, content_type="text/plain")
    except ValueError:
        return HttpResponse("The payload is not JSON.", status=400, content_type="text/plain")
    if not isinstance(payload, dict):
        return HttpResponse("The payload is not an object.", status=400, content_type="text/plain")
    interactions.handle(payload)
    return HttpResponse(status=200)  # Slack only needs the acknowledgement


@login_not_required
@csrf_exempt
@require_POST
def slack_commands(request):
    form = _verified_form(request)
    if isinstance(form, HttpResponse):
        return form
    text = linking.command(team_id=form.get("team_id", ""), slack_user_id=form.get("user_id", ""),
                           text=form.get("text", ""))
    return JsonResponse({"response_type": "ephemeral", "text": text})


@require_http_methods(["GET", "POST"])
def account_slack(request):
    """The profile page's Slack section: the linked account, a one-time link code, unlinking."""
    code = None
    if request.method == "POST":
        if request.POST.get("action") == "unlink":
            linking.unlink(user=request.user)
            messages.success(request, "Your Slack account is unlinked: clicks in Slack no longer decide as you.")
            return redirect("account-slack")
        code = linking.link_code_issue(user=request.user)
    link = SlackLink.objects.filter(user=request.user).first()
    return render(request, "account/slack.html", {"link": link, "code": code,
                                                  "code_minutes": int(linking.CODE_TTL.total_seconds() // 60)})
