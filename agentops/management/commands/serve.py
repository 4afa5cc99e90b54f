"""Run the web server, a Celery worker and the beat scheduler together.

This is what the README's first command ends in. Ctrl-C (SIGINT) or SIGTERM
stops all three; if one dies, the others are stopped too.
"""
import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Start web (runserver), a Celery worker and Celery beat; stop them all on Ctrl-C."

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
            "web": [python, "manage.py", "runserver", f"{host}:{port}", "--noreload", "--skip-checks"],
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
        exit_code = 0
        while not stopping:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    self.stderr.write(f"{name} exited with {proc.returncode}; stopping the others.")
                    exit_code = proc.returncode or 1
                    stopping = True
            time.sleep(0.2)
        self._stop_all(procs)
        self.stdout.write("AgentOps stopped.")
        if exit_code:
            sys.exit(exit_code)

    def _stop_all(self, procs):
        # SIGTERM lets the worker finish its current task (a warm shutdown).
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
