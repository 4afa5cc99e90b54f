#!/usr/bin/env python
"""Chaos: runs with real side effects while workers, the broker and the database die.

Starts its own PostgreSQL cluster and Redis (ports from CHAOS_PG_PORT, default
5441, and CHAOS_REDIS_PORT, default 6391; the cluster's name from CHAOS_PG_CLUSTER,
default chaos), real Celery workers (threads pools, one gevent, one prefork) and one
beat, registers the ledger capabilities of tests/chaos/chaos_ledger.py (their real
effects go to an fsync'd ledger file), starts runs, and meanwhile SIGKILLs
workers every few seconds, SIGSTOPs one past its lease now and then (it wakes after
another worker took its run over, its call still in flight), each pool in turn, kills the
children of the prefork worker, and crash-restarts Redis and PostgreSQL. Some runs call a send
whose effect lands after its timeout (ledger_late_fenced); one in eight is planned by the llm
planner through a chat-completions server of its own. Then, aimed: a worker SIGKILLed while its
stdio MCP call is in flight (--mcp-kills), the web process SIGKILLed inside an approval POST
(--web-kills). It waits for every run to finish and checks the ledger against the trace:

- 0 lost or stranded runs, 0 internal_error,
- 0 duplicate real effects, counted per item in the ledger (not per idempotency key,
  which an idempotent callee refuses anyway), and calls executed by every pool,
- 0 executions missing from the trace (every exec's span is an attempt's span),
- a call longer than the lease executed once,
- an approval decided while the broker was down resumes its run,
- 100 concurrent decisions of one approval: exactly one state change,
- one effect per item after each aimed kill; a killed approval POST decides nothing,
- tokens counted equal tokens the provider served (a lost call within its estimate).

Last, at full size, bench/backlog.py on the same cluster (--backlog runs queued at once, no
faults): re-sent tasks, the longest queue, time to drain, the last run's wait.

    .venv/bin/python bench/chaos.py                    # full size: 300 runs, 120 s of chaos, backlog of 2,000
    .venv/bin/python bench/chaos.py --runs 40 --duration 40 --workers 3 --mcp-kills 1 --web-kills 1 \
        --backlog 0                                    # CI's reduced size (tests/chaos/test_chaos.py)
    add --json for one JSON object (tests/chaos/test_chaos.py reads it); --keep keeps the cluster

Exit status 1 if any check fails.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

from runtime.stop import RunStatus, StopKind  # noqa: E402

benchenv.prepare()

ROOT = Path(__file__).resolve().parent.parent
CHAOS_DIR = ROOT / "tests" / "chaos"
sys.path[:0] = [str(CHAOS_DIR), str(ROOT)]
from aimed_faults import LEDGER_MCP_COMMAND, register_ledger_mcp  # noqa: E402

PG_PORT = int(os.environ.get("CHAOS_PG_PORT", "5441"))
REDIS_PORT = int(os.environ.get("CHAOS_REDIS_PORT", "6391"))
CLUSTER = os.environ.get("CHAOS_PG_CLUSTER", "chaos")
LEASE_S = 4


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- services of our own ------------------------------------------------------------------------

def pg_version() -> str:
    return sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: [int(x) for x in v.split(".")])[-1]


def pg_ctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), CLUSTER, *args],
                          capture_output=True, text=True, check=check)


def pg_start() -> None:
    version = pg_version()
    listed = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True).stdout
    if not any(line.split()[:2] == [version, CLUSTER] for line in listed.splitlines()):
        subprocess.run(["pg_createcluster", version, CLUSTER, "--port", str(PG_PORT), "--",
                        "--auth-local=trust", "--auth-host=trust"], check=True, capture_output=True)
        conf = Path(f"/etc/postgresql/{version}/{CLUSTER}/postgresql.conf")
        with conf.open("a") as fh:
            fh.write("\nmax_connections = 300\nlisten_addresses = '127.0.0.1'\n")
    if pg_ctl("status", check=False).returncode != 0:
        pg_ctl("start")
    wait_for(lambda: subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", str(PG_PORT), "-q"]).returncode == 0,
             60, "PostgreSQL")


def pg_crash_restart() -> None:
    pg_ctl("restart", "-m", "immediate", check=False)


def pg_drop() -> None:
    subprocess.run(["pg_dropcluster", "--stop", pg_version(), CLUSTER], capture_output=True)


class Redis:
    def __init__(self, workdir: Path):
        self.pidfile = workdir / f"redis-{REDIS_PORT}.pid"
        self.workdir = workdir

    def start(self) -> None:
        subprocess.run(["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--daemonize", "yes",
                        "--save", "", "--appendonly", "no", "--pidfile", str(self.pidfile),
                        "--dir", str(self.workdir)], check=True, capture_output=True)
        wait_for(self.answers, 20, "Redis")

    def answers(self) -> bool:
        return subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "ping"], capture_output=True,
                              text=True).stdout.strip() == "PONG"

    def kill(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(self.pidfile.read_text().strip()), signal.SIGKILL)
        wait_for(lambda: not self.answers(), 10, "Redis to die")
        self.pidfile.unlink(missing_ok=True)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - the service is still coming up
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


# -- the product's processes ------------------------------------------------------------------

POOL_OPTIONS = {"threads": ["--pool", "threads", "-c", "4"], "prefork": ["--pool", "prefork", "-c", "2"],
                "gevent": ["--pool", "gevent", "-c", "8"]}


def pools_for(workers: int) -> dict[str, str]:
    """Each worker's pool: the last prefork (its children are killed too), the one before it gevent,
    the others threads."""
    pools = {f"worker{i}": "threads" for i in range(workers)}
    pools[f"worker{workers - 2}"], pools[f"worker{workers - 1}"] = "gevent", "prefork"
    return pools


class Processes:
    """Workers and beat, restarted when they die; deaths we did not cause are counted."""

    def __init__(self, env: dict, workdir: Path, workers: int):
        self.env, self.workdir = env, workdir
        self.pools = pools_for(workers)
        self.prefork = next(name for name, pool in self.pools.items() if pool == "prefork")
        self.generation = Counter()
        self.procs: dict[str, subprocess.Popen] = {}
        self.pool_of_pid: dict[int, str] = {}   # every worker process ever started (the ledger names pids)
        self.killed: set[int] = set()
        self.paused: set[int] = set()           # SIGSTOPped until resume(): not killed meanwhile, so they wake
        self.faults: Counter = Counter()        # (fault, pool): how often each pool was hit
        self.unexpected_deaths: list[str] = []
        self.started_at: dict[str, float] = {}
        for name in self.pools:
            self.start(name)
        self.start("beat")

    def command(self, name: str) -> list[str]:
        celery = [sys.executable, "-m", "celery", "-A", "agentops"]
        if name == "beat":
            return celery + ["beat", "-l", "WARNING", "-s", str(self.workdir / "beat-schedule")]
        return celery + ["worker", *POOL_OPTIONS[self.pools[name]], "-l", "WARNING", "--without-mingle",
                         "--without-gossip", "--hostname", f"chaos-{name}-{self.generation[name]}@%h"]

    def _next_worker(self, fault: str, spare: str) -> str:
        """The workers in turn (gevent first), not `spare`'s nor a paused one: every pool meets every fault."""
        workers = [n for n in self.procs if n.startswith("worker")
                   and not (spare and spare.startswith(f"chaos-{n}-{self.generation[n]}@"))]
        awake = [n for n in workers if self.procs[n].pid not in self.paused] or workers
        names = sorted(awake, key=lambda n: (self.pools[n] != "gevent", n))
        name = names[sum(n for (f, _), n in self.faults.items() if f == fault) % len(names)]
        self.faults[fault, self.pools[name]] += 1
        return name

    def pause_next_worker(self, spare: str = "") -> tuple[str, subprocess.Popen]:
        """SIGSTOP a worker (not `spare`'s): resume() wakes it after its leases have lapsed."""
        name = self._next_worker("SIGSTOP", spare)
        proc = self.procs[name]
        self.paused.add(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGSTOP)
        return name, proc

    def resume(self, proc: subprocess.Popen) -> None:
        self.paused.discard(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)

    def kill_prefork_child(self) -> int | None:
        """SIGKILL one pool child of the prefork worker (its parent starts another)."""
        proc = self.procs.get(self.prefork)
        # Not while its pool starts: Celery takes a child lost before it was ready for a pool that
        # cannot start ("Could not start worker processes") and exits, seen 3 times in 9 runs.
        if proc is None or proc.poll() is not None or time.monotonic() - self.started_at[self.prefork] < 8:
            return None
        try:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except OSError:
            return None
        if not children:
            return None
        child = int(random.choice(children))
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return child

    def start(self, name: str) -> None:
        self.generation[name] += 1
        out = open(self.workdir / f"{name}.log", "a")  # noqa: SIM115 - the worker process writes it
        self.started_at[name] = time.monotonic()
        self.procs[name] = subprocess.Popen(self.command(name), cwd=ROOT, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        if name in self.pools:
            self.pool_of_pid[self.procs[name].pid] = self.pools[name]

    def kill_next_worker(self, spare: str = "") -> str:
        """SIGKILL a worker, but not the one named in `spare` (a lease owner we want alive)."""
        name = self._next_worker("SIGKILL", spare)
        self._kill(self.procs[name])
        return name

    def kill_pid(self, pid: int, fault: str) -> str:
        """SIGKILL the worker process `pid` (a worker, or a prefork worker's child), counted as `fault`
        against its pool: which process it was."""
        for name, proc in self.procs.items():
            if proc.pid == pid and name in self.pools:
                self.faults[fault, self.pools[name]] += 1
                self._kill(proc)
                return name
        self.faults[fault, self.pool_of({"parent": _parent_of(pid)})] += 1
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return f"a child of {self.prefork}"

    def _kill(self, proc: subprocess.Popen) -> None:
        self.killed.add(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def pool_of(self, record: dict) -> str:
        """The pool of the worker that made a ledger record (its pid, or a prefork child's parent)."""
        return self.pool_of_pid.get(record.get("pid"), self.pool_of_pid.get(record.get("parent"), "other"))

    def supervise(self) -> None:
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None:
                if proc.pid not in self.killed:
                    self.unexpected_deaths.append(f"{name} (exit {proc.returncode})")
                    log(f"{name} died by itself (exit {proc.returncode}); restarting")
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace").splitlines()[-25:]
                    log("its last lines:\n  " + "\n  ".join(tail))
                self.start(name)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                self.resume(proc)   # a stopped process would not see the SIGTERM
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


# -- the experiment ---------------------------------------------------------------------------

def plan_for(i: int) -> tuple[list, dict]:
    if i % 2 == 0:
        steps = [{"id": "a", "capability": "ledger_idempotent", "arguments": {"item": f"{i}-a"}},
                 {"id": "b", "capability": "ledger_lookup", "arguments": {"item": f"{i}-b"}},
                 {"id": "c", "capability": "ledger_idempotent", "arguments": {"item": f"{i}-c"}}]
        return steps, {"capability": "ledger_idempotent", "path": "item", "equals": f"{i}-c"}
    steps = [{"id": "a", "capability": "ledger_lookup", "arguments": {"item": f"{i}-a"}},
             {"id": "b", "capability": "ledger_lookup", "arguments": {"item": f"{i}-b"}}]
    if i % 4 == 1:
        # The seed's central case: a non-idempotent send whose effect lands after its timeout.
        steps.insert(0, {"id": "l", "capability": "ledger_late_fenced", "arguments": {"item": f"{i}-l", "seconds": 3}})
    return steps, {"capability": "ledger_lookup", "path": "item", "equals": f"{i}-b"}


BUDGETS = {"deadline_s": 1800, "max_iterations": 60, "max_tool_calls": 60, "max_retries": 30}


def retrying(fn, *args, attempts: int = 60, **kwargs):
    """The harness itself rides out the outages it causes."""
    from django.db import InterfaceError, OperationalError, close_old_connections

    for _ in range(attempts):
        try:
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError):
            close_old_connections()
            from django.db import connection

            connection.close()
            time.sleep(0.5)
    return fn(*args, **kwargs)


class ChatProvider:
    """A chat-completions server of our own (OpenAI-compatible) for the llm-planned runs: it answers
    each planner call after a think of 0.3-1.5 s (SIGKILLs land inside some), with a one-step plan
    for the item named in the run's goal, and counts the calls and the tokens it served."""

    USAGE = {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}

    def __init__(self) -> None:
        import re
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls = 0
        self.served_tokens = 0
        self.lock = threading.Lock()
        provider, item = self, re.compile(r"llm-\d+")

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
                with provider.lock:
                    provider.calls += 1
                time.sleep(random.uniform(0.3, 1.5))
                found = item.search(body)
                plan = {"steps": [{"id": "s1", "capability": "ledger_idempotent",
                                   "arguments": {"item": found.group(0) if found else "llm-unknown"}}]}
                answer = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "usage": provider.USAGE,
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": json.dumps(plan)}}]})
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer.encode())
                except OSError:
                    return   # its caller died meanwhile: nothing served
                with provider.lock:
                    provider.served_tokens += provider.USAGE["total_tokens"]

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


LLM_EVERY = 8   # one run in this many is planned by the llm planner through ChatProvider


def start_llm_run(user, i: int):
    from runs import services

    return services.run_start(owner=user, goal=f"chaos: write item llm-{i}", planner="llm",
                              planner_config={"endpoint": "chaos", "model": "m", "max_tokens": 256,
                                              "price_per_1k_prompt_tokens": 0.01,
                                              "price_per_1k_completion_tokens": 0.03},
                              completion={"capability": "ledger_idempotent", "path": "item", "equals": f"llm-{i}"},
                              budgets=BUDGETS)


def start_run(user, steps, completion):
    from runs import services

    return services.run_start(owner=user, goal="chaos", planner="scripted", planner_config={"plans": [steps]},
                              completion=completion, budgets=BUDGETS)


def concurrent_approvals(user, approval_id: int, n: int = 100) -> dict:
    """n threads decide the same approval at once: exactly one may win."""
    from django.db import connection

    from core.errors import ServiceError
    from runs import services
    from runs.models import Approval

    found = Approval.objects.get(pk=approval_id)
    bound_hash = found.arguments_hash or found.plan_hash
    barrier = threading.Barrier(n)
    outcomes: list[str] = []
    lock = threading.Lock()

    def decide():
        try:
            barrier.wait()
            services.approval_decide(approval_id=approval_id, user=user, approve=True, expected_hash=bound_hash,
                                     channel="api")
            result = "won"
        except ServiceError:
            result = "refused"
        except Exception as exc:  # noqa: BLE001 - reported as a figure
            result = f"error:{type(exc).__name__}"
        finally:
            connection.close()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=decide) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dict(Counter(outcomes))


def wait_supervised(procs: Processes, predicate, timeout: float):
    """predicate()'s first truthy answer within timeout (None after it), restarting dead processes meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = retrying(predicate)
        if found:
            return found
        procs.supervise()
        time.sleep(0.3)
    return None


def all_finished(procs: Processes, run_ids: list[int], deadline: float) -> None:
    """Wait until every run has finished, or the deadline (monotonic) has passed."""
    from runs.models import Run

    wait_supervised(procs, lambda: not Run.objects.filter(pk__in=run_ids).exclude(
        status__in=[s for s in RunStatus if s.is_terminal]).exists(), max(0.0, deadline - time.monotonic()))


def kill_during_mcp_calls(procs: Processes, user, ledger: Path, count: int) -> tuple[list[int], list[str]]:
    """Runs whose one call goes to the ledger's stdio MCP server (3 s); once a call has arrived, SIGKILL the
    worker process that sent it (the server's parent). Another worker re-sends it by its key."""
    from chaos_ledger import read_ledger

    run_ids, items = [], []
    for i in range(count):
        item = f"mcp-{i}"
        run_ids.append(retrying(start_run, user, [{"capability": "ledger_mcp", "arguments": {"item": item, "seconds": 3}}],
                                {"capability": "ledger_mcp", "path": "item", "equals": item}).pk)
        items.append(item)
        arrived = wait_supervised(procs, lambda item=item: [r for r in read_ledger(str(ledger))
                                                            if r["kind"] == "received" and r["item"] == item], 90)
        if arrived:
            log(f"SIGKILL {procs.kill_pid(arrived[0]['parent'], 'SIGKILL in an MCP call')} during its stdio MCP call")
    return run_ids, items


def kill_web_inside_approval_posts(procs: Processes, user, env: dict, count: int) -> tuple[list[int], list[str], int]:
    """Runs that ask an approval; the web process is SIGKILLed while its approve POST waits inside its
    transaction (a row lock held from another connection), then the operator decides again. Returns the
    runs, their items, and how many killed POSTs decided anything (0: a decision is all or nothing)."""
    from aimed_faults import RowLocked, answers, post_quietly, start_web

    from core.tokens import token_create
    from runs import services
    from runs.models import Approval

    run_ids, items, decided_by_killed = [], [], 0
    _, key = token_create(user=user, name="chaos web kills")
    for i in range(count):
        item = f"web-{i}"
        run = retrying(start_run, user, [{"capability": "ledger_approved", "arguments": {"item": item}}],
                       {"capability": "ledger_approved", "path": "item", "equals": item})
        run_ids.append(run.pk)
        items.append(item)
        approval = wait_supervised(procs, lambda run=run: Approval.objects.filter(run=run, state="pending").first(), 120)
        if approval is None:
            log(f"no approval request for {item}")
            continue
        web, url = start_web(env)
        if not wait_supervised(procs, lambda url=url: answers(f"{url}/healthz"), 90):
            log("the web process did not answer")
        with RowLocked(run.pk):
            posted = threading.Thread(target=post_quietly, daemon=True, args=(
                f"{url}/api/approvals/{approval.pk}/decide/", key,
                {"decision": "approve", "expected_hash": approval.arguments_hash or approval.plan_hash}))
            posted.start()
            time.sleep(2)   # the POST now waits inside its transaction
            web.kill()
            web.wait(timeout=10)
        log(f"SIGKILL the web process inside an approval POST ({item})")
        approval.refresh_from_db()
        if approval.state != "pending":
            decided_by_killed += 1
            continue
        # The operator decides again (a restarted web process): the run resumes once.
        retrying(services.approval_decide, approval_id=approval.pk, user=user, approve=True,
                 expected_hash=approval.arguments_hash or approval.plan_hash, channel="api")
    return run_ids, items, decided_by_killed


def backlog_figures(workdir: Path, runs: int) -> dict:
    """bench/backlog.py on this PostgreSQL cluster and Redis (a database of each of its own): `runs` runs
    queued at once through 3 workers x 8 threads with the production lease, no faults."""
    subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "postgres", "-qc",
                    "DROP DATABASE IF EXISTS chaos_backlog"], check=True, capture_output=True)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "postgres", "chaos_backlog"], check=True)
    env = {**os.environ, "DATABASE_URL": f"postgres://postgres@127.0.0.1:{PG_PORT}/chaos_backlog",
           "CELERY_BROKER_URL": f"redis://127.0.0.1:{REDIS_PORT}/1", "AGENTOPS_VAR_DIR": str(workdir / "backlog-var")}
    env.pop("AGENTOPS_RUN_LEASE_SECONDS", None)   # backlog.py gives its workers the production lease
    log(f"backlog: {runs} runs queued at once (bench/backlog.py)")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "backlog.py"), "--runs", str(runs), "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    try:
        figures = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"failures": [f"bench/backlog.py exited {done.returncode}: {done.stderr[-1500:]}"]}
    return {key: figures[key] for key in ("runs", "runs_completed", "resent_tasks", "max_queue_length",
                                          "scheduler_tasks_sent", "drain_s", "last_run_wait_s", "failures")}


def experiment(args) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="agentops-chaos-"))
    ledger = workdir / "ledger.jsonl"
    redis = Redis(workdir)
    log(f"workdir {workdir}; PostgreSQL :{PG_PORT}, Redis :{REDIS_PORT}")
    pg_start()
    redis.start()
    subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "postgres", "-qc",
                    "DROP DATABASE IF EXISTS chaos"], check=True, capture_output=True)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "postgres", "chaos"], check=True)
    provider = ChatProvider()
    env = {**os.environ, "DATABASE_URL": f"postgres://postgres@127.0.0.1:{PG_PORT}/chaos",
           "AGENTOPS_LLM_ENDPOINTS": json.dumps({"chaos": {"base_url": provider.base_url}}),
           "CELERY_BROKER_URL": f"redis://127.0.0.1:{REDIS_PORT}/0", "AGENTOPS_RUN_LEASE_SECONDS": str(LEASE_S),
           "AGENTOPS_VAR_DIR": str(workdir / "var"), "CHAOS_LEDGER": str(ledger),
           "AGENTOPS_CAPABILITY_MODULES": "capabilities.demo.functions,chaos_ledger",
           "AGENTOPS_MCP_STDIO_COMMANDS": LEDGER_MCP_COMMAND,
           "PYTHONPATH": os.pathsep.join([str(CHAOS_DIR), str(ROOT)]), "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    benchenv.start_django(ROOT)
    from django.contrib.auth.models import User

    from capabilities.kinds.python.sync import python_capabilities_sync
    from runs.models import Approval, Run

    python_capabilities_sync(modules=("chaos_ledger",))
    user, _ = User.objects.get_or_create(username="chaos", defaults={"is_superuser": True, "is_staff": True})
    register_ledger_mcp(user)
    procs = Processes(env, workdir, args.workers)
    figures: dict = {"runs": args.runs, "workers": args.workers, "lease_s": LEASE_S}
    began = time.monotonic()
    run_ids: list[int] = []
    try:
        slow = start_run(user, [{"capability": "ledger_slow", "arguments": {"item": "slow", "seconds": LEASE_S * 2.5}}],
                         {"capability": "ledger_slow", "path": "item", "equals": "slow"})
        approved = start_run(user, [{"capability": "ledger_approved", "arguments": {"item": "approved-in-outage"}}],
                             {"capability": "ledger_approved", "path": "item", "equals": "approved-in-outage"})
        contested = start_run(user, [{"capability": "ledger_approved", "arguments": {"item": "contested"}}],
                              {"capability": "ledger_approved", "path": "item", "equals": "contested"})
        run_ids += [slow.pk, approved.pk, contested.pk]
        llm_ids: list[int] = []
        started, next_run = time.monotonic(), 0
        kills = redis_restarts = pg_restarts = 0
        redis_at = [args.duration * f for f in ((0.25, 0.55, 0.85) if args.full else (0.3, 0.75))]
        pg_at = [args.duration * f for f in ((0.4, 0.7, 0.95) if args.full else (0.5, 0.9))]
        next_kill = 2.0
        pause_at = [args.duration * f for f in ((0.15, 0.45, 0.65, 0.8) if args.full else (0.2, 0.6))]
        paused: list[tuple[float, subprocess.Popen]] = []   # (resume at, worker)
        pauses = child_kills = 0
        next_child_kill = 5.0
        decided_in_outage = False
        while time.monotonic() - started < args.duration or next_run < args.runs:
            elapsed = time.monotonic() - started
            # Runs arrive over the first 80 % of the chaos window.
            due = min(args.runs, int(args.runs * min(1.0, elapsed / (args.duration * 0.8))) + 1)
            while next_run < due:
                steps, completion = plan_for(next_run)
                try:
                    if next_run % LLM_EVERY == LLM_EVERY - 1:
                        llm_ids.append(retrying(start_llm_run, user, next_run).pk)
                        run_ids.append(llm_ids[-1])
                    else:
                        run_ids.append(retrying(start_run, user, steps, completion).pk)
                    next_run += 1
                except Exception as exc:  # noqa: BLE001
                    log(f"could not start a run: {exc}")
                    break
            if elapsed >= next_kill:
                # The worker inside the long call is spared: that call must run exactly once.
                spare = retrying(lambda: Run.objects.filter(pk=slow.pk).values_list("lease_owner", flat=True).get())
                log(f"SIGKILL {procs.kill_next_worker(spare)}")
                kills += 1
                next_kill = elapsed + random.uniform(2, 6)
            if pause_at and elapsed >= pause_at[0]:
                pause_at.pop(0)
                spare = retrying(lambda: Run.objects.filter(pk=slow.pk).values_list("lease_owner", flat=True).get())
                name, proc = procs.pause_next_worker(spare)
                paused.append((elapsed + LEASE_S * 2.5, proc))   # past its lease: its runs are taken over
                pauses += 1
                log(f"SIGSTOP {name} for {LEASE_S * 2.5:g} s")
            for resume_at, proc in [p for p in paused if elapsed >= p[0]]:
                paused.remove((resume_at, proc))
                procs.resume(proc)
                log(f"SIGCONT pid {proc.pid}")
            if elapsed >= next_child_kill:
                child = procs.kill_prefork_child()
                if child:
                    child_kills += 1
                    log(f"SIGKILL prefork child {child}")
                next_child_kill = elapsed + random.uniform(4, 8)
            if redis_at and elapsed >= redis_at[0]:
                redis_at.pop(0)
                log("Redis: crash")
                redis.kill()
                if not decided_in_outage:
                    approval = retrying(lambda: Approval.objects.filter(run_id=approved.pk, state="pending").first())
                    if approval is not None:
                        from runs import services

                        retrying(services.approval_decide, approval_id=approval.pk, user=user, approve=True,
                                 expected_hash=approval.arguments_hash or approval.plan_hash, channel="api")
                        decided_in_outage = True
                        log("approval decided while the broker is down")
                time.sleep(2)
                redis.start()
                redis_restarts += 1
                log("Redis: back")
            if pg_at and elapsed >= pg_at[0]:
                pg_at.pop(0)
                if pg_restarts == 0:
                    # Down longer than the lease: every lease lapses while nobody can write.
                    log(f"PostgreSQL: down for {LEASE_S * 1.5:g} s")
                    pg_ctl("stop", "-m", "immediate", check=False)
                    time.sleep(LEASE_S * 1.5)
                    pg_ctl("start", check=False)
                else:
                    log("PostgreSQL: crash restart")
                    pg_crash_restart()
                pg_restarts += 1
            procs.supervise()
            time.sleep(0.2)
        for _, proc in paused:
            procs.resume(proc)
        log("chaos over; 100 concurrent approvals, then waiting for every run to finish")
        contested_approval = wait_supervised(
            procs, lambda: Approval.objects.filter(run_id=contested.pk, state="pending").first(), 60)
        figures["concurrent_approvals"] = (concurrent_approvals(user, contested_approval.pk)
                                           if contested_approval else {"no approval request": 1})
        if not decided_in_outage:
            figures["approval_in_outage"] = "never requested in time"
        settle_deadline = time.monotonic() + args.settle
        all_finished(procs, run_ids, settle_deadline)
        # Aimed at a quiet moment: every run has finished (or the settle time is spent), so each call and
        # approval request comes at once and the kill lands where it is aimed.
        log(f"aimed faults: {args.mcp_kills} workers killed in a stdio MCP call, "
            f"{args.web_kills} web processes killed inside an approval POST")
        mcp_runs, mcp_items = kill_during_mcp_calls(procs, user, ledger, args.mcp_kills)
        web_runs, web_items, decided_by_killed = kill_web_inside_approval_posts(procs, user, env, args.web_kills)
        run_ids += mcp_runs + web_runs
        all_finished(procs, run_ids, max(settle_deadline, time.monotonic() + 120))
        figures.update(elapsed_s=round(time.monotonic() - began), worker_kills=kills, redis_restarts=redis_restarts,
                       pg_restarts=pg_restarts, worker_pauses=pauses, prefork_child_kills=child_kills,
                       unexpected_process_deaths=procs.unexpected_deaths,
                       approval_decided_in_outage=decided_in_outage)
    finally:
        procs.stop()
    figures.update(check(run_ids, ledger, slow.pk, approved.pk, contested.pk))
    figures.update(pool_figures(procs, ledger))
    figures.update(aimed_figures(ledger, mcp_items, web_runs, web_items, decided_by_killed))
    figures.update(planner_figures(llm_ids, provider))
    if args.backlog:
        figures["backlog"] = backlog_figures(workdir, args.backlog)
    figures["workdir"] = str(workdir)
    if not args.keep:
        redis.kill()
        pg_drop()
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


def check(run_ids, ledger: Path, slow_id: int, approved_id: int, contested_id: int) -> dict:
    from chaos_ledger import read_ledger
    from django.db.models import Count

    from core.models import AuditEvent
    from runs.models import Attempt, Run

    runs = Run.objects.filter(pk__in=run_ids)
    statuses = Counter(runs.values_list("status", flat=True))
    reasons = Counter(r for r in runs.values_list("stop_reason", flat=True) if r)
    records = read_ledger(str(ledger))
    execs = [r for r in records if r["kind"] == "exec"]
    # Per item, as a person would count what reached them: every step writes an item of its own.
    effects = Counter((r["capability"], r["item"]) for r in records if r["kind"] == "effect")
    duplicates = {f"{c} {item}": n for (c, item), n in effects.items() if n > 1}
    late = {item: n for (c, item), n in effects.items() if c == "ledger_late_fenced"}
    spans = set(Attempt.objects.filter(run__in=run_ids).values_list("span_id", flat=True))
    missing = [e for e in execs if e["span"] not in spans]
    slow_key = Attempt.objects.filter(run_id=slow_id).exclude(idempotency_key="").values_list(
        "idempotency_key", flat=True).first()
    slow_execs = sum(1 for e in execs if e["capability"] == "ledger_slow")
    in_flight_left = Attempt.objects.filter(run__in=run_ids, in_flight=True).count()
    unknown = Attempt.objects.filter(run__in=run_ids, kind="resolve").count()
    attempts_per_key = Attempt.objects.filter(run__in=run_ids).exclude(idempotency_key="").values(
        "idempotency_key").annotate(n=Count("id")).filter(n__gt=1).count()
    contested_changes = AuditEvent.objects.filter(action="step.approved", details__run=contested_id).count()
    return {
        "runs_started": len(run_ids), "statuses": dict(statuses), "stop_reasons": dict(reasons),
        "not_finished": statuses.get("queued", 0) + statuses.get("running", 0) + statuses.get("awaiting_approval", 0),
        "internal_error": reasons.get(StopKind.INTERNAL_ERROR, 0),
        "not_completed_examples": [f"run {pk} ({planner}): {reason}: {detail[:300]}" for pk, planner, reason, detail in
                                   runs.exclude(status=RunStatus.COMPLETED).values_list("pk", "planner", "stop_reason",
                                                                                "stop_detail")[:5]],
        "executions": len(execs), "effects": sum(effects.values()), "duplicate_effects": duplicates,
        "late_landing_items": len(late), "late_landing_effects": sum(late.values()),
        "executions_missing_from_trace": len(missing), "missing_examples": missing[:3],
        "slow_call_executions": slow_execs, "slow_call_key": slow_key,
        "slow_run": Run.objects.filter(pk=slow_id).values_list("status", flat=True).first(),
        "approved_in_outage_run": Run.objects.filter(pk=approved_id).values_list("status", flat=True).first(),
        "contested_run": Run.objects.filter(pk=contested_id).values_list("status", flat=True).first(),
        "contested_audit_rows": contested_changes,
        "intents_left_in_flight": in_flight_left, "resolve_attempts": unknown,
        "keys_with_several_attempts": attempts_per_key,
    }


def pool_figures(procs: Processes, ledger: Path) -> dict:
    """Per pool (threads, gevent, prefork): the faults it met and the calls it executed (ledger)."""
    from chaos_ledger import read_ledger

    executions = Counter(procs.pool_of(r) for r in read_ledger(str(ledger))
                         if r["kind"] == "exec" and r["capability"] != "ledger_mcp_write")
    return {"pools": procs.pools, "executions_by_pool": dict(executions),
            "faults_by_pool": {f"{fault} {pool}": n for (fault, pool), n in sorted(procs.faults.items())}}


def aimed_figures(ledger: Path, mcp_items: list[str], web_runs: list[int], web_items: list[str],
                  decided_by_killed: int) -> dict:
    """Effects per item of the runs whose worker was killed in an MCP call, and of the approvals whose web
    process was killed inside the POST (with the decisions recorded for them: one per approval)."""
    from chaos_ledger import effects_by_item

    from core.models import AuditEvent

    mcp, approved = effects_by_item(str(ledger), "ledger_mcp_write"), effects_by_item(str(ledger), "ledger_approved")
    return {"mcp_stdio_kills": len(mcp_items), "mcp_stdio_effects": {i: mcp.get(i, 0) for i in mcp_items},
            "web_kills": len(web_items), "web_kill_posts_that_decided": decided_by_killed,
            "web_kill_decisions": AuditEvent.objects.filter(action="step.approved",
                                                            details__run__in=web_runs).count(),
            "web_kill_effects": {i: approved.get(i, 0) for i in web_items}}


def planner_figures(llm_ids: list[int], provider: ChatProvider) -> dict:
    """Tokens the runs counted against what the provider served: a lost call is counted once, at the
    provider's answer if it reached the worker, else at its ceiling marked as an estimate."""
    from runs.models import PlannerCall, Run

    runs = list(Run.objects.filter(pk__in=llm_ids))
    tokens, estimated = sum(r.tokens for r in runs), sum(r.tokens_estimated for r in runs)
    return {"llm_runs": len(llm_ids), "provider_calls": provider.calls,
            "planner_calls_recorded": PlannerCall.objects.filter(run__in=llm_ids).count(),
            "provider_served_tokens": provider.served_tokens, "tokens_counted": tokens,
            "tokens_counted_exactly": tokens - estimated, "tokens_estimated": estimated,
            "lost_planner_calls": PlannerCall.objects.filter(run__in=llm_ids, lost=True).count()}


def verdict(f: dict) -> list[str]:
    failures = []
    if f["not_finished"]:
        failures.append(f"{f['not_finished']} runs lost or stranded")
    if f["internal_error"]:
        failures.append(f"{f['internal_error']} runs stopped by an internal error")
    if f["duplicate_effects"]:
        failures.append(f"duplicate effects: {f['duplicate_effects']}")
    if f["executions_missing_from_trace"]:
        failures.append(f"{f['executions_missing_from_trace']} executions missing from the trace")
    if f["slow_call_executions"] != 1 or f["slow_run"] != RunStatus.COMPLETED:
        failures.append(f"the call longer than the lease ran {f['slow_call_executions']} times ({f['slow_run']})")
    if not f.get("approval_decided_in_outage") or f["approved_in_outage_run"] != RunStatus.COMPLETED:
        failures.append(f"the approval decided in a broker outage: run {f['approved_in_outage_run']}")
    wins = f["concurrent_approvals"].get("won", 0)
    if wins != 1 or f["contested_audit_rows"] != 1 or f["contested_run"] != RunStatus.COMPLETED:
        failures.append(f"concurrent approvals: {f['concurrent_approvals']}, run {f['contested_run']}")
    # Every call the provider saw was written ahead; a record beyond them is a call its worker died
    # before sending, and only a lost (counted-as-estimate) call may be one.
    if not f["provider_calls"] <= f["planner_calls_recorded"] <= f["provider_calls"] + f["lost_planner_calls"]:
        failures.append(f"the provider was called {f['provider_calls']} times, {f['planner_calls_recorded']} "
                        f"recorded, {f['lost_planner_calls']} lost")
    # Every served answer is counted: exactly, or (its worker died before recording it) within an estimate.
    if not f["tokens_counted_exactly"] <= f["provider_served_tokens"] <= f["tokens_counted"]:
        failures.append(f"tokens: served {f['provider_served_tokens']}, counted {f['tokens_counted']} "
                        f"({f['tokens_estimated']} estimated)")
    if f["late_landing_effects"] != f["late_landing_items"]:
        failures.append(f"late landings: {f['late_landing_effects']} effects for {f['late_landing_items']} items")
    if f["unexpected_process_deaths"]:
        failures.append(f"processes died by themselves: {f['unexpected_process_deaths']}")
    completed = f["statuses"].get(RunStatus.COMPLETED, 0)
    if completed != f["runs_started"]:
        failures.append(f"only {completed} of {f['runs_started']} runs completed: {f['stop_reasons']}")
    idle = [pool for pool in set(f["pools"].values()) if not f["executions_by_pool"].get(pool)]
    if idle:
        failures.append(f"no call executed by the {', '.join(sorted(idle))} pool")
    if any(n != 1 for n in [*f["mcp_stdio_effects"].values(), *f["web_kill_effects"].values()]):
        failures.append(f"aimed kills: effects {f['mcp_stdio_effects']} (MCP), {f['web_kill_effects']} (web)")
    if f["web_kill_posts_that_decided"] or f["web_kill_decisions"] != f["web_kills"]:
        failures.append(f"web kills: {f['web_kill_posts_that_decided']} killed POSTs decided, "
                        f"{f['web_kill_decisions']} decisions for {f['web_kills']} approvals")
    failures += [f"backlog: {failure}" for failure in f.get("backlog", {}).get("failures", [])]
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of chaos")
    parser.add_argument("--workers", type=int, default=3, help="at least 3: threads..., gevent, prefork")
    parser.add_argument("--mcp-kills", type=int, default=3, help="workers SIGKILLed inside a stdio MCP call")
    parser.add_argument("--web-kills", type=int, default=3, help="web processes SIGKILLed inside an approval POST")
    parser.add_argument("--backlog", type=int, default=2000, help="runs queued at once by bench/backlog.py (0: none)")
    parser.add_argument("--settle", type=float, default=300.0, help="seconds to wait for runs to finish after")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the cluster, Redis and the workdir")
    args = parser.parse_args()
    if args.workers < 3:
        parser.error("--workers must be at least 3 (one gevent and one prefork worker among them)")
    args.full = args.runs >= 200
    figures = experiment(args)
    failures = verdict(figures)
    figures["failures"] = failures
    if args.json:
        print(json.dumps(figures, default=str))
    else:
        for key, value in figures.items():
            for name, figure in (value.items() if key == "backlog" else [("", value)]):
                print(f"{(key + ' ' + name).strip():32} {figure}")
        print("PASSED" if not failures else "FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
