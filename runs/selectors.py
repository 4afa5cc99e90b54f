"""Reads for pages and the API. Writes live in runs.services."""
from runs.models import Approval


def pending_approval_count() -> int:
    return Approval.objects.filter(state="pending").count()
