"""A task round trip through a real Celery worker process, and the `serve` process."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ping(env, timeout=60):
    return subprocess.run([sys.executable, "manage.py", "ping_worker", "--timeout", str(timeout)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout + 30)


def _start_worker(env):
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads", "--concurrency", "2",
         "--loglevel", "WARNING", "--without-mingle", "--without-gossip", "--hostname", f"rt-{time.time_ns()}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.django_db(transaction=True)
class TestWorkerRoundTrip:
    def test_it_completes_a_task_on_the_configured_broker(self, worker_env):
        worker = _start_worker(worker_env)
        try:
            result = _ping(worker_env)
            assert result.returncode == 0, result.stderr
            assert "worker answered" in result.stdout
        finally:
            worker.terminate()
            worker.wait(timeout=20)

    def test_it_completes_a_task_on_the_embedded_broker(self, worker_env, tmp_path):
        env = {**worker_env, "CELERY_BROKER_URL": "", "AGENTOPS_VAR_DIR": str(tmp_path)}
        worker = _start_worker(env)
        try:
            result = _ping(env)
            assert result.returncode == 0, result.stderr
        finally:
            worker.terminate()
            worker.wait(timeout=20)

    @pytest.mark.services
    def test_it_completes_a_task_on_redis(self, worker_env, local_redis):
        env = {**worker_env, "CELERY_BROKER_URL": f"{local_redis}/15"}
        worker = _start_worker(env)
        try:
            result = _ping(env)
            assert result.returncode == 0, result.stderr
        finally:
            worker.terminate()
            worker.wait(timeout=20)


def test_serve_answers_runs_a_task_and_stops_on_sigint(tmp_path):
    """The process the README's first command ends in: web + worker + beat."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(AGENTOPS_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True,
                   timeout=180)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        status = None
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=2) as response:
                    status = response.status
                    break
            except OSError:
                time.sleep(0.1)
        assert status == 200
        assert _ping(env).returncode == 0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "AgentOps stopped." in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
