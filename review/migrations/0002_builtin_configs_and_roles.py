"""The runtime's built-in score configs, a starting list of root-cause categories, and the reviewer role."""
from django.db import migrations

from core.roles import sync_role_groups

BUDGETS = ["iterations", "revisions", "tool_calls", "capability_calls", "deadline", "tokens", "cost", "retries",
           "side_effect_rate"]  # runtime.budgets.BudgetName at the time of this migration

BUILTIN = [
    ("completion_verified", "boolean", "The run stopped `completed`: its completion criteria were verified.", {}),
    ("stalled", "boolean", "The run stopped `stalled` (repeated without progress, or the planner had nothing left).",
     {}),
    ("budget_stop", "categorical", "Which budget stopped the run (`none`: no budget did).",
     {"categories": ["none", *BUDGETS]}),
    ("side_effects_committed", "numeric", "How many side effects the run committed.", {"min_value": 0}),
    ("cost", "numeric", "What the run's planning cost (the run's cost counter).", {"min_value": 0}),
]

ROOT_CAUSES = [
    ("planner", "The planner proposed the wrong steps or arguments."),
    ("capability", "A capability misbehaved or returned something wrong."),
    ("external service", "A service outside the product failed or was slow."),
    ("configuration", "A capability's policy, a budget or a permission was set wrongly."),
    ("bad input", "The goal or the completion criteria were wrong."),
]


def seed(apps, schema_editor):
    ScoreConfig = apps.get_model("review", "ScoreConfig")
    RootCauseCategory = apps.get_model("review", "RootCauseCategory")
    for name, kind, description, extra in BUILTIN:
        ScoreConfig.objects.get_or_create(name=name, defaults={"kind": kind, "description": description,
                                                               "builtin": True, **extra})
    for name, description in ROOT_CAUSES:
        RootCauseCategory.objects.get_or_create(name=name, defaults={"description": description})
    sync_role_groups(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("review", "0001_initial"), ("agentops", "0015_review_audit_actions")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
