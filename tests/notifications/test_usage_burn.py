"""Usage burn rules: tokens or cost over a rolling window per owner or label, once per crossing."""
from __future__ import annotations

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from notifications import burn, rules, services
from notifications.models import BurnState, Delivery
from runs import services as run_services
from runs.dashboard import usage
from runs.models import Run, RunLabel


def _finished(make_run, *, tokens=0, cost=0.0, labels=None, **fields):
    """A run finished now, counted in the usage rollup as run_finish counts it; then its finish signal."""
    owner = fields.pop("owner", None)
    run = make_run(status="running", tokens=tokens, cost=cost, **fields)
    if owner is not None:
        Run.objects.filter(pk=run.pk).update(owner=owner)
    if labels:
        Run.objects.filter(pk=run.pk).update(labels=labels)
        RunLabel.objects.bulk_create([RunLabel(run=run, key=k, value=v) for k, v in labels.items()])
    Run.objects.filter(pk=run.pk).update(status="completed", stop_reason="completed", finished_at=timezone.now())
    usage.record_run_finished(run_id=run.pk)
    burn.on_run_finished(Run, run_id=run.pk)
    return run


@pytest.mark.django_db
class TestRule:
    @pytest.fixture
    def channel(self, operator, webhook):
        return services.channel_save(user=operator, name="hook", url=webhook.url)

    def test_it_fires_once_per_crossing_and_rearms_below_the_limit(self, make_run, operator, channel, monkeypatch):
        monkeypatch.setattr(burn.send_due, "delay", lambda: None)
        rule = services.rule_save(user=operator, name="otto's burn", event="usage_burn", channel_ids=[channel.pk],
                                  params={"measure": "tokens", "limit": 1000, "window_hours": 24, "per": "owner"})
        _finished(make_run, tokens=600)
        assert not Delivery.objects.exists()
        _finished(make_run, tokens=600)   # 1200 > 1000: the crossing
        _finished(make_run, tokens=600)   # still over: nothing new
        delivery = Delivery.objects.get()
        assert delivery.rule == rule
        assert "owner otto used 1,200 tokens in 24 h (limit 1,000 tokens)" in delivery.subject
        assert "/usage/?window=24h&group=owner" in delivery.body
        # Back within the limit (the rollup recounted lower, as after a purge): re-armed, then over again.
        usage.UsageRollup.objects.update(tokens=0)
        _finished(make_run, tokens=10)
        assert not BurnState.objects.get(rule=rule).over
        _finished(make_run, tokens=5000)
        assert Delivery.objects.count() == 2

    def test_a_label_rule_sums_each_value_apart(self, make_run, operator, channel, monkeypatch):
        monkeypatch.setattr(burn.send_due, "delay", lambda: None)
        services.rule_save(user=operator, name="team cost", event="usage_burn", channel_ids=[channel.pk],
                           params={"measure": "cost", "limit": 1.0, "window_hours": 2, "per": "label",
                                   "label_key": "team"})
        _finished(make_run, cost=0.7, labels={"team": "payments"})
        _finished(make_run, cost=0.7, labels={"team": "search"})
        _finished(make_run, cost=5.0)   # no team label: not this rule's
        assert not Delivery.objects.exists()
        _finished(make_run, cost=0.4, labels={"team": "payments"})
        delivery = Delivery.objects.get()
        assert "label team=payments used 1.1 in cost in 2 h (limit 1)" in delivery.subject
        assert "group=label&label_key=team" in delivery.link

    def test_evaluation_runs_and_other_owners_do_not_count(self, make_run, operator, second_operator, channel,
                                                           monkeypatch):
        from evaluation.models import Evaluation, EvaluationSuite

        monkeypatch.setattr(burn.send_due, "delay", lambda: None)
        services.rule_save(user=operator, name="burn", event="usage_burn", channel_ids=[channel.pk],
                           params={"measure": "tokens", "limit": 100, "per": "owner"})
        evaluation = Evaluation.objects.create(suite=EvaluationSuite.objects.create(name="s", tasks=[]),
                                               started_by=operator)
        _finished(make_run, tokens=500, evaluation=evaluation)
        _finished(make_run, tokens=60, owner=second_operator)
        _finished(make_run, tokens=60)   # otto's 60: olga's and the evaluation's are not his
        assert not Delivery.objects.exists()

    def test_the_tick_leaves_burn_rules_to_finishing_runs(self, operator, channel):
        rule = services.rule_save(user=operator, name="burn", event="usage_burn", channel_ids=[channel.pk],
                                  params={"limit": 1})
        assert rules.find_events(rule, timezone.now()) == []

    @pytest.mark.parametrize("params, field", [
        ({"measure": "joules"}, "params.measure"), ({"limit": 0}, "params.limit"), ({"limit": "10"}, "params.limit"),
        ({"window_hours": 0}, "params.window_hours"), ({"window_hours": 721}, "params.window_hours"),
        ({"window_hours": 2.5}, "params.window_hours"), ({"per": "team"}, "params.per"),
        ({"per": "label"}, "params.label_key"), ({"per": "label", "label_key": "Bad Key"}, "params.label_key"),
        ({"label_key": "team"}, "params.label_key"), ({"threshold": 3}, "params.threshold")])
    def test_bad_settings_are_refused_by_field(self, operator, channel, params, field):
        with pytest.raises(InvalidInput) as refused:
            services.rule_save(user=operator, name="burn", event="usage_burn", channel_ids=[channel.pk], params=params)
        assert field in refused.value.fields

    def test_a_label_filter_is_refused(self, operator, channel):
        with pytest.raises(InvalidInput) as refused:
            services.rule_save(user=operator, name="burn", event="usage_burn", channel_ids=[channel.pk],
                               labels={"team": "payments"})
        assert "labels" in refused.value.fields

    def test_the_rules_page_creates_one(self, client_for, operator, channel):
        fields = {"name": "cost per team", "event": "usage_burn", "channels": [channel.pk], "measure": "cost",
                  "limit": "25", "window_hours": "24", "per": "label", "label_key": "team"}
        response = client_for(operator).post("/notifications/", {
            "form": "rule", **{f"rule-{k}": v for k, v in fields.items()}})
        assert response.status_code in (200, 302), response.content.decode()[:2000]
        rule = services.Rule.objects.get(name="cost per team")
        assert rule.params == {"measure": "cost", "limit": 25.0, "window_hours": 24, "per": "label",
                               "label_key": "team"}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_burn_fires_once_through_the_real_worker_and_reaches_the_inbox(celery_worker, operator, inbox, wait_until):
    """Runs finished by a real worker: the crossing run's finish writes one delivery and has it sent."""
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    mail = services.channel_save(user=operator, name="ops mail", url=inbox.url)
    services.rule_save(user=operator, name="otto burns tokens", event="usage_burn", channel_ids=[mail.pk],
                       params={"measure": "tokens", "limit": 1000, "window_hours": 2, "per": "owner"})

    def run_spending(tokens):
        run = run_services.run_start(
            owner=operator, goal="Find the travel policy", planner="scripted",
            planner_config={"plans": [{"steps": [{"capability": "search_documents", "arguments": {"q": "travel"}}],
                                       "tokens": tokens}]},
            completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
            budgets={"deadline_s": 120})
        wait_until(lambda: Run.objects.get(pk=run.pk).status == "completed", message=f"run {run.pk} to complete")
        return run

    run_spending(600)
    assert not Delivery.objects.exists()
    crossing = run_spending(600)
    wait_until(lambda: inbox.messages, timeout=60, message="the email")
    for _ in range(2):
        run_spending(600)   # still over: no second notice
    delivery = Delivery.objects.get()
    assert delivery.status == "sent" and delivery.channel == mail
    assert Run.objects.get(pk=crossing.pk).tokens == 600
    assert len(inbox.messages) == 1 and "Usage burn: owner otto used 1,200 tokens in 2 h" in inbox.messages[0]["content"]
