"""The audit log page (/audit/): the rows core.audit_log reads, filtered by the same query as the API."""
from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from core import audit_log
from core.models import AuditAction
from core.pagination import InvalidCursor
from core.permissions import bad_request, permission_needed
from core.replica import reads_from_replica
from core.roles import VIEW_AUDIT_LOG

FILTER_FIELDS = ("actor", "action", "target_type", "target_id", "since", "until")


@reads_from_replica
@permission_needed(VIEW_AUDIT_LOG, "view the audit log")
@require_GET
def audit_log_page(request):
    # Unlike the API, the page ignores parameters it does not know (an old bookmark still opens).
    query = audit_log.AuditQuery(data={k: v for k, v in request.GET.items() if k in audit_log.AuditQuery().fields})
    errors = {} if query.is_valid() else {name: " ".join(str(m) for m in messages)
                                          for name, messages in query.errors.items()}
    page, filters = None, audit_log.AuditFilters()
    if not errors:
        data = query.validated_data
        filters = audit_log.filters_from(data)
        try:
            page = audit_log.audit_page(filters=filters, per_page=data.get("page_size", audit_log.PER_PAGE),
                                        after=data.get("after"), before=data.get("before"))
        except InvalidCursor as exc:
            return bad_request(request, str(exc))
    values = {name: request.GET.get(name, "") for name in FILTER_FIELDS}
    export = request.GET.copy()
    for name in ("after", "before", "page", "page_size"):
        export.pop(name, None)
    context = {"page": page, "errors": errors, "values": values, "filtered": filters.any,
               "actions": AuditAction.choices, "export_query": export.urlencode()}
    template = "audit/log.html#audit_results" if request.htmx else "audit/log.html"
    return render(request, template, context, status=400 if errors else 200)
