"""What a test deciding an approval directly must send: the hash the request binds to (approval_decide)."""
from __future__ import annotations


def bound_hash(approval_id) -> str:
    from runs.models import Approval

    approval = Approval.objects.get(pk=getattr(approval_id, "pk", approval_id))
    return approval.arguments_hash or approval.plan_hash
