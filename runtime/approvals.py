"""Approval requests and decisions: an approval binds to exact arguments and a revision."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ApprovalKind(StrEnum):
    STEP = "step"   # a side-effecting step, bound to its exact arguments
    PLAN = "plan"   # a plan revision, bound to its steps



@dataclass(frozen=True)
class ApprovalRequest:
    kind: str                 # an ApprovalKind
    run_id: str
    revision: int
    step_id: str | None = None
    capability: str | None = None
    arguments_hash: str | None = None   # kind == "step"
    plan_hash: str | None = None        # kind == "plan"
    # When the request lapses undecided: the earlier of its TTL and the run's deadline.
    # Not part of the key: it says when, not what, is approved.
    expires_at: float | None = None

    @property
    def key(self) -> str:
        """One string naming exactly what is approved; a changed argument or revision changes it."""
        return "|".join(str(p) for p in (self.kind, self.run_id, self.revision, self.step_id,
                                         self.capability, self.arguments_hash, self.plan_hash))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "revision": self.revision, "step_id": self.step_id,
                "capability": self.capability, "arguments_hash": self.arguments_hash, "plan_hash": self.plan_hash,
                "expires_at": self.expires_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApprovalRequest:
        return cls(**data)


@dataclass(frozen=True)
class ApprovalDecision:
    approved: bool
    comment: str = ""
    decided_by: str = ""

    @classmethod
    def approve(cls, comment: str = "", decided_by: str = "") -> ApprovalDecision:
        return cls(True, comment, decided_by)

    @classmethod
    def reject(cls, comment: str = "", decided_by: str = "") -> ApprovalDecision:
        return cls(False, comment, decided_by)

    def to_dict(self) -> dict[str, Any]:
        return {"decision": "approve" if self.approved else "reject", "comment": self.comment,
                "decided_by": self.decided_by}
