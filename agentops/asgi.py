"""The web server's ASGI application: /mcp/ is the MCP gateway, the planning long poll is held on the
event loop (runs.api.planning_front), everything else Django.

`manage.py serve` runs it under uvicorn; production runs it under uvicorn workers (docs/operations.md,
"Production"). The lifespan starts the gateway's session manager, which Django's ASGI
handler (HTTP only) would refuse.
"""
import os

from django.core import signals
from django.core.asgi import get_asgi_application
from django.core.handlers.asgi import ASGIHandler
from django.db import connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
django_application = get_asgi_application()


def close_sessions(**kwargs) -> None:
    """Under ASGI each request's synchronous code runs on a thread of its own (asgiref's
    ThreadSensitiveContext), so a database session kept for CONN_MAX_AGE outlives its thread until the
    garbage collector finds it: bursts of 30 requests left 49 sessions open in one process, and a busy
    server reached PostgreSQL's max_connections. As Django advises under ASGI, a request's sessions
    close with it. (The gateway's and the long poll's threads are a pool: theirs are kept.)"""
    connections.close_all()


# Django's own requests only (sender): a test client's or a WSGI server's keep their sessions.
signals.request_finished.connect(close_sessions, sender=ASGIHandler, dispatch_uid="agentops.asgi.close_sessions")

from gateway.asgi import McpEndpoint  # noqa: E402 - needs the apps loaded above
from gateway.mcp_server import SHUT_DOWN, build_session_manager, sessions_closing  # noqa: E402
from runs.api.planning_front import PlanningLongPoll, is_planning_poll  # noqa: E402

MCP_PATHS = ("/mcp", "/mcp/")


class Router:
    def __init__(self):
        self.session_manager = build_session_manager()
        self.mcp = McpEndpoint(self.session_manager)
        self.planning = PlanningLongPoll(django_application)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] == "http" and scope["path"] in MCP_PATHS:
            return await self.mcp(scope, receive, send)
        if is_planning_poll(scope):
            return await self.planning(scope, receive, send)
        return await django_application(scope, receive, send)

    async def _lifespan(self, receive, send):
        message = await receive()   # lifespan.startup
        try:
            async with self.session_manager.run():
                await send({"type": "lifespan.startup.complete"})
                message = await receive()   # lifespan.shutdown
                sessions_closing(SHUT_DOWN)   # the sessions end with the process, and their runs say so
        except Exception as exc:  # noqa: BLE001 - reported to the server, which then exits
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            raise
        await send({"type": "lifespan.shutdown.complete"})


application = Router()
