"""The roles and what each may do. Data migrations create the groups."""

VIEWER = "viewer"
OPERATOR = "operator"
REGISTRY_ADMIN = "registry admin"
LEAD_OPERATOR = "lead operator"
# Operators cancel and resubmit only their own runs; this permission (the lead
# operator role) extends that to everyone's.
MANAGE_ALL_RUNS = "runs.manage_all_runs"
# Registering and starting stdio MCP servers runs programs on the hosts: its own role, given on purpose.
STDIO_MCP_ADMIN = "stdio mcp admin"
# The audit log (/audit/, /api/audit/) shows every user's changes: role grants, tokens, approvals,
# cancels. Viewers read the product's objects, not the people who work on them, so it is not in
# _VIEW. Two roles hold it: the lead operator, who acts on everyone's runs and during an incident
# needs "who cancelled, approved or changed what"; and the auditor, a reader who must see the log
# without being able to change anything (a compliance or security reviewer). Whoever grants roles
# can grant themselves the auditor role, and that grant is itself in the log.
VIEW_AUDIT_LOG = "agentops.view_audit_log"
AUDITOR = "auditor"
# Reviewers judge runs (scores, comments, incident summaries) without starting, cancelling or
# approving anything. Operators review too; score configs and the root-cause list are the registry
# admin's, who already decides what the product knows about (capabilities, agents).
REVIEWER = "reviewer"
REVIEW_RUNS = "review.review_runs"
MANAGE_REVIEW_SETTINGS = "review.manage_review_settings"
# Adding runs to an evaluation suite (with the expected outcome) or removing tasks writes a new suite
# version. It is a judgement of runs, not an action on them: reviewers hold it as well as operators,
# who start the evaluations. Starting one stays evaluation.run_evaluation (not the reviewer's).
EDIT_SUITES = "evaluation.change_evaluationsuite"
# Review queues hand a batch of runs to reviewers: the lead operator (who assigns work during an
# incident) and the registry admin (who owns the score configs) set them up.
MANAGE_QUEUES = "review.manage_queues"

_VIEW = [
    "runs.view_run", "runs.view_planrevision", "runs.view_step", "runs.view_attempt", "runs.view_decision",
    "runs.view_approval", "runs.view_plansubmission", "evaluation.view_evaluationsuite", "evaluation.view_evaluation",
    "evaluation.view_evaluationresult", "capabilities.view_capability", "capabilities.view_capabilityversion",
    "capabilities.view_mcpserver", "capabilities.view_storedoutput", "capabilities.view_ticket",
    "capabilities.view_outboxmessage", "agentops.view_auditevent", "agentops.view_workerheartbeat",
    "notifications.view_rule", "notifications.view_channel", "notifications.view_delivery",
    "gateway.view_agent", "gateway.view_gatewaysession",
    "review.view_scoreconfig", "review.view_score", "review.view_annotation", "review.view_rootcausecategory",
    "review.view_incidentsummary", "review.view_reviewqueue", "review.view_queueitem", "review.view_queuereview",
]

ROLE_PERMISSIONS = {
    VIEWER: _VIEW,
    OPERATOR: _VIEW + [
        # cancel_run covers the operator's own runs; others' need MANAGE_ALL_RUNS.
        "runs.start_run", "runs.cancel_run", "runs.decide_approval", "evaluation.run_evaluation",
        "runs.reconcile_run",
        # What the demo capabilities require of a run's owner.
        "capabilities.create_ticket", "capabilities.send_notification",
        "notifications.manage_notifications", REVIEW_RUNS, EDIT_SUITES,
    ],
    LEAD_OPERATOR: [],  # filled below: an operator who may act on every run
    REGISTRY_ADMIN: _VIEW + [
        "capabilities.add_capability", "capabilities.change_capability", "capabilities.add_mcpserver",
        "capabilities.change_mcpserver", "gateway.manage_agents", MANAGE_REVIEW_SETTINGS, MANAGE_QUEUES,
    ],
    STDIO_MCP_ADMIN: _VIEW + ["capabilities.run_stdio_mcpserver"],
    AUDITOR: _VIEW + [VIEW_AUDIT_LOG],
    REVIEWER: _VIEW + [REVIEW_RUNS, EDIT_SUITES],
}

ROLE_PERMISSIONS[LEAD_OPERATOR] = ROLE_PERMISSIONS[OPERATOR] + [MANAGE_ALL_RUNS, VIEW_AUDIT_LOG, MANAGE_QUEUES]


def role_entry(entry: str) -> tuple[str, str]:
    """A role held somewhere, as configuration writes it: "operator" (in the default project) or
    "payments:operator" (in the project whose slug is payments). Returns (project slug, role)."""
    slug, _, role = entry.rpartition(":")
    return slug or "default", role


def sync_role_groups(apps, schema_editor=None):
    """Create or update the role groups (usable from migrations: takes `apps`)."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        # create_permissions skips an app without a models module, which a migration's app
        # stubs never have. Put back what was there: on the live registry (the test suite's
        # conftest passes it), None would make every later post_migrate skip the app.
        models_module, app_config.models_module = getattr(app_config, "models_module", None), True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = models_module
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, names in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        perms = []
        for name in names:
            app_label, codename = name.split(".")
            # A permission added by a later migration does not exist yet in an earlier
            # one; that later migration syncs again.
            perm = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
            if perm is not None:
                perms.append(perm)
        group.permissions.set(perms)
