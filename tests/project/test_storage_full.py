"""A full disk, for real: gunicorn on SQLite whose var/ is a small tmpfs filled up (needs root to mount)."""
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
START = json.dumps({"goal": "g", "completion": {"capability": "search_documents", "path": "documents.0.id",
                                                 "exists": True}}).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url, data=None, headers=None):
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def var_on_tmpfs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tmpfs")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.fixture(scope="module")
def web_on_a_full_disk(var_on_tmpfs):
    env = {"PATH": "/usr/bin:/bin", "AGENTOPS_VAR_DIR": str(var_on_tmpfs), "DEBUG": "false", "SECRET_KEY": "x" * 50,
           "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "false", "PYTHONPATH": str(ROOT)}

    def manage(*args):
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                              capture_output=True, text=True, timeout=300).stdout

    manage("migrate", "--noinput", "-v", "0")
    manage("shell", "-c", "from django.contrib.auth import get_user_model; "
                          "get_user_model().objects.create_superuser('admin', 'a@example.com', 'pw')")
    key = manage("create_api_token", "admin").strip()
    port = free_port()
    log_path = var_on_tmpfs.parent / f"{var_on_tmpfs.name}.log"
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "agentops.wsgi", "-k", "gthread", "--threads", "4",
                             "-b", f"127.0.0.1:{port}", "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # up, and its SQLite connection opened while there was room
            try:
                if fetch(f"{url}/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        filler = var_on_tmpfs / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
        yield url, key, filler, log_path
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def start_run(url, key):
    return fetch(f"{url}/api/runs/start/", data=START,
                 headers={"Content-Type": "application/json", "Authorization": f"Token {key}"})


def test_the_api_and_healthz_say_storage_full_and_recover_once_space_is_freed(web_on_a_full_disk):
    url, key, filler, log_path = web_on_a_full_disk
    status, body = start_run(url, key)
    assert status == 503 and body["error"]["code"] == "storage_full" and body["down"] == ["storage"], body
    status, body = fetch(f"{url}/healthz")
    assert status == 503 and body["storage"] == "full" and "storage" in body["down"], body
    log = log_path.read_text()
    assert "WARNING agentops.outages: storage full: POST /api/runs/start/ answered 503" in log, log
    assert "Internal Server Error" not in log, log

    filler.unlink()
    assert fetch(f"{url}/healthz")[0] == 200
    assert start_run(url, key)[0] == 201
