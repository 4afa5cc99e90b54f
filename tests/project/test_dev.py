"""agentops/dev.py, the launcher a fresh clone starts with: parallel tests, manage.py on the local instance."""
import subprocess

import pytest

from agentops import dev


class TestParallel:
    def test_it_runs_the_suite_on_a_worker_per_core_at_most_four(self, monkeypatch):
        monkeypatch.setattr(dev.os, "cpu_count", lambda: 2)
        assert dev.parallel(["tests/runs"]) == ["-n", "2", "--dist", "loadfile", "tests/runs"]
        monkeypatch.setattr(dev.os, "cpu_count", lambda: 64)
        assert dev.parallel([])[:2] == ["-n", "4"]

    @pytest.mark.parametrize("args", [["-n", "0"], ["-n3"], ["--numprocesses=2"], ["-p", "no:xdist"],
                                      ["-m", "chaos", "-s"]])
    def test_it_leaves_the_choice_to_the_arguments(self, monkeypatch, args):
        monkeypatch.setattr(dev.os, "cpu_count", lambda: 2)
        assert dev.parallel(args) == args

    def test_one_core_runs_in_one_process(self, monkeypatch):
        monkeypatch.setattr(dev.os, "cpu_count", lambda: 1)
        assert dev.parallel(["tests"]) == ["tests"]


class TestManage:
    def test_it_runs_manage_py_with_the_local_instance_s_environment(self, monkeypatch):
        ran = []
        monkeypatch.setattr(dev, "ensure_venv", lambda extras: None)
        monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: ran.append((cmd, dict(dev.os.environ))) or
                            subprocess.CompletedProcess(cmd, 0))
        monkeypatch.delenv("DATABASE_URL", raising=False)
        monkeypatch.delenv("DEBUG", raising=False)
        assert dev.manage_command(["create_api_token", "alice"]) == 0
        [(cmd, env)] = ran
        assert cmd[1:] == ["manage.py", "create_api_token", "alice"]
        assert env["DEBUG"] == "true"  # so settings use var/secret_key, as `up` does

    def test_a_deployment_keeps_debug_off(self, monkeypatch):
        monkeypatch.setattr(dev, "ensure_venv", lambda extras: None)
        monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0))
        monkeypatch.setenv("DATABASE_URL", "postgres://db/agentops")
        monkeypatch.delenv("DEBUG", raising=False)
        dev.manage_command(["check"])
        assert "DEBUG" not in dev.os.environ
