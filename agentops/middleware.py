"""Refuse oversized API bodies before anything reads them; answer outages (database, storage) with 503;
stream a download as it is made under ASGI."""
import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Iterable, Iterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.core.signals import got_request_exception
from django.http import FileResponse, HttpResponse, JsonResponse

from core.outages import Outage, outage_of, told


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse({"error": {"code": "bad_request", "message": "Invalid Content-Length header."}},
                                status=400)
        if length > settings.API_MAX_BODY_BYTES:
            return JsonResponse(
                {"error": {"code": "request_too_large",
                           "message": f"Request body is {length} bytes; the limit is {settings.API_MAX_BODY_BYTES}."}},
                status=413,
            )
        return self.get_response(request)


# -- outages (the database down, storage full) -------------------------------------------------

def _mark_outage(sender, request=None, **kwargs):
    """got_request_exception fires inside Django's handler, while the exception is current."""
    exc = sys.exc_info()[1]
    outage = outage_of(exc)
    if request is not None and outage is not None:
        request._agentops_outage = (outage, str(exc).strip()[:300])


got_request_exception.connect(_mark_outage, dispatch_uid="agentops-outage")


class OutageIsNotAnError(logging.Filter):
    """On django.request: Django logs each uncaught exception as a 500 error before the middleware
    below answers 503; an outage is logged once, by the middleware, as a warning naming what is down."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(getattr(record, "request", None), "_agentops_outage", None) is None


def outage_response(request, outage: Outage) -> HttpResponse:
    if request.path.startswith("/api/") or request.path.startswith("/healthz"):
        response = JsonResponse({"error": {"code": outage.code, "message": outage.message},
                                 "down": [outage.down]}, status=503)
    else:
        response = HttpResponse(f"<!doctype html><title>Unavailable</title><h1>AgentOps is unavailable</h1>"
                                f"<p>{outage.message}</p>", status=503)
    response["Retry-After"] = "5"
    return response


class OutageMiddleware:
    """An outage (database down, storage full) answers 503 (JSON on the API), never Django's 500 page.

    Outermost but for StreamAsMadeMiddleware (which only hands a stream on), because the
    error may come from any layer (the session, the user, the view); Django turns it into
    a 500 response before it reaches us, so the signal above marks the request and the 500
    is replaced here.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        marked = getattr(request, "_agentops_outage", None)
        if marked is None or response.status_code < 500:
            return response
        outage, detail = marked
        return told(request, outage_response(request, outage), outage.summary, detail)


# -- streamed downloads under ASGI ----------------------------------------------------------------

class StreamAsMadeMiddleware:
    """Under ASGI (uvicorn, the production server), a streamed response is sent as it is made.

    Django's ASGI handler serves a synchronous iterator by reading all of it into a list first
    (in a thread), then sending: a 100 MB trace download was held in memory whole and its first
    byte left after its last row was read. Here its chunks are pulled one at a time, each in the
    request's own thread (thread-sensitive), where the view's database connection and its
    server-side cursor live. Outermost, so it sees the response every other layer wrapped.
    Files (FileResponse: static files, stored outputs) keep Django's own path; WSGI servers
    iterate a response as it is made already.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (isinstance(request, ASGIRequest) and getattr(response, "streaming", False) and not response.is_async
                and not isinstance(response, FileResponse)):
            response.streaming_content = pulled_in_thread(response.streaming_content)
        return response


_END = object()


def _next_chunk(iterator: Iterator) -> object:
    return next(iterator, _END)


async def pulled_in_thread(chunks: Iterable) -> AsyncIterator:
    """The chunks of a synchronous iterator, each made in the request's thread while the event loop
    sends the one before (the next is asked for before this one is handed on)."""
    iterator = iter(chunks)
    pull = sync_to_async(_next_chunk, thread_sensitive=True)
    pending = asyncio.ensure_future(pull(iterator))
    try:
        while (chunk := await pending) is not _END:
            pending = asyncio.ensure_future(pull(iterator))
            yield chunk
    finally:
        # A client gone away: let the chunk being made finish before the response is closed (in
        # that thread too); the iterator's own generator is closed by response.close().
        if not pending.done():
            await asyncio.wait([pending])
