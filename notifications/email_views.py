"""The page an e-mailed decision link opens: the request, and a confirmation behind the sign-in.

GET never decides (mail scanners and link previews open links); the POST from this page does,
as the signed-in user, who must be the one the link was sent to.
"""
from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from core.permissions import allowed
from core.projects import project_scope
from notifications import email_links
from runs import selectors
from runs.models import Approval
from runs.selectors import approval_project_id


@require_http_methods(["GET", "POST"])
def email_decide(request, token: str):
    try:
        opened = email_links.open_link(token)
    except ServiceError as exc:
        return render(request, "notifications/decide.html", {"refusal": exc.message}, status=exc.status)
    # The link decides in the request's project (whichever the person is looking at), with the roles
    # they hold there; a project they hold none in refuses, as for any request there.
    with project_scope(approval_project_id(opened.approval_id)):
        return _decide_page(request, token, opened)


def _decide_page(request, token: str, opened):
    try:
        approval = selectors.approval_card(approval_id=opened.approval_id, user=request.user)
    except Approval.DoesNotExist:
        return render(request, "notifications/decide.html", {"refusal": "This request no longer exists."}, status=404)
    context = {"approval": approval, "token": token, "chosen": request.GET.get("decision", ""),
               "refusal": email_links.refusal(opened, user=request.user)}
    if not context["refusal"] and not allowed(request.user, "runs.decide_approval"):
        context["refusal"] = "You may not approve or reject requests (it needs the operator role)."
    if not context["refusal"] and approval.state != "pending":
        context["refusal"] = f"This request is {approval.state} already."
    if not context["refusal"]:
        context["refusal"] = approval.four_eyes_refusal
    if request.method == "GET" or context["refusal"]:
        return render(request, "notifications/decide.html", context, status=403 if context["refusal"] else 200)
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        context["error"] = "Choose Approve or Reject."
        return render(request, "notifications/decide.html", context, status=400)
    try:
        decided = email_links.decide(token=token, user=request.user, approve=decision == "approve",
                                     comment=request.POST.get("comment", ""))
    except ServiceError as exc:
        context["error"] = exc.message
        return render(request, "notifications/decide.html", context, status=exc.status)
    return render(request, "notifications/decide.html", {"approval": decided, "done": True})
