"""/healthz under the issue-34 attacks, on the production web layout and on the old gthread one.

For each layout: start the server afresh, open N long polls (GET .../planning/?wait=25) from one
viewer and M slowloris sockets (headers that never end), then time /healthz a few times
(timeouts count as the timeout). Prints the figures; asserts nothing.

    .venv/bin/python bench/starvation.py [--polls 40] [--slowloris 80] [--layouts uvicorn,gthread] [--json]

It uses its own SQLite database in a temporary folder.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = {
    "uvicorn": lambda port: [sys.executable, "-m", "uvicorn", "agentops.asgi:application", "--workers", "2",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
    "gthread": lambda port: [sys.executable, "-m", "gunicorn", "agentops.wsgi", "-k", "gthread", "--workers", "2",
                             "--threads", "16", "--timeout", "60", "--bind", f"127.0.0.1:{port}",
                             "--log-level", "warning"],
}
SETUP = """
from core.project_access import default_project, grant_role
from core.projects import enter_project
enter_project(default_project())
from django.contrib.auth.models import Group, User
from capabilities.kinds.python.sync import python_capabilities_sync
from core.tokens import token_create
from runs import services
services._enqueue_advance = lambda run_id, countdown=None: None   # nobody advances it: polls wait their time
python_capabilities_sync()
viewer = User.objects.create_user("viewer"); grant_role(viewer, "viewer")
owner = User.objects.create_user("owner"); grant_role(owner, "operator")
run = services.run_start(owner=owner, goal="Wait", planner="external", budgets={"deadline_s": 3000},
                         completion={"capability": "search_documents", "path": "documents.0.id", "exists": True})
services.plan_submit(run_id=run.pk, user=owner, revision=1, steps=[
    {"id": "s1", "capability": "search_documents", "arguments": {"q": "x"}, "expected_outcome": "x"}])
print(run.pk, token_create(user=viewer, name="bench")[1])
"""


def environment(var_dir: Path, polls: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(AGENTOPS_VAR_DIR=str(var_dir), DEBUG="false", SECRET_KEY=env.get("SECRET_KEY", "b" * 50),
               ALLOWED_HOSTS="127.0.0.1", SECURE_SSL_REDIRECT="false", PYTHONUNBUFFERED="1",
               AGENTOPS_LONG_POLL_MAX_PER_USER=str(max(polls, 1)), PYTHONPATH=str(ROOT))
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthz_s(port: int, timeout: float) -> float:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", "/healthz")
        connection.getresponse().read()
    except OSError:
        return timeout
    finally:
        connection.close()
    return time.monotonic() - started


def measure(layout: str, env: dict, run_id: int, token: str, polls: int, slowloris: int, timeout: float) -> dict:
    port = free_port()
    server = subprocess.Popen(LAYOUTS[layout](port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    sockets: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while healthz_s(port, 2) >= 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        quiet = [healthz_s(port, timeout) for _ in range(5)]
        for _ in range(polls):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(f"GET /api/runs/{run_id}/planning/?wait=25 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         f"Authorization: Token {token}\r\n\r\n".encode())
            sockets.append(sock)
        for n in range(slowloris):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow-{n}: a".encode())
            sockets.append(sock)
        time.sleep(2)   # let the server take them all in
        attacked = [healthz_s(port, timeout) for _ in range(5)]
    finally:
        for sock in sockets:
            sock.close()
        server.terminate()
        try:
            server.wait(timeout=40)   # gunicorn lets its requests finish first (graceful timeout 30 s)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return {"layout": layout, "polls": polls, "slowloris": slowloris,
            "healthz_quiet_median_ms": round(statistics.median(quiet) * 1000, 1),
            "healthz_attacked_median_ms": round(statistics.median(attacked) * 1000, 1),
            "healthz_attacked_timeouts": sum(1 for s in attacked if s >= timeout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--slowloris", type=int, default=80)
    parser.add_argument("--layouts", default="uvicorn,gthread")
    parser.add_argument("--timeout", type=float, default=10.0, help="a /healthz slower than this counts as a timeout")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentops-starvation-") as folder:
        env = environment(Path(folder), args.polls)
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run(manage + ["migrate", "-v0"], cwd=ROOT, env=env, check=True)
        out = subprocess.run(manage + ["shell", "-c", SETUP], cwd=ROOT, env=env, check=True, capture_output=True,
                             text=True).stdout.split()
        run_id, token = int(out[-2]), out[-1]
        results = [measure(layout, env, run_id, token, args.polls, args.slowloris, args.timeout)
                   for layout in args.layouts.split(",")]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(f"{r['layout']:8} {r['polls']} long polls + {r['slowloris']} slowloris: /healthz median "
              f"{r['healthz_quiet_median_ms']} ms quiet, {r['healthz_attacked_median_ms']} ms attacked, "
              f"{r['healthz_attacked_timeouts']}/5 timed out (>{args.timeout:.0f} s)")


if __name__ == "__main__":
    main()
