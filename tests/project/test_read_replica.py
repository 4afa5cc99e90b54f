"""Pages read from a real PostgreSQL streaming replica; the worker, the API and a person's own writes never wait on it.

Two clusters of the test's own (`pg_createcluster`, the replica made by `pg_basebackup -R`), the
product's own processes against them (uvicorn with `DATABASE_REPLICA_URL`, a Celery worker), and
the replica's replay paused to make it lag: what a page shows says which database answered it.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import requests

from tests.conftest import ROOT, running_worker, wait_until
from tests.project.test_database_outage import free_port

# A replica is a PostgreSQL feature: this runs with the PostgreSQL stage (the clusters are its own).
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                                 reason="PostgreSQL stage only (DATABASE_URL=postgres://...)"),
              pytest.mark.skipif(not Path("/usr/bin/pg_createcluster").exists(),
                                 reason="needs Debian's PostgreSQL cluster tools")]

MAX_LAG_S = 8
PREFIX = os.environ.get("AGENTOPS_TEST_REPLICA_CLUSTERS", f"agentops-replica-{os.getpid()}")


def pg_version() -> str:
    return sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: [int(x) for x in v.split(".")])[-1]


class Cluster:
    def __init__(self, name: str, port: int):
        self.name, self.port, self.version = name, port, pg_version()
        self.data = Path(f"/var/lib/postgresql/{self.version}/{name}")

    def ctl(self, *args: str, check: bool = True) -> None:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, *args],
                       check=check, capture_output=True)

    def create(self) -> None:
        subprocess.run(["pg_createcluster", self.version, self.name, "--port", str(self.port), "--",
                        "--auth-local=trust", "--auth-host=trust"], check=True, capture_output=True)
        with Path(f"/etc/postgresql/{self.version}/{self.name}/postgresql.conf").open("a") as conf:
            conf.write("\nlisten_addresses = '127.0.0.1'\nmax_connections = 100\n")

    def ready(self) -> bool:
        return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", str(self.port), "-q"]).returncode == 0

    def start(self) -> None:
        self.ctl("start")
        wait_until(self.ready, timeout=60, message=f"cluster {self.name} accepts connections")

    def drop(self) -> None:
        subprocess.run(["pg_dropcluster", "--stop", self.version, self.name], capture_output=True)

    def sql(self, statement: str, dbname: str = "postgres"):
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname,
                             autocommit=True) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchone() if cursor.description else None


@pytest.fixture(scope="module")
def clusters():
    primary = Cluster(f"{PREFIX}-p", free_port())
    replica = Cluster(f"{PREFIX}-r", free_port())
    try:
        primary.create()
        primary.start()
        primary.sql("CREATE DATABASE agentops")
        replica.create()
        subprocess.run(["find", str(replica.data), "-mindepth", "1", "-delete"], check=True)   # kept: its owner
        copy = subprocess.run(["runuser", "-u", "postgres", "--", f"/usr/lib/postgresql/{replica.version}/bin/pg_basebackup",
                               "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "-D", str(replica.data),
                               "-R", "-X", "stream", "-c", "fast"], capture_output=True, text=True)
        assert copy.returncode == 0, copy.stderr
        replica.start()
        yield primary, replica
    finally:
        replica.drop()
        primary.drop()


@pytest.fixture(scope="module")
def product(clusters, tmp_path_factory):
    """uvicorn and a worker on the primary, pages on the replica; the demo users and an operator's API token."""
    primary, replica = clusters
    var = tmp_path_factory.mktemp("var")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
           "DATABASE_URL": f"postgres://postgres@127.0.0.1:{primary.port}/agentops",
           "DATABASE_REPLICA_URL": f"postgres://postgres@127.0.0.1:{replica.port}/agentops",
           "AGENTOPS_REPLICA_MAX_LAG_S": str(MAX_LAG_S), "AGENTOPS_VAR_DIR": str(var),
           "SECRET_KEY": "r" * 50, "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "false",
           "SESSION_COOKIE_SECURE": "false", "CSRF_COOKIE_SECURE": "false", "DEBUG": "false"}
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--no-input"], cwd=ROOT, env=env, check=True, capture_output=True)
    subprocess.run([*manage, "seed_demo", "--no-runs"], cwd=ROOT, env=env, check=True, capture_output=True)
    token = subprocess.run([*manage, "create_api_token", "operator"], cwd=ROOT, env=env, check=True,
                           capture_output=True, text=True).stdout.strip()
    passwords = json.loads((var / "demo-credentials.json").read_text())
    port = free_port()
    # The production layout: ASGI under uvicorn (docs/operations.md).
    web = subprocess.Popen([sys.executable, "-m", "uvicorn", "agentops.asgi:application", "--host", "127.0.0.1",
                            "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env,
                           stdout=(var / "web.log").open("w"), stderr=subprocess.STDOUT)
    try:
        with running_worker(env, hostname=f"replica-{os.getpid()}"):
            url = f"http://127.0.0.1:{port}"
            wait_until(lambda: _answers(url), timeout=60, message="the web answers")
            yield {"url": url, "token": token, "passwords": passwords, "primary": primary, "replica": replica,
                   "log": var / "web.log"}
    finally:
        web.terminate()
        web.wait(timeout=20)


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def signed_in(product, username: str) -> requests.Session:
    browser = requests.Session()
    login = f"{product['url']}/login/"
    browser.get(login, timeout=10)
    answer = browser.post(login, data={"username": username, "password": product["passwords"][username],
                                       "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                          headers={"Referer": login}, timeout=10, allow_redirects=False)
    assert answer.status_code == 302, answer.text[:500]
    return browser


def caught_up(product) -> None:
    """The replica has replayed everything the primary has written so far."""
    lsn = product["primary"].sql("SELECT pg_current_wal_lsn()::text")[0]
    wait_until(lambda: product["replica"].sql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")[0],
               timeout=30, message="the replica replays the primary's writes")


def start_run(product, goal: str) -> int:
    answer = requests.post(f"{product['url']}/api/runs/start/", timeout=10,
                           headers={"Authorization": f"Token {product['token']}"},
                           json={"goal": goal, "planner": "scripted",
                                 "planner_config": {"plans": [[{"capability": "get_document",
                                                                "arguments": {"id": "POL-7"}}]]},
                                 "completion": {"capability": "get_document", "path": "id", "exists": True}})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def runs_page(browser: requests.Session, product) -> str:
    page = browser.get(f"{product['url']}/runs/", timeout=10)
    assert page.status_code == 200
    return page.text


def test_pages_read_the_replica_while_the_worker_the_api_and_a_persons_own_writes_use_the_primary(product):
    operator, viewer = signed_in(product, "operator"), signed_in(product, "viewer")
    caught_up(product)
    product["replica"].sql("SELECT pg_wal_replay_pause()")
    try:
        run_id = start_run(product, "Read the travel policy while the replica waits")

        # The worker runs it to its end and the API reports it: neither reads the paused replica.
        seen = {}

        def finished():
            seen.update(requests.get(f"{product['url']}/api/runs/{run_id}/", timeout=10,
                                     headers={"Authorization": f"Token {product['token']}"}).json())
            return seen["status"] not in ("queued", "running")
        wait_until(finished, timeout=60, message="the worker ends the run")
        assert seen["status"] == "completed", (seen["stop_reason"], seen.get("stop_detail"))

        # A reader who wrote nothing since is served by the replica, which has not replayed the run yet.
        assert "while the replica waits" not in runs_page(viewer, product)
        # Whoever writes through a page reads from the primary until the replica holds that write.
        saved = operator.post(f"{product['url']}/runs/views/save/", timeout=10,
                              data={"name": "mine", "query": "status=completed",
                                    "csrfmiddlewaretoken": operator.cookies["csrftoken"]},
                              headers={"Referer": f"{product['url']}/runs/"}, allow_redirects=False)
        assert saved.status_code in (200, 302), saved.text[:300]
        assert "agentops_wrote_lsn" in operator.cookies
        assert "while the replica waits" in runs_page(operator, product)
        trace = operator.get(f"{product['url']}/runs/{run_id}/", timeout=10)
        assert trace.status_code == 200 and "while the replica waits" in trace.text

        # Nobody reads a replica further behind than AGENTOPS_REPLICA_MAX_LAG_S.
        time.sleep(MAX_LAG_S + 1)
        assert "while the replica waits" in runs_page(viewer, product)
    finally:
        product["replica"].sql("SELECT pg_wal_replay_resume()")
    caught_up(product)
    assert "while the replica waits" in runs_page(viewer, product)


def test_a_replica_that_is_down_leaves_the_pages_to_the_primary(product):
    viewer = signed_in(product, "viewer")
    run_id = start_run(product, "Read the travel policy with the replica down")
    product["replica"].ctl("stop", "-m", "fast")
    try:
        for path in ("/runs/", f"/runs/{run_id}/", "/runs/dashboard/", f"/runs/{run_id}/trace.json"):
            page = viewer.get(f"{product['url']}{path}", timeout=10)
            assert page.status_code == 200, (path, page.status_code)
        assert "with the replica down" in runs_page(viewer, product)
    finally:
        product["replica"].start()
    log = product["log"].read_text()
    assert "replica unavailable, pages read from the primary" in log and "Internal Server Error" not in log, log
