"""Notification rules, the channels they send to, and the outbox of deliveries.

A rule says which event interests whom; the scheduler finds matching events and
writes one Delivery per (rule, channel, event) into the outbox (the unique key makes
finding the same event twice harmless), then drains the outbox, retrying a failing
channel with backoff. Runs never wait for any of it.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.choices import values_of
from core.projects import ProjectScopedManager


class Channel(models.Model):
    """Where notifications go: one Apprise URL (mailto://, json://, slack://, msteams://, ...)."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=80)
    url = models.CharField(max_length=2000, help_text="An Apprise URL; write secrets as ${AGENTOPS_NOTIFY_...} "
                                                      "and set them in the environment.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="channel_name_unique_per_project")]
        ordering = ["name"]

    def __str__(self):
        return self.name


class RuleEvent(models.TextChoices):
    APPROVAL_REQUESTED = "approval_requested", "an approval is requested"
    APPROVAL_EXPIRING = "approval_expiring", "an approval is about to expire"
    APPROVAL_UNDECIDED = "approval_undecided", "an approval is still undecided (escalation)"
    RUN_STOPPED = "run_stopped", "a run stopped"
    BUDGET_THRESHOLD = "budget_threshold", "an active run passed a share of a budget"
    STALL_RATE = "stall_rate", "the stall rate passed a threshold"
    USAGE_BURN = "usage_burn", "tokens or cost over a rolling window passed a limit (per owner or label)"
    FAILURE_GROUP_NEW = "failure_group_new", "a new kind of failure appeared (a new failure group)"
    MENTIONED = "mentioned", "someone was @mentioned in a comment on a run"


class Rule(models.Model):
    Event = RuleEvent

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=120)
    event = models.CharField(max_length=30, choices=Event.choices)
    # Per event: approval_expiring {within_s}; approval_undecided {after_minutes, capabilities};
    # run_stopped {stop_reasons}; budget_threshold {percent, budgets}; stall_rate {threshold,
    # window_s, min_runs}; usage_burn {measure, limit, window_hours, per, label_key} (notifications.rules).
    params = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True, help_text="Only runs with these labels (none: every run).")
    channels = models.ManyToManyField(Channel, related_name="rules")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["name", "id"]
        permissions = [("manage_notifications", "Can manage notification rules and channels")]
        constraints = [models.CheckConstraint(condition=Q(event__in=values_of(RuleEvent)),
                                              name="rule_event_valid")]

    def __str__(self):
        return self.name


class BurnState(models.Model):
    """Whether a usage burn rule's subject (an owner, or a label's value) is over its limit now.

    A rule fires when its subject goes over (the conditional UPDATE from False to True that one
    process wins), not for every run finished while it stays over; it re-arms when a later run's
    finish finds the subject back within its limit (notifications.burn)."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="burn_states")
    subject = models.CharField(max_length=300)
    over = models.BooleanField(default=False)
    crossings = models.PositiveIntegerField(default=0, help_text="How many times it went over: names each notice.")
    changed_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "subject"], name="burn_state_once_per_subject")]

    def __str__(self):
        return f"rule {self.rule_id} {self.subject}: {'over' if self.over else 'within'}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"      # waiting for its (next) try
    SENDING = "sending"      # claimed by a sender until claimed_until
    SENT = "sent"
    FAILED = "failed"        # tries spent, or the channel can never work


class Delivery(models.Model):
    """One notification for one channel: the outbox row the scheduler sends and retries."""

    Status = DeliveryStatus

    # Deleting a rule or channel keeps its deliveries on the deliveries page.
    # Its own project (the rule's when written): a delivery outlives its rule and channel.
    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    rule = models.ForeignKey(Rule, null=True, on_delete=models.SET_NULL, related_name="deliveries")
    channel = models.ForeignKey(Channel, null=True, on_delete=models.SET_NULL, related_name="deliveries")
    rule_name = models.CharField(max_length=120)
    channel_name = models.CharField(max_length=80)
    event_key = models.CharField(max_length=200, help_text="What happened, e.g. approval:12:requested.")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The request it asks (or escalates) a decision on: the inbox shows who was asked and when.
    approval = models.ForeignKey("runs.Approval", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="notifications")
    subject = models.CharField(max_length=300)
    body = models.TextField()
    link = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects = ProjectScopedManager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due_idx"),
                   models.Index(fields=["-created_at"], name="delivery_created_idx")]
        constraints = [
            models.UniqueConstraint(fields=["rule", "channel", "event_key"], name="delivery_once_per_event"),
            models.CheckConstraint(condition=Q(status__in=values_of(DeliveryStatus)),
                                   name="delivery_status_valid"),
        ]

    def __str__(self):
        return f"{self.event_key} → {self.channel_id} ({self.status})"


# -- approvals decided where people are (Slack, e-mail) ---------------------------------------------

class SlackLink(models.Model):
    """An AgentOps user's Slack account: a click in Slack decides as this user, and only then."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_link")
    team_id = models.CharField(max_length=40)
    slack_user_id = models.CharField(max_length=40)
    slack_name = models.CharField(max_length=120, blank=True)
    linked_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team_id", "slack_user_id"], name="slack_link_one_user")]

    def __str__(self):
        return f"{self.user_id} is {self.slack_user_id} in {self.team_id}"


class SlackLinkCode(models.Model):
    """A one-time code from the profile page; `/agentops link CODE` in Slack links the account that sends it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    code_hash = models.CharField(max_length=64, unique=True)  # only a hash: the code is shown once
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"link code for {self.user_id}, {'used' if self.used_at else 'unused'}"


class SlackMessage(models.Model):
    """An approval request posted to Slack: updated when it is decided or expires, wherever that happened."""

    approval = models.ForeignKey("runs.Approval", on_delete=models.CASCADE, related_name="slack_messages")
    slack_channel = models.CharField(max_length=40)
    ts = models.CharField(max_length=40)
    shown_state = models.CharField(max_length=20, default="pending")  # what the message says now
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["slack_channel", "ts"], name="slack_message_once")]
        indexes = [models.Index(fields=["shown_state"], name="slack_message_shown_idx")]

    def __str__(self):
        return f"approval {self.approval_id} in {self.slack_channel} at {self.ts} ({self.shown_state})"


class SlackRequestSeen(models.Model):
    """Signed Slack requests already taken: the same signed request sent again is a replay, refused."""

    signature = models.CharField(max_length=80, unique=True)
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"Slack request seen at {self.received_at:%Y-%m-%d %H:%M:%S}"


class EmailDecisionLink(models.Model):
    """The decision links of one request mail to one approver: signed, single-use, expiring.

    Approve and Reject in the mail share the row, so using one spends both."""

    nonce = models.CharField(max_length=64, unique=True)
    approval = models.ForeignKey("runs.Approval", on_delete=models.CASCADE, related_name="email_links")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"decision link for approval {self.approval_id} to {self.user_id}, {'used' if self.used_at else 'unused'}"
