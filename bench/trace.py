#!/usr/bin/env python
"""The trace at scale: the 50,000-attempt run's page and its JSON download, in process and through servers.

On bench/pages.py's data (built first when the database lacks it: N runs, one with 50,000
attempts), best and median of `--rounds`, wall time beside CPU time:

- the trace page's data (`runs.trace.page.trace_page`) and the whole page through Django's
  test client (template rendered), with the CPU of this process and of its database backend;
- the trace JSON in process: the view's streamed response consumed, as a server would;
- the trace JSON through gunicorn (gthread, `agentops.wsgi`) and uvicorn (`agentops.asgi`, the
  production server), read over loopback: MB/s at the client, CPU of the server process.

`--before DIR` measures another checkout (e.g. `git worktree add /tmp/before main`) with this
same script, in turns with this one, and prints the two side by side.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/trace.py --runs 1000000
    .venv/bin/python bench/trace.py --runs 100000 --before /tmp/before     # SQLite under --var-dir
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


def root_from_argv() -> Path:
    """The checkout measured: --root, else the one this script is in."""
    if "--root" in sys.argv:
        return Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
    return HERE.parent


ROOT = root_from_argv()
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

benchenv.prepare()


def cpu_s(pid: int | str = "self") -> float:
    """User + system CPU seconds of a process (from /proc: also for processes that are not ours)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Meter:
    """Wall time, this process's CPU and the CPU of a set of other processes, over a block."""

    def __init__(self, pids=()):
        self.pids = list(pids)

    def __enter__(self):
        self.others = sum(cpu_s(p) for p in self.pids)
        self.cpu = time.process_time()
        self.wall = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall_s = time.perf_counter() - self.wall
        self.cpu_s = time.process_time() - self.cpu
        self.others_s = sum(cpu_s(p) for p in self.pids) - self.others


def summary(name: str, samples: list[dict], size: int = 0) -> dict:
    """Best (fastest wall) and median of each figure over the rounds."""
    best = min(samples, key=lambda s: s["wall"])
    row = {"name": name, "bytes": size, **{f"best_{k}": v for k, v in best.items()},
           **{f"median_{k}": statistics.median(s[k] for s in samples) for k in best}}
    return row


def backend_pid() -> int | None:
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def in_process(user, big, rounds: int) -> list[dict]:
    from django.test import Client

    from runs import selectors
    from runs.trace.page import trace_page
    from runs.trace.review import TraceFilters

    client = Client()
    client.force_login(user)
    backend = backend_pid()
    pids = [backend] if backend else []
    results = []

    def data():
        run = selectors.run_get(run_id=big.pk)
        trace_page(run, capability_calls=selectors.run_capability_calls(run=run), trace_filters=TraceFilters(),
                   page_number="1")

    def page():
        response = client.get(f"/runs/{big.pk}/")
        assert response.status_code == 200, response.status_code
        return len(response.content)

    def download():
        response = client.get(f"/runs/{big.pk}/trace.json")
        assert response.status_code == 200, response.status_code
        return sum(len(chunk) for chunk in response.streaming_content)

    for name, work in [("trace page's data (trace_page)", data), ("trace page (test client, rendered)", page),
                       ("trace JSON (test client, streamed)", download)]:
        samples, size = [], 0
        for _ in range(rounds):
            # Each of the page's reads on the backend this process keeps (the test client's requests
            # close the connection at their end, so read the pid again).
            with Meter(pids) as meter:
                size = work() or 0
            samples.append({"wall": meter.wall_s, "cpu": meter.cpu_s, "db_cpu": meter.others_s})
            backend = backend_pid()
            pids = [backend] if backend else []
        results.append(summary(name, samples, size))
    return results


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def session_cookie(user) -> str:
    """A logged-in session for the servers' requests (the test client's login, as the pages bench's)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def serve(kind: str, port: int) -> subprocess.Popen:
    python = sys.executable
    command = {
        "gunicorn": [python, "-m", "gunicorn", "agentops.wsgi", "-k", "gthread", "--workers", "1", "--threads",
                     "4", "--bind", f"127.0.0.1:{port}", "--timeout", "300"],
        "uvicorn": [python, "-m", "uvicorn", "agentops.asgi:application", "--host", "127.0.0.1", "--port",
                    str(port), "--workers", "1", "--log-level", "warning", "--no-access-log"],
    }[kind]
    env = {**os.environ, "ALLOWED_HOSTS": "127.0.0.1", "DEBUG": "false", "PYTHONUNBUFFERED": "1"}
    log = open(Path(tempfile.gettempdir()) / f"bench-trace-{kind}-{port}.log", "w")  # noqa: SIM115
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
                return server
        except OSError:
            time.sleep(0.3)
    server.kill()
    raise SystemExit(f"{kind} did not answer on port {port}: see {log.name}")


def through_servers(user, big, rounds: int, kinds: list[str]) -> list[dict]:
    cookie = session_cookie(user)
    results = []
    for kind in kinds:
        port = free_port()
        server = serve(kind, port)
        try:
            workers = children(server.pid) if kind == "gunicorn" else [server.pid]
            request = urllib.request.Request(f"http://127.0.0.1:{port}/runs/{big.pk}/trace.json",
                                             headers={"Cookie": cookie})
            samples, size = [], 0
            for n in range(rounds + 1):   # the first request warms the worker (imports, connection)
                with Meter(workers) as meter, urllib.request.urlopen(request, timeout=600) as response:
                    size, first_byte = 0, None
                    while chunk := response.read(1 << 20):
                        first_byte = first_byte or time.perf_counter()
                        size += len(chunk)
                if n:
                    samples.append({"wall": meter.wall_s, "cpu": meter.others_s,
                                    "first_byte": first_byte - meter.wall if first_byte else 0.0})
            results.append(summary(f"trace JSON through {kind}", samples, size))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    return results


def measure(args) -> list[dict]:
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("DEBUG", "true")
    benchenv.start_django(ROOT)
    import pages

    data = pages.build(args.runs, args.attempts, args.approvals, args.attempt_every)
    results = in_process(data["user"], data["big"], args.rounds)
    if args.servers:
        results += through_servers(data["user"], data["big"], args.rounds, args.servers.split(","))
    return results


def show(columns: list[tuple[str, list[dict]]]) -> None:
    """One line per figure, a best (median) pair per checkout."""
    def cell(row: dict) -> str:
        mb = row["bytes"] / 1e6
        if row["name"].startswith("trace JSON"):
            text = (f"{mb / row['best_wall']:5.0f} MB/s ({mb / row['median_wall']:.0f}), "
                    f"{mb / row['best_cpu']:5.0f} MB per CPU s" if row["best_cpu"] else "")
            if "best_db_cpu" in row:
                text += f", db {row['best_db_cpu'] * 1000:.0f} ms"
            if "best_first_byte" in row:
                text += f", 1st byte {row['best_first_byte'] * 1000:.0f} ms"
            return text
        return (f"{row['best_wall'] * 1000:6.0f} ms ({row['median_wall'] * 1000:.0f}), CPU "
                f"{row['best_cpu'] * 1000:.0f} ms + db {row['best_db_cpu'] * 1000:.0f} ms")

    names = [row["name"] for row in columns[0][1]]
    width = max(len(n) for n in names) + 2
    print(f"{'':{width}}" + "".join(f"{label:58}" for label, _ in columns))
    for i, name in enumerate(names):
        print(f"{name:{width}}" + "".join(f"{cell(rows[i]):58}" for _, rows in columns), flush=True)
    sizes = {row["name"]: row["bytes"] for row in columns[-1][1] if row["name"].startswith("trace JSON")}
    print("JSON sizes: " + ", ".join(f"{n.split('(')[0].strip()}: {b / 1e6:.1f} MB" for n, b in sizes.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--attempts", type=int, default=50_000, help="attempts of the one big run")
    parser.add_argument("--approvals", type=int, default=10_000)
    parser.add_argument("--attempt-every", type=int, default=10, help="every Nth run gets a step and 2 attempts")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--servers", default="gunicorn,uvicorn", help="comma-separated; empty for none")
    parser.add_argument("--before", help="another checkout to measure in turns with this one")
    parser.add_argument("--passes", type=int, default=2, help="with --before: turns each")
    parser.add_argument("--root", help=argparse.SUPPRESS)   # read before the imports (root_from_argv)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-pages"))
    args = parser.parse_args()
    if not args.before:
        results = measure(args)
        if args.json:
            print("RESULTS " + json.dumps(results))
        else:
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; best (median) of "
                  f"{args.rounds}; {args.runs:,} runs, {args.attempts:,} attempts in one")
            show([("this checkout", results)])
        return
    # Side by side: each checkout in a process of its own, in turns, the best of the turns kept.
    own = [a for a in sys.argv[1:] if a not in ("--before", args.before)]
    turns: dict[str, list[list[dict]]] = {"before": [], "after": []}
    for _ in range(args.passes):
        for label, root in (("before", Path(args.before)), ("after", ROOT)):
            out = subprocess.run([sys.executable, __file__, *own, "--root", str(root), "--json"], cwd=root,
                                 check=True, capture_output=True, text=True).stdout
            turns[label].append(json.loads(out.split("RESULTS ", 1)[1]))
            print(f"{label} turn done, load average {os.getloadavg()[0]:.1f}", flush=True)
    columns = []
    for label in ("before", "after"):
        best = [min((turn[i] for turn in turns[label]), key=lambda r: r["best_wall"])
                for i in range(len(turns[label][0]))]
        columns.append((f"{label} ({'--before' if label == 'before' else 'this checkout'})", best))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; best (median) of {args.rounds} "
          f"rounds x {args.passes} turns; {args.runs:,} runs, {args.attempts:,} attempts in one")
    show(columns)


if __name__ == "__main__":
    main()
