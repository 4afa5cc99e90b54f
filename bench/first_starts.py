"""Run starts on freshly started gunicorn (gthread) workers: is any first start's task lost?

Each round starts gunicorn afresh and fires concurrent `POST /api/runs/start/` at it
before its worker has served anything, so the worker's threads look the task up at
once. A start whose task could not be queued still answers 201 (the run is committed;
the orphan sweep queues it later) and logs why, so the figures come from two places:
`NotRegistered` in the server's log, and the messages in the embedded broker's folder
(one per run started, or some were lost).

    .venv/bin/python bench/first_starts.py [--starts 50] [--concurrency 16] [--json]

It uses its own SQLite database and embedded broker in a temporary folder.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_BODY = json.dumps({"goal": "first start", "planner": "rules",
                         "completion": {"capability": "search_documents", "path": "documents.0.id",
                                        "exists": True}}).encode()


def environment(var_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(AGENTOPS_VAR_DIR=str(var_dir), DEBUG="false", SECRET_KEY=env.get("SECRET_KEY", "b" * 50),
               ALLOWED_HOSTS="127.0.0.1", SECURE_SSL_REDIRECT="false", PYTHONUNBUFFERED="1")
    return env


def manage(env: dict, *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True,
                          text=True, timeout=300).stdout


def prepare(env: dict) -> str:
    """A migrated database with a superuser; returns an API token's key."""
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "shell", "-c", "from django.contrib.auth import get_user_model; "
                               "get_user_model().objects.create_superuser('bench', 'b@example.com', 'pw')")
    return manage(env, "create_api_token", "bench").strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post_start(url: str, key: str) -> int:
    request = urllib.request.Request(url, data=START_BODY, headers={
        "Content-Type": "application/json", "Authorization": f"Token {key}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def queued_messages(var_dir: Path) -> int:
    return sum(1 for _ in (var_dir / "broker" / "queue").glob("*.msg"))


def one_round(env: dict, key: str, var_dir: Path, concurrency: int) -> dict:
    """A fresh server, `concurrency` starts fired together as soon as it listens."""
    port = free_port()
    before = queued_messages(var_dir)
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "agentops.wsgi", "-k", "gthread", "--workers", "1",
                               "--threads", str(concurrency), "-b", f"127.0.0.1:{port}", "--log-level", "warning"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The master listens before its worker has loaded the app: requests wait in the backlog.
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        statuses: list[int] = []
        gate = threading.Barrier(concurrency)

        def fire():
            gate.wait()
            statuses.append(post_start(f"http://127.0.0.1:{port}/api/runs/start/", key))

        threads = [threading.Thread(target=fire) for _ in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        server.terminate()
        log = server.communicate(timeout=30)[0]
    return {"started": statuses.count(201), "other_statuses": sorted(s for s in statuses if s != 201),
            "queued": queued_messages(var_dir) - before, "not_registered": log.count("NotRegistered:"),
            "log_tail": log[-2000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=50, help="fresh servers started, one after another")
    parser.add_argument("--concurrency", type=int, default=16, help="run starts fired together at each")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="first-starts-") as tmp:
        var_dir = Path(tmp)
        env = environment(var_dir)
        key = prepare(env)
        rounds = [one_round(env, key, var_dir, args.concurrency) for _ in range(args.starts)]
    figures = {"servers": args.starts, "concurrency": args.concurrency,
               "started": sum(r["started"] for r in rounds), "queued": sum(r["queued"] for r in rounds),
               "not_registered": sum(r["not_registered"] for r in rounds),
               "servers_with_not_registered": sum(1 for r in rounds if r["not_registered"]),
               "other_statuses": sorted(s for r in rounds for s in r["other_statuses"]),
               "first_failing_log": next((r["log_tail"] for r in rounds if r["not_registered"] or r["other_statuses"]),
                                         "")}
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
