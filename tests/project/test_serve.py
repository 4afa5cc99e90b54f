"""manage.py serve keeps the product up: a process that dies is started again."""
import subprocess
import sys
import time

import pytest

from core.management.commands.serve import Supervisor

pytestmark = pytest.mark.slow  # supervises real processes


def test_a_process_that_dies_is_restarted_and_the_others_go_on():
    commands = {"worker": [sys.executable, "-c", "import sys; sys.exit(3)"],
                "web": [sys.executable, "-c", "import time; time.sleep(30)"]}
    procs = {name: subprocess.Popen(cmd) for name, cmd in commands.items()}
    said = []
    supervisor = Supervisor(procs, commands, said.append)
    web = procs["web"]
    try:
        procs["worker"].wait(timeout=10)
        first = procs["worker"]
        supervisor.check(time.monotonic())                 # notices the death, schedules a restart
        supervisor.check(time.monotonic() + 5)             # after the back-off: started again
        assert procs["worker"] is not first
        assert "worker exited with 3" in said[0]
        assert procs["web"] is web and web.poll() is None  # the others were left alone
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
