"""Registry pages (HTMX). Thin: parse with forms, change through services, read through selectors."""
from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from capabilities import policy, selectors, try_it, usage
from capabilities.forms import CapabilityForm, McpServerForm, TryForm, import_choices
from capabilities.kinds.mcp import servers
from capabilities.kinds.table import KINDS
from capabilities.models import Capability, Kind, McpServer
from core import jsonlimits
from core.errors import NotAllowed, ServiceError
from core.permissions import allowed, forbidden, permission_needed

FILTER_KINDS = [(k.value, k.label) for k in Kind]


def _capability_or_404(name: str) -> Capability:
    try:
        return selectors.capability_get(name=name)
    except Capability.DoesNotExist:
        raise Http404(f"No capability named {name}") from None


@require_GET
@permission_needed("capabilities.view_capability", "view capabilities")
def capability_list(request):
    filters = {"search": request.GET.get("q", ""), "kind": request.GET.get("kind", ""),
               "side_effect": request.GET.get("side_effect", ""), "enabled": request.GET.get("enabled", "")}
    capabilities = list(selectors.capability_list(**filters))
    figures = usage.capability_usage(names=[c.name for c in capabilities])
    rows = [{"capability": c, "version": c.current_version, "usage": figures.get(c.name, usage.Usage()),
             "flags": selectors.capability_flags(c.current_version)} for c in capabilities]
    context = {"rows": rows, "filters": filters, "kinds": FILTER_KINDS, "side_effects": policy.SIDE_EFFECTS}
    template = "capabilities/list.html#results" if request.htmx else "capabilities/list.html"
    return render(request, template, context)


def _detail_context(request, capability: Capability, *, try_form=None, observation=None, try_error=None) -> dict:
    version = capability.current_version
    return {
        "capability": capability,
        "version": version,
        "flags": selectors.capability_flags(version),
        "versions": selectors.capability_versions(capability=capability),
        "usage": usage.capability_usage(names=[capability.name]).get(capability.name, usage.Usage()),
        "attempts": usage.capability_recent_attempts(name=capability.name),
        "audit_events": selectors.capability_audit_trail(capability=capability),
        "try_form": try_form or TryForm(),
        "observation": observation,
        "try_error": try_error,
        "first_call_note": KINDS[capability.kind].first_call_note,
        "changes_state": version is not None and version.side_effect in policy.CHANGES_STATE,
        "can_change": allowed(request.user, "capabilities.change_capability"),
    }


@require_GET
@permission_needed("capabilities.view_capability", "view capabilities")
def capability_detail(request, name):
    capability = _capability_or_404(name)
    return render(request, "capabilities/detail.html", _detail_context(request, capability))


@require_POST
@permission_needed("capabilities.change_capability", "enable or disable capabilities")
def capability_set_enabled(request, name):
    capability = _capability_or_404(name)
    enabled = request.POST.get("enabled") == "true"
    try:
        policy.capability_set_enabled(user=request.user, capability_id=capability.pk, enabled=enabled)
    except NotAllowed as exc:
        return forbidden(request, exc.message)
    messages.success(request, f"{capability.name} is now {'enabled' if enabled else 'disabled'}.")
    return redirect("capabilities:detail", name=capability.name)


@require_POST
@permission_needed("capabilities.view_capability", "try capabilities")
def capability_try(request, name):
    capability = _capability_or_404(name)
    form = TryForm(request.POST)
    observation = error = None
    if form.is_valid():
        try:
            observation = try_it.capability_try(user=request.user, capability_id=capability.pk,
                                                  arguments=form.cleaned_data["arguments"],
                                                  confirm=form.cleaned_data["confirm"])
        except ServiceError as exc:
            error = exc
            for message in exc.fields.get("arguments", []):
                form.add_error("arguments", message)
    context = _detail_context(request, capability, try_form=form, observation=observation, try_error=error)
    status = error.status if error is not None else (400 if form.errors else 200)
    template = "capabilities/detail.html#try_panel" if request.htmx else "capabilities/detail.html"
    # htmx swaps only 2xx answers by default; the panel is the answer either way.
    return render(request, template, context, status=200 if request.htmx else status)


@require_http_methods(["GET", "POST"])
@permission_needed("capabilities.add_capability", "register capabilities")
def capability_create(request):
    form = CapabilityForm(request.POST or None)

    def register(data) -> tuple[str, str]:
        capability = policy.capability_create(
            user=request.user, name=data["name"].strip(), kind=data["kind"], policy=form.policy(),
            config=form.config(data["kind"]), mcp_server=data.get("mcp_server"),
            change_note=data.get("change_note") or "")
        return f"Registered {capability.name} (version 1).", _detail_url(capability)

    return _saved(request, form, register) or _capability_form_page(request, form, capability=None)


@require_http_methods(["GET", "POST"])
@permission_needed("capabilities.change_capability", "edit capabilities")
def capability_edit(request, name):
    capability = _capability_or_404(name)
    form = CapabilityForm(request.POST or None, capability=capability)

    def save(data) -> tuple[str, str]:
        version = policy.capability_update(
            user=request.user, capability_id=capability.pk, policy=form.policy(),
            config=form.config(capability.kind), change_note=data.get("change_note") or "",
            expected_version=data.get("expected_version"))
        return f"Saved {capability.name} as version {version.number}.", _detail_url(capability)

    return _saved(request, form, save) or _capability_form_page(request, form, capability=capability)


def _saved(request, form, save: Callable[[dict], tuple[str, str]]) -> HttpResponse | None:
    """On a valid POST, save(cleaned data) and go where it says, with its message; None when the
    form is to be shown (again). A refusal goes beside the fields it names, else above them."""
    if request.method != "POST" or not form.is_valid():
        return None
    try:
        message, url = save(form.cleaned_data)
    except ServiceError as exc:
        form.add_service_errors(exc.fields)
        if not exc.fields:
            form.add_error(None, exc.message)
        return None
    messages.success(request, message)
    return redirect(url)


def _detail_url(capability: Capability) -> str:
    return reverse("capabilities:detail", kwargs={"name": capability.name})


def _capability_form_page(request, form, *, capability: Capability | None) -> HttpResponse:
    schema_errors = list(form.errors.get("schema", [])) if form.is_bound else []
    return render(request, "capabilities/form.html", {"form": form, "capability": capability,
                                                      "schema_errors": schema_errors},
                  status=400 if form.errors else 200)


@require_POST
def validate_schema(request):
    """Live check of the schema textarea: answers the errors partial (empty when valid)."""
    if not (allowed(request.user, "capabilities.add_capability")
            or allowed(request.user, "capabilities.change_capability")):
        return forbidden(request, "You do not have permission to register or edit capabilities.")
    text = request.POST.get("schema", "")
    if not text.strip():
        errors = []  # blank means the default object schema
    else:

        try:
            errors = policy.schema_problems(jsonlimits.loads(text))
        except jsonlimits.JSONLimitError as exc:
            errors = [str(exc)]
    return render(request, "capabilities/form.html#schema_errors", {"schema_errors": errors, "checked": True})


# -- MCP ------------------------------------------------------------------------------------------

@require_http_methods(["GET", "POST"])
@permission_needed("capabilities.add_mcpserver", "add MCP servers")
def mcp_server_create(request):
    form = McpServerForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            server = servers.mcp_server_create(user=request.user, **form.service_kwargs())
        except ServiceError as exc:
            form.add_service_errors(exc.fields)
            if not exc.fields:
                form.add_error(None, exc.message)
        else:
            messages.success(request, f"Added MCP server {server.name}. Choose the tools to import.")
            # "Add server and list its tools": this POST asked for the listing, so it lists at once.
            return _import_page(request, server, listing=True)
    return render(request, "capabilities/mcp_server_form.html",
                  {"form": form, "servers": selectors.mcp_server_list()}, status=400 if form.errors else 200)


@require_http_methods(["GET", "POST"])
@permission_needed("capabilities.add_mcpserver", "import MCP tools")
def mcp_import(request, server_id):
    """GET shows the server; listing its tools contacts (for stdio: starts) it, so only a POST does."""
    return _import_page(request, get_object_or_404(McpServer, pk=server_id), listing=request.method == "POST")


def _import_page(request, server: McpServer, *, listing: bool) -> HttpResponse:
    context = {"server": server, "tools": [], "error": None, "side_effects": policy.SIDE_EFFECTS, "listed": listing}
    if not listing:
        return render(request, "capabilities/mcp_import.html", context)
    try:
        tools = servers.mcp_server_tools(user=request.user, server_id=server.pk)
    except NotAllowed as exc:
        return forbidden(request, exc.message)
    except ServiceError as exc:
        context["error"] = exc.message
        return render(request, "capabilities/mcp_import.html", context, status=exc.status)
    context["tools"] = tools
    if request.POST.get("action") == "import":
        chosen = import_choices(request.POST, tools)
        try:
            created = servers.mcp_tools_import(user=request.user, server_id=server.pk, tools=chosen,
                                                available=tools)
        except NotAllowed as exc:
            return forbidden(request, exc.message)
        except ServiceError as exc:
            context["error"] = exc.message
            _apply_posted(tools, request.POST, chosen, exc.fields)
            return render(request, "capabilities/mcp_import.html", context, status=exc.status)
        messages.success(request, f"Imported {len(created)} tools from {server.name}: "
                                  + ", ".join(c.name for c in created) + ".")
        return redirect("capabilities:list")
    return render(request, "capabilities/mcp_import.html", context)


def _apply_posted(tools, post, chosen, field_errors) -> None:
    """Keep what the admin entered when the import is refused, with each tool's errors beside it."""
    by_tool: dict[str, list[str]] = {}
    for key, messages_ in field_errors.items():
        parts = key.split(".", 2)
        if len(parts) >= 2 and parts[0] == "tools" and parts[1].isdigit() and int(parts[1]) < len(chosen):
            field = parts[2] if len(parts) == 3 else ""
            by_tool.setdefault(chosen[int(parts[1])]["name"], []).extend(
                f"{field}: {m}" if field else m for m in messages_)
    for i, tool in enumerate(tools):
        tool["errors"] = by_tool.get(tool["name"], [])
        tool["checked"] = bool(post.get(f"tool__{i}"))
        tool["capability_name"] = post.get(f"capability_name__{i}") or tool["capability_name"]
        tool["side_effect"] = post.get(f"side_effect__{i}") or tool["side_effect"]
        tool["requires_approval"] = bool(post.get(f"requires_approval__{i}"))
        tool["idempotent"] = bool(post.get(f"idempotent__{i}"))
        tool["permission"] = post.get(f"permission__{i}", "")
