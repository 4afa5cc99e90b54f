"""Block Kit for an approval request: what is asked, the exact arguments, the run's goal and budgets.

The buttons carry the binding (approval, arguments hash, plan revision) the message shows; Slack
signs the interaction that returns it, and runs.services.approval_decide refuses any other binding.
Arguments too long for a message get no buttons: a decision is never made on arguments not shown.
"""
from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)

from runtime.stop import StopKind

APPROVE, REJECT = "agentops_approve", "agentops_reject"
COMMENT_BLOCK, COMMENT_INPUT = "agentops_comment", "comment"
MAX_ARGUMENTS_CHARS = 2600  # a section's text holds 3000 characters


def binding(approval) -> str:
    return json.dumps({"a": approval.pk, "h": approval.arguments_hash or approval.plan_hash,
                       "r": approval.revision.number}, separators=(",", ":"))


def _what(approval) -> str:
    if approval.kind == "plan":
        return f"the plan of revision {approval.revision.number}"
    return f"step `{approval.step.key if approval.step_id else '?'}` calls *{approval.capability_name}*"


def _budgets(budgets: dict[str, Any]) -> str:
    shown = [f"{name} {value}" for name, value in sorted((budgets or {}).items()) if value not in ({}, None)]
    return ", ".join(shown) or "defaults"


def _summary(approval, inbox_url: str) -> list:
    arguments = json.dumps(approval.arguments, indent=2, ensure_ascii=False, sort_keys=True)
    fits = len(arguments) <= MAX_ARGUMENTS_CHARS
    shown = arguments if fits else arguments[:MAX_ARGUMENTS_CHARS] + "\n…"
    run = approval.run
    return [
        HeaderBlock(text=PlainTextObject(text=f"Approval needed: run #{run.pk}"[:150])),
        SectionBlock(text=MarkdownTextObject(text=f"Run #{run.pk} waits for approval: {_what(approval)}.")),
        SectionBlock(text=MarkdownTextObject(text=f"*Arguments*\n```{shown}```")),
        SectionBlock(fields=[MarkdownTextObject(text=f"*Goal*\n{run.goal[:900]}"),
                             MarkdownTextObject(text=f"*Budgets*\n{_budgets(run.budgets)[:900]}")]),
        ContextBlock(elements=[MarkdownTextObject(
            text=f"Owner {run.owner.get_username()} · expires {approval.expires_at:%Y-%m-%d %H:%M} UTC · "
                 f"<{inbox_url}|open in the inbox>")]),
    ], fits


def request_blocks(approval, *, inbox_url: str) -> list[dict]:
    """The pending request: its summary, a comment box, Approve and Reject (a rejection is confirmed)."""
    blocks, fits = _summary(approval, inbox_url)
    if not fits:
        blocks.append(SectionBlock(text=MarkdownTextObject(
            text=":warning: The arguments are too long to show here: decide in the inbox.")))
        return [b.to_dict() for b in blocks]
    value = binding(approval)
    blocks += [
        InputBlock(block_id=COMMENT_BLOCK, optional=True, label=PlainTextObject(text="Comment"),
                   element=PlainTextInputElement(action_id=COMMENT_INPUT, multiline=True, max_length=3000)),
        ActionsBlock(block_id="agentops_decision", elements=[
            ButtonElement(text="Approve", action_id=APPROVE, value=value, style="primary"),
            ButtonElement(text="Reject", action_id=REJECT, value=value, style="danger", confirm=ConfirmObject(
                title="Reject this request?", text=f"The run stops ({StopKind.APPROVAL_REJECTED}) and cannot be resumed.",
                confirm="Reject", deny="Keep it waiting")),
        ]),
    ]
    return [b.to_dict() for b in blocks]


def outcome_blocks(approval, *, inbox_url: str, outcome: str) -> list[dict]:
    """The request once it is decided or expired: the summary and what happened, no buttons."""
    blocks, _fits = _summary(approval, inbox_url)
    blocks.append(SectionBlock(text=MarkdownTextObject(text=outcome)))
    return [b.to_dict() for b in blocks]
