"""A deterministic demo planner for the bundled capabilities: no model needed.

It reads only the goal and the observations so far, so the demo shows the
runtime's control (replanning on empty results, approval, polling) without any
model. Steps whose arguments depend on an earlier result are planned in the
revision after that result arrives (reason new_information).
"""
from __future__ import annotations

import json
import re
from typing import Any

from runtime.planning import PlanningRequest, PlanProposal

_STOPWORDS = {
    "a", "an", "and", "the", "of", "for", "to", "in", "on", "with", "about", "our", "my", "me", "what", "is", "it",
    "find", "look", "up", "get", "fetch", "read", "show", "policy", "policies", "document", "documents", "doc",
    "open", "create", "file", "raise", "ticket", "tickets", "wait", "until", "resolved", "resolve", "then", "notify",
    "send", "notification", "tell", "someone", "team", "that", "this", "please", "internal", "rules", "guidance",
}
# Broader words to try when a specific query finds nothing.
_BROADER = {
    "trip": "travel", "flight": "travel", "hotel": "travel", "per": "travel", "diem": "travel",
    "laptop": "equipment", "phone": "equipment", "password": "security", "phishing": "security",
    "vacation": "leave", "holiday": "leave", "sick": "leave", "parental": "leave", "receipt": "expenses",
    "reimbursement": "expenses", "meal": "expenses", "vendor": "procurement", "purchase": "procurement",
    "breach": "incident", "outage": "incident", "backup": "retention", "gdpr": "privacy",
}


def keywords(goal: str) -> list[str]:
    words = re.findall(r"[a-z0-9][a-z0-9\-]*", goal.lower())
    seen: list[str] = []
    for word in words:
        if word not in _STOPWORDS and len(word) > 1 and word not in seen:
            seen.append(word)
    return seen


class RulesPlanner:
    def propose(self, request: PlanningRequest) -> PlanProposal | None:
        visible = {c.name for c in request.capabilities}
        steps = self._next_steps(request, visible)
        if not steps:
            return None
        return PlanProposal(plan=steps, raw_output=json.dumps(steps, sort_keys=True), reason=self._why(request))

    def _next_steps(self, request: PlanningRequest, visible: set[str]) -> list[dict[str, Any]]:
        ok: dict[str, list[Any]] = {}
        tried: list[str] = []
        for entry in request.history:
            if entry.capability == "search_documents":
                tried.append(str(entry.arguments.get("q", "")))
            if entry.observation.status.value == "ok":
                ok.setdefault(entry.capability, []).append(entry.observation.output or {})
        found = next((o for o in reversed(ok.get("search_documents", [])) if o.get("documents")), None)
        if found is None:
            query = self._query(request.goal, tried)
            if query is None or "search_documents" not in visible:
                return []
            return [{"id": "search", "capability": "search_documents", "arguments": {"q": query, "limit": 3},
                     "expected_outcome": "at least one matching policy document"}]
        best = found["documents"][0]
        if "get_document" in visible and "get_document" not in ok:
            return [{"id": "read", "capability": "get_document", "arguments": {"id": best["id"]},
                     "expected_outcome": f"the text of {best['id']}"}]
        wants_ticket = bool(re.search(r"\bticket", request.goal, re.I)) and "create_ticket" in visible
        wants_notify = bool(re.search(r"\bnotif|\btell\b|\bsend\b", request.goal, re.I))
        if wants_ticket and "create_ticket" not in ok:
            return [{"id": "ticket", "capability": "create_ticket",
                     "arguments": {"title": f"Follow up on {best['id']}: {best.get('title', '')}"[:200],
                                   "body": f"Goal: {request.goal}\nFound: {best['id']} {best.get('title', '')}"},
                     "expected_outcome": "a ticket is opened"}]
        if wants_ticket and "get_ticket_status" in visible:
            status = ok.get("get_ticket_status")
            if not (status and status[-1].get("status") == "resolved"):
                return [{"id": "wait", "capability": "get_ticket_status",
                         "arguments": {"ticket_id": ok["create_ticket"][-1]["ticket_id"]},
                         "expected_outcome": "the ticket is resolved"}]
        if wants_notify and "send_notification" in visible and "send_notification" not in ok:
            return [{"id": "notify", "capability": "send_notification",
                     "arguments": {"channel": "email", "recipient": "policy-owners@example.com",
                                   "message": f"{request.goal}: see {best['id']}"},
                     "expected_outcome": "the notification is queued"}]
        return []

    @staticmethod
    def _query(goal: str, tried: list[str]) -> str | None:
        words = keywords(goal)
        candidates = [" ".join(words[:n]) for n in range(len(words), 0, -1)]
        candidates += [_BROADER[w] for w in words if w in _BROADER]
        return next((q for q in candidates if q and q not in tried), None)

    @staticmethod
    def _why(request: PlanningRequest) -> str:
        if request.reason_code is None:
            return "First plan from the goal's keywords."
        if request.reason_code == "result_not_found":
            return "The last search found nothing: broaden the query."
        return f"Next step after {request.reason_code.replace('_', ' ')}."
