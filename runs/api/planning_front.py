"""The ASGI front of the planning long poll: GET /api/runs/<id>/planning/?wait=N without a request thread.

The router (agentops/asgi.py) sends every GET (and HEAD) of that path here. The front authenticates and
checks the request exactly as the DRF view does (the view's own authenticators, permission and
input), then holds the wait on the event loop (runs.planning_hold). When the run changes, the wait
ends, or anything is off (not signed in, a bad `wait`, no such run), the request goes on to
Django marked HELD_BY_FRONT, so the DRF view answers at once, with the same service function and
serializer as ever, or with the 429 the front decided. A client that goes away ends the wait and
frees its slot.
"""
from __future__ import annotations

import asyncio
import io
import re

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.handlers.asgi import ASGIRequest
from rest_framework.exceptions import APIException

from core.db_sessions import pooled
from core.errors import ServiceError, TooBusy
from core.outages import DATABASE_ERRORS
from runs.api.planning import RunPlanningApi
from runs.planning_hold import HELD_BY_FRONT, FrontOutcome, hold_until_change

PLANNING_PATH = re.compile(r"^/api/runs/(\d+)/planning/$")


def is_planning_poll(scope) -> bool:
    # HEAD too: Django answers it with the GET view, which would otherwise hold the wait in a thread.
    return (scope["type"] == "http" and scope["method"] in ("GET", "HEAD")
            and PLANNING_PATH.match(scope["path"]) is not None)


def _admitted(scope, run_id: int) -> tuple[int, int] | None:
    """(user id, wait) when the DRF view would accept this request and wait; else None (Django answers it)."""
    request = ASGIRequest(scope, io.BytesIO())
    # The session and user as Django's middleware makes them, then the view's own authenticators,
    # permission and input: the same checks, in the same order.
    SessionMiddleware(lambda r: None).process_request(request)
    AuthenticationMiddleware(lambda r: None).process_request(request)
    view = RunPlanningApi()
    view.args, view.kwargs, view.format_kwarg, view.headers = (), {"run_id": run_id}, None, {}
    view.request = drf_request = view.initialize_request(request, run_id=run_id)
    try:
        view.initial(drf_request, run_id=run_id)
        wait_s = view.query["wait"]
    except (APIException, ServiceError):
        return None
    return (drf_request.user.pk, wait_s) if wait_s else None


class PlanningLongPoll:
    """The ASGI front for the planning long poll; `django` is the Django application it hands over to."""

    def __init__(self, django):
        self.django = django

    async def __call__(self, scope, receive, send) -> None:
        outcome = FrontOutcome()
        first_message = await receive()
        gone: asyncio.Future | None = None
        if first_message["type"] == "http.request" and not first_message.get("more_body"):
            # The request is complete: the next message can only be the client leaving.
            gone = asyncio.ensure_future(receive())
            try:
                await self._hold(scope, gone)
            except TooBusy as refused:
                outcome.refused = refused
            except DATABASE_ERRORS:
                pass   # Django answers it (503 while the database is down)
            if gone.done():
                return
        await self.django({**scope, HELD_BY_FRONT: outcome}, _replaying(first_message, gone, receive), send)

    async def _hold(self, scope, gone: asyncio.Future) -> None:
        run_id = int(PLANNING_PATH.match(scope["path"])[1])
        admitted = await pooled(_admitted)(scope, run_id)
        if admitted is not None:
            user_id, wait_s = admitted
            await hold_until_change(user_id=user_id, run_id=run_id, wait_s=wait_s, db=pooled, gone=gone)


def _replaying(first_message: dict, pending: asyncio.Future | None, receive):
    """receive() for Django: the request message already read, then the one being waited for, then on."""
    queue: list = [first_message, *([pending] if pending is not None else [])]

    async def replay():
        if queue:
            item = queue.pop(0)
            return await item if isinstance(item, asyncio.Future) else item
        return await receive()

    return replay
