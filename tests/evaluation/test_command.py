"""manage.py evaluate: sync the bundled suites, run one synchronously, print the verdicts."""
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evaluation.models import Evaluation, EvaluationSuite

pytestmark = pytest.mark.django_db


def evaluate(*args):
    out = StringIO()
    call_command("evaluate", *args, stdout=out)
    return out.getvalue()


class TestEvaluateCommand:
    def test_it_prints_a_row_per_task_and_the_aggregate(self, operator):
        output = evaluate("--label", "cli", "--user", operator.username)
        assert "lookup-policy-by-id" in output and "direct_as_good" in output and "planning_earned" in output
        assert "direct    success" in output and "planning  success" in output
        evaluation = Evaluation.objects.get()
        assert evaluation.status == "completed" and evaluation.label == "cli" and evaluation.started_by == operator
        assert f"Verdicts as the suite expects: {evaluation.tasks_total} of {evaluation.tasks_total}" in output

    def test_it_syncs_idempotently_and_prints_json(self, roles):
        data = json.loads(evaluate("--json"))
        evaluate("--json")
        assert EvaluationSuite.objects.filter(name="standard").count() == 1
        assert Evaluation.objects.count() == 2
        assert data["status"] == "completed" and len(data["results"]) == 2 * data["progress"]["tasks_total"]
        # Nobody to own the runs: an inactive account that cannot log in does.
        owner = Evaluation.objects.first().started_by
        assert owner.username == "agentops-evaluation" and not owner.is_active and not owner.has_usable_password()

    def test_an_unknown_suite_is_an_error(self, operator):
        with pytest.raises(CommandError, match="no suite 'nope'"):
            evaluate("--suite", "nope")
