"""Notification pages: rules and channels (to edit: notifications.manage_notifications), deliveries."""
from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import ServiceError
from core.permissions import allowed, forbidden, permission_needed
from notifications import channels, services
from notifications.errors import shown_error
from notifications.forms import ChannelForm, RuleForm
from notifications.models import Channel, Delivery, Rule
from notifications.rules import full_params

MANAGE = services.PERMISSION


@permission_needed("notifications.view_rule", "view notification rules")
@require_http_methods(["GET", "POST"])
def rule_list(request):
    can_manage = allowed(request.user, MANAGE)
    rule_form = RuleForm(request.POST if request.POST.get("form") == "rule" else None, prefix="rule")
    channel_form = ChannelForm(request.POST if request.POST.get("form") == "channel" else None, prefix="channel")
    status = 200
    if request.method == "POST":
        if not can_manage:
            return forbidden(request, "You do not have permission to manage notifications.")
        saved = _save(request, rule_form, channel_form)
        if saved:
            return redirect("notifications:rules")
        status = 400
    rules = list(Rule.objects.prefetch_related("channels").order_by("name", "id"))
    for rule in rules:
        rule.shown_params = [f"{k}={', '.join(map(str, v)) or 'any' if isinstance(v, list) else v}"
                             for k, v in full_params(rule).items()]
    channel_rows = [(c, channels.masked(c.url)) for c in Channel.objects.order_by("name")]
    return render(request, "notifications/rules.html", {
        "rules": rules, "channel_rows": channel_rows, "rule_form": rule_form, "channel_form": channel_form,
        "can_manage": can_manage, "settings_interval": settings.AGENTOPS_NOTIFY_INTERVAL_S}, status=status)


def _save(request, rule_form, channel_form) -> bool:
    form = rule_form if request.POST.get("form") == "rule" else channel_form
    if not form.is_valid():
        return False
    try:
        if form is rule_form:
            rule = services.rule_save(user=request.user, **rule_form.rule_arguments())
            messages.success(request, f"Saved the rule “{rule.name}”.")
        else:
            channel = services.channel_save(user=request.user, **channel_form.cleaned_data)
            messages.success(request, f"Saved the channel “{channel.name}”.")
    except ServiceError as exc:
        if form is rule_form:
            rule_form.add_service_errors(exc.fields)
        else:
            for key, message in exc.fields.items():
                channel_form.add_error(key if key in channel_form.fields else None, message)
        return False
    return True


@permission_needed(MANAGE, "manage notifications")
@require_POST
def rule_toggle(request, rule_id: int):
    rule = Rule.objects.prefetch_related("channels").filter(pk=rule_id).first()
    if rule is None:
        messages.error(request, f"Rule {rule_id} does not exist.")
        return redirect("notifications:rules")
    try:   # re-saved, so checked again: its only channel may have been deleted since
        services.rule_save(user=request.user, name=rule.name, event=rule.event, params=rule.params,
                           labels=rule.labels, channel_ids=[c.pk for c in rule.channels.all()],
                           enabled=not rule.enabled, rule_id=rule.pk)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("notifications:rules")
    messages.success(request, f"{'Paused' if rule.enabled else 'Enabled'} the rule “{rule.name}”.")
    return redirect("notifications:rules")


@permission_needed(MANAGE, "manage notifications")
@require_http_methods(["GET", "POST"])
def rule_delete(request, rule_id: int):
    if request.method == "GET":
        return _confirm_delete(request, Rule, rule_id, "rule")
    return _deleted(request, lambda: services.rule_delete(user=request.user, rule_id=rule_id), "rule")


@permission_needed(MANAGE, "manage notifications")
@require_http_methods(["GET", "POST"])
def channel_delete(request, channel_id: int):
    if request.method == "GET":
        return _confirm_delete(request, Channel, channel_id, "channel")
    return _deleted(request, lambda: services.channel_delete(user=request.user, channel_id=channel_id), "channel")


def _confirm_delete(request, model, pk: int, what: str):
    """A page that asks first (the CSP blocks inline onsubmit handlers; this needs no script at all)."""
    row = model.objects.filter(pk=pk).first()
    if row is None:
        messages.error(request, f"The {what} {pk} does not exist.")
        return redirect("notifications:rules")
    used_by = list(row.rules.values_list("name", flat=True)) if what == "channel" else []
    return render(request, "notifications/confirm_delete.html", {"row": row, "what": what, "used_by": used_by})


def _deleted(request, delete: Callable[[], None], what: str):
    """Back to the rules page, saying whether delete() deleted the rule or channel (or why not)."""
    try:
        delete()
        messages.success(request, f"Deleted the {what}.")
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("notifications:rules")


@permission_needed("notifications.view_delivery", "view notification deliveries")
@require_GET
def delivery_list(request):
    deliveries = Delivery.objects.order_by("-created_at", "-id")
    status = request.GET.get("status", "")
    if status in Delivery.Status.values:
        deliveries = deliveries.filter(status=status)
    page = Paginator(deliveries, 50).get_page(request.GET.get("page") or "1")
    for delivery in page.object_list:
        delivery.shown_error = shown_error(delivery.last_error, request.user)
    return render(request, "notifications/deliveries.html", {"page": page, "status": status,
                                                             "statuses": Delivery.Status.values})
