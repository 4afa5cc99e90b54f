"""Run the web server, a Celery worker and the beat scheduler together.

This is what the README's first command ends in. Ctrl-C (SIGINT) or SIGTERM
stops all three. A process that dies (a worker killed, say) is started again,
after a back-off that grows while it keeps dying quickly; the others go on.
"""
import contextlib
import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand


class Supervisor:
    """Restarts a dead process: at once after a long life, else after 1, 2, 4... up to 30 s
    while it keeps dying within a minute of its start."""

    def __init__(self, procs: dict, commands: dict, say):
        self.procs, self.commands, self.say = procs, commands, say
        self.started = {name: time.monotonic() for name in procs}
        self.backoff = {name: 0.0 for name in procs}
        self.restart_at: dict[str, float] = {}

    def check(self, now: float) -> None:
        for name, proc in self.procs.items():
            if name in self.restart_at:
                if now >= self.restart_at[name]:
                    del self.restart_at[name]
                    self.procs[name] = subprocess.Popen(self.commands[name], start_new_session=True)
                    self.started[name] = now
                continue
            if proc.poll() is None:
                continue
            quick = now - self.started[name] < 60
            self.backoff[name] = min(30.0, max(1.0, self.backoff[name] * 2)) if quick else 0.0
            self.say(f"{name} exited with {proc.returncode}; restarting it in {self.backoff[name]:.0f} s.")
            self.restart_at[name] = now + self.backoff[name]


class Command(BaseCommand):
    help = ("Start web (uvicorn, ASGI: Django and the MCP gateway at /mcp/), a Celery worker and Celery beat; "
            "stop them all on Ctrl-C.")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--no-beat", action="store_true", help="do not start the periodic scheduler")
        # Periodic sweeps run every few seconds: INFO would bury everything else.
        parser.add_argument("--worker-log-level", default="WARNING", help="the Celery worker's log level")

    def handle(self, *args, host, port, concurrency, no_beat, worker_log_level, **options):
        python = sys.executable
        celery = [python, "-m", "celery", "-A", "agentops"]
        commands = {
            # ASGI: the MCP gateway at /mcp/ holds calls open while they wait for a worker or a decision,
            # which a threaded WSGI server cannot afford (agentops/asgi.py).
            "web": [python, "-m", "uvicorn", "agentops.asgi:application", "--host", host, "--port", str(port),
                    "--log-level", "warning", "--no-access-log", "--timeout-graceful-shutdown", "10"],
            "worker": celery + ["worker", "--pool", "threads", "--concurrency", str(concurrency), "--loglevel",
                                worker_log_level, "--hostname", f"agentops-{os.getpid()}@%h", "--without-mingle",
                                "--without-gossip"],
        }
        if not no_beat:
            commands["beat"] = celery + ["beat", "--loglevel", "WARNING"]
        procs = {name: subprocess.Popen(cmd, start_new_session=True) for name, cmd in commands.items()}
        self.stdout.write(f"AgentOps on http://{host}:{port}/ (web + worker{' + beat' if not no_beat else ''}); "
                          "Ctrl-C stops everything.", ending="\n")
        self.stdout.flush()
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        supervisor = Supervisor(procs, commands, self.stderr.write)
        while not stopping:
            supervisor.check(time.monotonic())
            time.sleep(0.2)
        self._stop_all(procs)
        self.stdout.write("AgentOps stopped.")

    def _stop_all(self, procs):
        # SIGTERM lets the worker finish its current task (a warm shutdown).
        for proc in procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
