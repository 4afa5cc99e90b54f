"""The audit log's API: GET /api/audit/ (keyset pages) and GET /api/audit/export/ (every matching row,
streamed as CSV or JSON). Both read through core.audit_log, as the page does, and need the
permission to view the audit log (core.roles.VIEW_AUDIT_LOG)."""
from __future__ import annotations

from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from core import audit_log
from core.api import ApiView
from core.downloads import as_download
from core.errors import InvalidInput
from core.pagination import InvalidCursor
from core.permissions import require_perm
from core.roles import VIEW_AUDIT_LOG


class AuditEventOutput(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField(allow_null=True, help_text="The username; null for the system (or a deleted user).")
    action = serializers.ChoiceField(choices=audit_log.AuditAction.choices)
    target_type = serializers.CharField(help_text="The kind of object changed.")
    target_id = serializers.CharField()
    summary = serializers.CharField()
    details = serializers.JSONField(help_text="What changed; credentials are never stored here, and are masked.")
    object_url = serializers.CharField(allow_null=True, help_text="The object's page, where it has one.")


class AuditPageOutput(serializers.Serializer):
    count = serializers.IntegerField(allow_null=True, help_text="Exact up to 10,000 rows; above, an estimate "
                                                                "(PostgreSQL) or null.")
    count_exact = serializers.BooleanField()
    next = serializers.CharField(allow_null=True, help_text="The next (older) page's URL.")
    previous = serializers.CharField(allow_null=True, help_text="The previous (newer) page's URL.")
    results = AuditEventOutput(many=True)


class AuditLogApi(ApiView):
    """The audit log, newest first, filtered; paged by cursor (follow `next` and `previous`)."""

    permission_classes = [require_perm(VIEW_AUDIT_LOG)]
    query_input = audit_log.AuditQuery

    @extend_schema(operation_id="audit_list", parameters=[audit_log.AuditQuery], responses=AuditPageOutput)
    def get(self, request):
        try:
            page = audit_log.audit_page(filters=audit_log.filters_from(self.query),
                                        per_page=self.query.get("page_size", audit_log.PER_PAGE),
                                        after=self.query.get("after"), before=self.query.get("before"))
        except InvalidCursor as exc:
            raise InvalidInput(str(exc), fields={"before" if self.query.get("before") else "after": "invalid cursor"}) \
                from None

        def link(**cursor) -> str:
            params = request.query_params.copy()
            for name in ("after", "before", "page"):
                params.pop(name, None)
            params.update(cursor)
            return request.build_absolute_uri(request.path + "?" + params.urlencode())

        return Response({
            "count": page.count, "count_exact": page.count_exact,
            "next": link(after=page.next_cursor) if page.has_next else None,
            "previous": link(before=page.previous_cursor) if page.has_previous else None,
            "results": AuditEventOutput([row.as_dict() for row in page.object_list], many=True).data,
        })


class AuditExportQuery(audit_log.AuditFilterQuery):
    format = serializers.ChoiceField(choices=["csv", "json"], required=False, default="csv",
                                     help_text="csv (the default) or json (one array).")


class AuditExportApi(ApiView):
    """Every row the filters match, streamed as a file: CSV (details as JSON in one cell) or a JSON array."""

    permission_classes = [require_perm(VIEW_AUDIT_LOG)]
    query_input = AuditExportQuery

    def perform_content_negotiation(self, request, force=False):
        # `format` names the file to export, not a renderer: an error is answered as JSON whatever it says.
        renderer = JSONRenderer()
        return renderer, renderer.media_type

    @extend_schema(operation_id="audit_export", parameters=[AuditExportQuery], responses={
        (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="A header line, then a line per row."),
        (200, "application/json"): AuditEventOutput(many=True)})
    def get(self, request):
        filters = audit_log.filters_from(self.query)
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        if self.query["format"] == "json":
            response = StreamingHttpResponse(audit_log.json_chunks(filters), content_type="application/json")
        else:
            response = StreamingHttpResponse(audit_log.csv_chunks(filters), content_type="text/csv; charset=utf-8")
        return as_download(response, f"audit-log-{stamp}.{self.query['format']}")
