"""A real stack for the gateway: a Celery worker and uvicorn serving agentops.asgi on loopback."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.append(str(ROOT / "tests" / "chaos"))   # chaos_ledger (after ours: its conftest is not ours)
MODULES = "capabilities.demo.functions,gw_capabilities,nul_capabilities"




def root_conftest():
    """tests/conftest.py as a module (its helpers are plain functions; importlib mode has no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "tests" / "conftest.py")
    root = sys.modules.get("root_conftest_for_gateway")
    if root is None:
        root = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(root)
        sys.modules["root_conftest_for_gateway"] = root
    return root


def stack_env() -> dict[str, str]:
    env = root_conftest().worker_env()
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")])
    env["AGENTOPS_CAPABILITY_MODULES"] = MODULES
    env["AGENTOPS_GATEWAY_APPROVAL_HOLD_S"] = "2"
    env["AGENTOPS_GATEWAY_IDLE_TIMEOUT_S"] = "30"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", name="wait_until")
def _wait_until():
    return root_conftest().wait_until


def start_web(env: dict[str, str], port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "uvicorn", "agentops.asgi:application", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env)


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def running_stack(wait_until, env: dict[str, str]):
    """A Celery worker and uvicorn on a free port (env: stack_env(), read with the database unblocked)."""
    port = _free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads", "--concurrency", "4",
         "--loglevel", "WARNING", "--without-mingle", "--without-gossip", "--hostname", f"gw-{os.getpid()}-{port}@%h"],
        cwd=ROOT, env=env)
    web = start_web(env, port)
    try:
        wait_until(lambda: port_open(port), timeout=60, message="uvicorn")
        yield type("Stack", (), {"url": f"http://127.0.0.1:{port}", "mcp": f"http://127.0.0.1:{port}/mcp/",
                                 "worker": worker, "web": web, "env": env})
    finally:
        for proc in (web, worker):
            proc.terminate()
        for proc in (web, worker):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")   # its worker must not outlive the gateway's tests: others count on theirs
def gateway_stack(django_db_setup, django_db_blocker, wait_until):
    with django_db_blocker.unblock():
        env = stack_env()
    with running_stack(wait_until, env) as stack:
        yield stack


@pytest.fixture
def gw_capabilities(transactional_db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync(modules=("capabilities.demo.functions", "gw_capabilities"))


@pytest.fixture
def agent_token(request, gw_capabilities, operator):
    """Make an agent with create_agent, as the issue's checks do; returns (agent, token)."""
    from io import StringIO

    from django.core.management import call_command

    from gateway.models import Agent

    def make(name="tester", capabilities=("gw_echo", "gw_flaky", "gw_approved"), budgets=None, completion=None):
        out = StringIO()
        args = [name, "--owner", operator.username]
        for cap in capabilities:
            args += ["--capability", cap]
        if budgets:
            import json

            args += ["--budgets", json.dumps(budgets)]
        if completion:
            import json

            args += ["--completion", json.dumps(completion)]
        call_command("create_agent", *args, stdout=out)
        return Agent.objects.get(name=name), out.getvalue().strip().splitlines()[-1]

    yield make
    if any(name.endswith("_stack") for name in request.fixturenames):
        sessions_settled()


def sessions_settled(timeout: float = 30) -> None:
    """Wait (a while, not failing) until every session has ended and its run stopped: a client closes
    its session as a stack test ends, and the web process and a worker then stop its run. The test's
    database flush must not race those writes (a TRUNCATE among them deadlocks on PostgreSQL)."""
    import time

    from django.db.models import Q

    from gateway.models import GatewaySession

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and GatewaySession.objects.filter(
            Q(ended_at__isnull=True) | Q(run__stop_reason="")).exists():
        time.sleep(0.1)
