"""Navigation facts every page shows (the pending-approval badge)."""
from runs.selectors import pending_approval_count


def navigation(request):
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}

    return {"pending_approvals": pending_approval_count()}
