#!/usr/bin/env python3
"""Set up and run AgentOps from a fresh clone with nothing but Python 3.11.

    python3 agentops/dev.py up     # install, migrate, demo data, web + worker
    python3 agentops/dev.py test   # install test tools, run the checks and the whole suite (in parallel)
    python3 agentops/dev.py check  # the checks alone: ruff, mypy against its baseline, the docs site
    python3 agentops/dev.py manage COMMAND ...  # a manage.py command on the instance `up` runs

`test` with arguments passes them to pytest and skips the checks.

Standard library only: it runs before any dependency is installed.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"


def find_python311() -> str:
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if not found:
        sys.exit("AgentOps needs Python 3.11 (python3.11 was not found on PATH).")
    return found


def run(*cmd: str, **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, **kw)


def ensure_venv(extras: str) -> None:
    if not PY.exists():
        run(find_python311(), "-m", "venv", str(VENV))
        run(str(PY), "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    # Reinstall only when pyproject.toml or the extras changed.
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    stamp = VENV / f".installed-{extras or 'base'}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    target = f".[{extras}]" if extras else "."
    run(str(PY), "-m", "pip", "install", "--quiet", "-e", target)
    stamp.write_text(digest)


# The LangGraph client's environment: its MCP adapters need mcp<2, which AgentOps's own venv cannot hold.
CLIENT_VENV = ROOT / ".venv-langgraph"
CLIENT_REQUIREMENTS = ROOT / "tests" / "gateway" / "langgraph-requirements.txt"


def ensure_client_venv() -> None:
    """Make .venv-langgraph for the gateway's LangGraph test; without it that test is skipped, saying why."""
    python = CLIENT_VENV / "bin" / "python"
    digest = hashlib.sha256(CLIENT_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = CLIENT_VENV / ".installed"
    if stamp.exists() and stamp.read_text() == digest:
        return
    try:
        if not python.exists():
            run(find_python311(), "-m", "venv", str(CLIENT_VENV))
        run(str(python), "-m", "pip", "install", "--quiet", "-r", str(CLIENT_REQUIREMENTS))
    except subprocess.CalledProcessError:
        print("Could not install the LangGraph client (.venv-langgraph): its test will be skipped.", flush=True)
        return
    stamp.write_text(digest)


def ensure_chromium() -> None:
    """Browser tests drive Debian's Chromium; install it when we may."""
    if Path("/usr/bin/chromium").exists():
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        run("apt-get", "update", "-qq")
        run("apt-get", "install", "-y", "-qq", "chromium", env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    else:
        print("Chromium is missing: browser tests will be skipped (apt-get install chromium).", flush=True)


def manage(*args: str, **kw) -> None:
    run(str(PY), "manage.py", *args, **kw)


def local_environment() -> None:
    """The embedded default is a local install for one person: DEBUG on unless told otherwise
    (so its SECRET_KEY is var/secret_key, generated once). With DATABASE_URL set (a real
    deployment) the setting's default (off) holds, and SECRET_KEY must be given."""
    if not os.environ.get("DATABASE_URL"):
        os.environ.setdefault("DEBUG", "true")


def manage_command(args: list[str]) -> int:
    """`manage.py ARGS` in the venv and the environment `up` gives the web and the worker."""
    ensure_venv("")
    local_environment()
    return subprocess.run([str(PY), "manage.py", *args], cwd=ROOT).returncode


def up(args: list[str]) -> int:
    ensure_venv("")
    local_environment()
    manage("migrate", "--noinput")
    manage("collectstatic", "--noinput", "--verbosity", "0")
    manage("seed_demo")
    manage("seed_demo_evaluations")
    os.execv(str(PY), [str(PY), "manage.py", "serve", *args])
    return 0


def test_processes() -> int:
    """pytest-xdist workers: one per core, at most 4 (each keeps a Celery worker of its own)."""
    return max(1, min(4, os.cpu_count() or 1))


def parallel(args: list[str]) -> list[str]:
    """`-n N --dist loadfile` unless the arguments choose (-n, -p no:xdist) or need one process (-s).

    loadfile keeps a module's tests on one worker: its module-scoped servers start once, and
    the few modules that hold a fixed resource (a Redis database number, a port) hold it alone.
    Every worker has its own test database, var/ folder, broker queue and ports (agentops.pytest_env,
    tests/conftest.py)."""
    chosen = any(a in ("-n", "--numprocesses", "no:xdist", "-s", "--capture=no") or a.startswith(("-n", "--numprocesses="))
                 for a in args)
    n = test_processes()
    return args if chosen or n == 1 else ["-n", str(n), "--dist", "loadfile", *args]


def check(args: list[str]) -> int:
    """What CI checks besides the tests: ruff, mypy against tools/mypy-baseline.json, `mkdocs build --strict`."""
    ensure_venv("test")
    for cmd in ([str(PY), "-m", "ruff", "check", "."],
                [str(PY), "tools/mypy_baseline.py"],
                [str(PY), "-m", "mkdocs", "build", "--strict", "--quiet"]):
        print("+", " ".join(cmd), flush=True)
        status = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}).returncode
        if status:
            return status
    return 0


def test(args: list[str]) -> int:
    if not args and (status := check([])):
        return status
    ensure_venv("test")
    ensure_client_venv()
    ensure_chromium()
    # Collecting static files needs no real SECRET_KEY (tests get theirs from agentops.pytest_env).
    manage("collectstatic", "--noinput", "--verbosity", "0",
           env={**os.environ, "SECRET_KEY": os.environ.get("SECRET_KEY") or "collectstatic-only"})
    # Property tests on a loaded machine: no deadline, no "too slow" health check (tests/conftest.py).
    env = {**os.environ, "HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE") or "slow-machine"}
    return subprocess.run([str(PY), "-m", "pytest", *parallel(args)], cwd=ROOT, env=env).returncode


COMMANDS = {"up": up, "test": test, "check": check, "manage": manage_command}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        return 2
    os.chdir(ROOT)
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
