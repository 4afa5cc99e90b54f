"""Fixtures shared by the Django tests: users per role, API clients, a real worker."""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

ROOT = Path(__file__).resolve().parent.parent

# Property tests on a loaded machine (CI, `agentops/dev.py test`): the same examples, with no
# per-example deadline and no "too slow" health check, which fail on a busy 2-core box.
hypothesis_settings.register_profile("slow-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "default")


@pytest.fixture(autouse=True)
def fast_password_hashing(request):
    # Hashing strength is not under test; PBKDF2 made every user fixture cost 0.25 s.
    # (The pure runtime tests run without Django, hence no `settings` fixture there.)
    if not request.config.pluginmanager.hasplugin("django"):
        return
    request.getfixturevalue("settings").PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def registry_read_afresh(request):
    """What a worker process keeps per registry version (specs, secret variable names) starts empty in
    each test: a test's database is rolled back, and the registry's version with it."""
    if not request.config.pluginmanager.hasplugin("django"):
        return
    from capabilities import egress
    from runs.worker.adapters import SharedSpecs

    SharedSpecs.forget()
    egress.forget_registry_secret_names()


# What a recording cannot reproduce (runtime.replay): real time, a cancel or an MCP session's
# end from outside, and a permission revoked during the run (the export holds today's permissions).
_NOT_REPLAYABLE = ("budget_exhausted:deadline", "cancelled", "internal_error", "terminal_failure:permission_denied",
                   "session_ended", "quota_exhausted:runs_per_day", "quota_exhausted:tokens_per_day",
                   "quota_exhausted:cost_per_day")


@pytest.fixture(autouse=True)
def live_runs_replay_identically(request):
    """Every run a test drives through the engine to its stop is exported as a scenario and
    replayed: the replay must make the same decisions (issue 35: an export records every
    response; flag and decision are one fact)."""
    if not request.config.pluginmanager.hasplugin("django") or "tests/browser/" in str(request.fspath):
        return
    from runs.worker import engine

    advance = engine.run_advance

    def advance_and_check(*, run_id, **kw):
        countdown = advance(run_id=run_id, **kw)
        assert_replays_identically(run_id)
        return countdown

    request.getfixturevalue("monkeypatch").setattr(engine, "run_advance", advance_and_check)


def assert_replays_identically(run_id: int) -> None:
    from runs.models import Decision, Run
    from runs.trace.scenario_export import run_scenario_export, scenario_replay

    run = Run.objects.filter(pk=run_id, finished_at__isnull=False).first()
    if run is None or run.stop_reason in _NOT_REPLAYABLE:
        return
    recorded = list(Decision.objects.filter(run=run).order_by("created_at", "id").values_list("decision", flat=True))
    replayed = scenario_replay(scenario=run_scenario_export(run=run))
    assert [d["decision"] for d in replayed["decisions"]] == recorded, (run.stop_reason, replayed)
    assert replayed["result"]["stop_reason"] == run.stop_reason


@pytest.fixture(autouse=True, scope="session")
def static_files_scanned_once(request):
    """WhiteNoise scans STATIC_ROOT and every finder's folder when its middleware is built, which
    Django's test client does for each new client: ~0.1 s a client, a third of the fast suite's
    time. A server process builds it once; so does this session, for each static configuration.
    The files do not change during a session (collectstatic runs before pytest)."""
    if not request.config.pluginmanager.hasplugin("django"):
        yield
        return
    from django.conf import settings
    from whitenoise.middleware import WhiteNoiseMiddleware

    build = WhiteNoiseMiddleware.__init__
    built: dict[str, dict] = {}

    def init(self, get_response=None, settings=settings):
        names = sorted(n for n in dir(settings) if n.startswith(("STATIC", "WHITENOISE_")))
        key = repr([(n, getattr(settings, n)) for n in names + ["DEBUG", "FORCE_SCRIPT_NAME", "INSTALLED_APPS"]])
        if key not in built:
            build(self, get_response, settings)
            built[key] = {k: v for k, v in vars(self).items() if k != "get_response"}
        else:
            vars(self).update(built[key])
            self.get_response = get_response

    WhiteNoiseMiddleware.__init__ = init
    yield
    WhiteNoiseMiddleware.__init__ = build


@pytest.fixture(autouse=True, scope="session")
def flush_outlasts_a_deadlock(request):
    """A transactional test ends by flushing every table (TRUNCATE on PostgreSQL). A server or
    worker process of the test's own may still be finishing its last transaction then (the
    gateway ends an MCP session after its client has gone), and PostgreSQL may pick the TRUNCATE
    as a deadlock's victim: the flush fails, and every test after it finds the rows left behind.
    The flush is tried again once the other transaction has ended."""
    if not request.config.pluginmanager.hasplugin("django"):
        yield
        return
    from django.core.management.base import CommandError
    from django.db import OperationalError
    from django.test import TransactionTestCase

    teardown = TransactionTestCase._fixture_teardown

    def _fixture_teardown(self):
        for attempt in range(10):
            try:
                return teardown(self)
            except CommandError as error:
                if attempt == 9 or not isinstance(error.__cause__, OperationalError) \
                        or "deadlock" not in str(error.__cause__):
                    raise
                time.sleep(0.2 * (attempt + 1))

    TransactionTestCase._fixture_teardown = _fixture_teardown
    yield
    TransactionTestCase._fixture_teardown = teardown


_MIGRATED_ROLES: list[tuple[str, str, str]] = []


def _role_groups():
    """The role groups as the data migrations made them. Their rows vanish when a transactional
    test flushes the database (its post_migrate signal brings the permissions back, not the
    groups): then they are put back from what the first call saw, in three queries —
    core.roles.sync_role_groups again (create_permissions for every app) cost ~0.15 s."""
    from django.contrib.auth.models import Group, Permission

    from core.roles import ROLE_PERMISSIONS

    Through = Group.permissions.through
    # One cheap query in the common case.
    if Group.objects.filter(name__in=ROLE_PERMISSIONS, permissions__isnull=False).distinct().count() == len(ROLE_PERMISSIONS):
        if not _MIGRATED_ROLES:
            _MIGRATED_ROLES.extend(Through.objects.filter(group__name__in=ROLE_PERMISSIONS).values_list(
                "group__name", "permission__content_type__app_label", "permission__codename"))
        return
    if not _MIGRATED_ROLES:  # flushed before any test saw the migrated groups
        from django.apps import apps

        from core.roles import sync_role_groups

        sync_role_groups(apps)
        return _role_groups()
    groups = {g.name: g for g in Group.objects.filter(name__in=ROLE_PERMISSIONS)}
    groups.update({g.name: g for g in Group.objects.bulk_create(
        [Group(name=name) for name in ROLE_PERMISSIONS if name not in groups])})
    Through.objects.filter(group__in=groups.values()).delete()
    perms = {(p.content_type.app_label, p.codename): p.pk for p in Permission.objects.select_related("content_type")}
    Through.objects.bulk_create([Through(group_id=groups[name].pk, permission_id=perms[(app, codename)])
                                 for name, app, codename in _MIGRATED_ROLES])


@pytest.fixture(scope="session")
def local_redis() -> str:
    """The Redis on 127.0.0.1:6379 (CI starts it; tests use databases of their own); skipped without it."""
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return "redis://127.0.0.1:6379"
    except OSError:
        pytest.skip("Redis is not running on 127.0.0.1:6379")


# -- the test database: migrated once per schema ---------------------------------------------
# Migrating a fresh SQLite test database costs each xdist worker ~6 s of the fast core. The
# migrated database is kept under var/test-schema, named by a digest of every migration and the
# Django version, and copied into place while they are unchanged (Django then finds nothing to
# apply and only runs its post-migrate sync). PostgreSQL migrates as before.
SCHEMA_TEMPLATES = ROOT / "var" / "test-schema"


def _sqlite_test_database() -> Path | None:
    from django.conf import settings

    database = settings.DATABASES["default"]
    return Path(database["TEST"]["NAME"]) if database["ENGINE"].endswith("sqlite3") else None


def _schema_template() -> Path:
    import hashlib

    import django

    digest = hashlib.sha256(django.get_version().encode())
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return SCHEMA_TEMPLATES / f"{digest.hexdigest()[:20]}.sqlite3"


@pytest.fixture(scope="session")
def django_db_keepdb(request, django_db_modify_db_settings):
    """True (keep and reuse) when the migrated schema was copied into place from its template."""
    path = _sqlite_test_database()
    if request.config.getvalue("reuse_db") or path is None:
        return request.config.getvalue("reuse_db")
    template = _schema_template()
    if not template.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(template, path)
    return True


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_keepdb, django_db_blocker):
    """pytest-django's, then the freshly migrated schema kept as the template for the next session."""
    path = _sqlite_test_database()
    if path is not None and not django_db_keepdb:
        import sqlite3

        from django.db import connection

        template = _schema_template()
        SCHEMA_TEMPLATES.mkdir(parents=True, exist_ok=True)
        partial = template.with_name(f"{template.stem}.{os.getpid()}.partial")
        with django_db_blocker.unblock():
            connection.ensure_connection()
            copy = sqlite3.connect(partial)
            try:
                connection.connection.backup(copy)   # consistent, whatever the WAL still holds
            finally:
                copy.close()
        os.replace(partial, template)   # atomic: another worker may be saving the same schema
    yield


@pytest.fixture
def roles(db):
    _role_groups()


_DB_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback", "live_server"}


@pytest.fixture(autouse=True)
def _in_default_project(request):
    """A test that uses the database acts in the default project, as a request or a worker's pass acts
    in one: services called directly find that project's rows, and users their roles there. A test
    about projects enters others itself (core.projects.project_scope)."""
    if request.node.get_closest_marker("django_db") is None and not _DB_FIXTURES & set(request.fixturenames):
        yield
        return
    from core.project_access import default_project
    from core.projects import project_scope

    request.getfixturevalue("_django_db_helper")
    with project_scope(default_project()):
        yield


@pytest.fixture(scope="class")
def class_db(django_db_setup, django_db_blocker):
    """The database for rows a class of tests reads but never needs afresh (an evaluation of the
    whole bundled suite, say): one transaction around the class, rolled back after its last test.
    Each test's own transaction (the `db` fixture) nests inside it as a savepoint, so what a test
    writes is still undone after that test. Not for transactional tests."""
    from django.db import transaction

    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            yield
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


@pytest.fixture(scope="class")
def class_operator(class_db):
    """An operator created once per class (see class_db), for class-scoped fixtures that act as one."""
    from core.project_access import default_project
    from core.projects import project_scope

    _role_groups()
    with project_scope(default_project()):
        yield _make_user("olive", "operator")


def url_patterns(resolver=None, prefix=""):
    """Every (route, name) the product serves, but for the Django admin's (it guards itself: staff only)."""
    from django.urls import URLPattern, URLResolver, get_resolver

    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            if str(entry.pattern).startswith("admin/"):
                continue
            yield from url_patterns(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.name


def holding_only(user, *codenames: str):
    """`user` holds, in the default project, a role of their own with exactly these permissions."""
    from django.contrib.auth.models import Group, Permission

    from core.models import ProjectMembership
    from core.project_access import default_project

    role, _ = Group.objects.get_or_create(name="only " + ", ".join(sorted(codenames)))
    role.permissions.set(Permission.objects.filter(codename__in=codenames))
    ProjectMembership.objects.get_or_create(project=default_project(), user=user, role=role)
    return user


def _make_user(username, group=None, **extra):
    """A user holding `group` (a role) in the default project."""
    from django.contrib.auth.models import User

    from core.project_access import grant_role

    user = User.objects.create_user(username=username, password="pw-" + username, **extra)
    if group:
        grant_role(user, group)
    return user


def zebra_member(*roles: str, username: str = "bert", **extra):
    """(the "zebra" project, a user holding `roles` there and nowhere else): the other team of the
    isolation tests. The user is read again, so no permission cache of the grant's is left on it."""
    from django.contrib.auth.models import User

    from core.models import Project
    from core.project_access import grant_role

    project = Project.objects.create(slug="zebra", name="Zebra team")
    user = User.objects.create_user(username=username, password="pw-" + username, **extra)
    for role in roles:
        grant_role(user, role, project)
    return project, User.objects.get(pk=user.pk)


@pytest.fixture
def viewer(roles):
    return _make_user("vera", "viewer")


@pytest.fixture
def operator(roles):
    return _make_user("otto", "operator")


@pytest.fixture
def second_operator(roles):
    return _make_user("olga", "operator")


@pytest.fixture
def reviewer(roles):
    return _make_user("rené", "reviewer")


@pytest.fixture
def registry_admin(roles):
    return _make_user("rita", "registry admin")


@pytest.fixture
def stdio_allowed(settings, registry_admin):
    """This server allows `python` as a stdio MCP command, and the registry admin holds the stdio role too."""
    from core.project_access import grant_role

    settings.AGENTOPS_MCP_STDIO_COMMANDS = ["python"]
    grant_role(registry_admin, "stdio mcp admin")
    return registry_admin


@pytest.fixture
def nobody(roles):
    return _make_user("nora")


@pytest.fixture
def client_for(client):
    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def api_for():
    from rest_framework.test import APIClient

    def make(user):
        api = APIClient()
        api.force_authenticate(user)
        return api

    return make


def worker_env() -> dict[str, str]:
    """Environment for a subprocess that must use the test database and broker."""
    from django.conf import settings
    from django.db import connection

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        env["DATABASE_URL"] = "sqlite:///" + str(Path(db["NAME"]).resolve())
    else:
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
    # What tests/security/test_mcp_worker.py has the worker run: real stdio servers, MCP over loopback HTTP.
    env.setdefault("AGENTOPS_MCP_STDIO_COMMANDS", ",".join(WORKER_STDIO_COMMANDS))
    env.setdefault("AGENTOPS_HTTP_ALLOWED_HOSTS", "127.0.0.1")
    # Every worker exports its runs over OTLP to the test receiver's port: when no receiver
    # listens there, that is the dead-collector case, which must never slow or fail a run.
    env.setdefault("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{otlp_port()}")
    env.setdefault("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    env.setdefault("OTEL_BSP_SCHEDULE_DELAY", "200")
    # The ledger capabilities outside the product (tests/chaos/chaos_ledger.py) and where they
    # record their real effects, for the exactly-once tests (tests/runs/test_exactly_once.py).
    # Every worker of a test session can run every test capability (the gateway's too): a session
    # keeps several workers alive, and any of them may take a run.
    test_modules = (str(ROOT / "tests" / "chaos"), str(ROOT / "tests" / "gateway"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*test_modules, env.get("PYTHONPATH")) if p)
    env.setdefault("CHAOS_LEDGER", str(TEST_LEDGER))
    return env


TEST_LEDGER = Path(tempfile.gettempdir()) / f"agentops-test-ledger-{os.getpid()}.jsonl"


WORKER_STDIO_COMMANDS = ("python -m mcp_server_time", "python -m agentops_no_such_mcp_server",
                         "python -m ledger_mcp_server")


def _worker_number() -> int:
    """0 without pytest-xdist; n for its worker gwn, so fixed ports differ between workers."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def otlp_port() -> int:
    """AGENTOPS_TEST_OTLP_PORT (default 14318) plus the xdist worker's number."""
    return int(os.environ.get("AGENTOPS_TEST_OTLP_PORT") or 14318) + _worker_number()


@pytest.fixture(scope="session")
def otlp_receiver():
    """A real OTLP/HTTP receiver (tests/otlp_receiver.py) on the port workers export to."""
    import json
    import urllib.request

    port = otlp_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "otlp_receiver.py"), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"

    def spans(trace_id=""):
        with urllib.request.urlopen(f"{base}/spans?trace_id={trace_id}", timeout=5) as response:
            return json.loads(response.read())

    try:
        wait_until(lambda: _answers(f"{base}/health"), timeout=20, message="the OTLP receiver")
        yield type("Receiver", (), {"url": base, "spans": staticmethod(spans), "process": proc})
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False


def _purge_broker():
    from agentops.celery import app

    with app.connection_for_write() as conn:
        app.control.purge(connection=conn)


@contextlib.contextmanager
def running_worker(env: dict[str, str], *, hostname: str, concurrency: int = 4, stdout=subprocess.DEVNULL):
    """A real Celery worker process (threads pool) with `env`, stopped when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads", "--concurrency",
         str(concurrency), "--loglevel", "WARNING", "--without-mingle", "--without-gossip", "--hostname",
         f"{hostname}@%h"],
        cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.STDOUT, text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker):
    """A real Celery worker process on the configured broker and the test database."""
    with django_db_blocker.unblock():
        env = worker_env()
        _purge_broker()
    with running_worker(env, hostname=f"test-{os.getpid()}", stdout=subprocess.PIPE) as proc:
        yield proc


@pytest.fixture
def own_task_queue(worker_env):
    """A task queue that only the workers this test starts take from, for a test that must keep the
    session's worker out of its runs: pausing that worker is not enough on Redis, where its `BRPOP`
    stays registered and the server hands it the next task anyway.

    This process sends to the queue meanwhile (every run start, re-send and sweep), as a fresh
    process would with `AGENTOPS_TASK_QUEUE` set; the test starts its workers with `env`, whose
    own sends (a run handed back with a countdown) go there too. Emptied before and after."""
    from agentops.celery import app

    name = f"{app.conf.task_default_queue}-own"

    def purge():
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(name)

    purge()
    previous, app.conf.task_default_queue = app.conf.task_default_queue, name
    try:
        yield type("OwnQueue", (), {"name": name, "env": {**worker_env, "AGENTOPS_TASK_QUEUE": name}})
    finally:
        app.conf.task_default_queue = previous
        purge()


def off_the_event_loop(fn, *args, **kwargs):
    """fn(*args, **kwargs) on a thread without a running event loop, as WSGI serves a request.

    Playwright's sync API leaves its loop running on an xdist worker's thread after a browser test,
    and a view's async_to_sync (the WSGI long poll) refuses to run there."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    box: dict = {}

    def target():
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="off-the-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def wait_until(predicate, timeout=30.0, interval=0.05, message="condition"):
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {message}")


@pytest.fixture(name="wait_until")
def wait_until_fixture():
    return wait_until


@pytest.fixture(name="worker_env")
def worker_env_fixture(django_db_blocker):
    with django_db_blocker.unblock():
        return worker_env()


@pytest.fixture
def manual_advance(monkeypatch):
    """Runs advance only when the test calls the engine.

    Transactional tests commit, so services would queue advance tasks that the
    session's real worker (if one was started) could take while the test drives
    the same run by hand.
    """
    from runs import services

    # The send itself, not _enqueue_advance: runs.forks holds its own name for that one, so a fork's
    # task was sent all the same and the session's worker took the fork from the test (seen once in CI).
    monkeypatch.setattr(services, "_send_advance", lambda run_id, countdown=None: None)


@pytest.fixture
def try_inline():
    """Run Try it's Celery task in this process (eager): the same task and executor, no worker process.

    For unit-level tests of Try it's rules; tests/security/test_mcp_worker.py tries through a real worker.
    """
    from agentops.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


# -- a real SMTP server on loopback (notifications) ----------------------------------------------

@pytest.fixture(scope="session")
def smtp_server():
    from aiosmtpd.controller import Controller

    class Inbox:
        def __init__(self):
            self.messages = []

        async def handle_DATA(self, server, session, envelope):
            self.messages.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                                  "content": envelope.content.decode("utf-8", "replace")})
            return "250 OK"

    inbox = Inbox()
    given = os.environ.get("AGENTOPS_TEST_SMTP_PORT")
    port = int(given) + _worker_number() if given else _free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    inbox.port = port
    inbox.url = f"mailto://127.0.0.1:{port}?from=agentops@example.com&to=ops@example.com&mode=insecure"
    try:
        yield inbox
    finally:
        controller.stop()


@pytest.fixture
def inbox(smtp_server, settings):
    """The loopback SMTP server, on the egress allowlist (mail goes through the guard like webhooks)."""
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = [*settings.AGENTOPS_HTTP_ALLOWED_HOSTS, "127.0.0.1"]
    smtp_server.messages.clear()
    return smtp_server


def _free_port() -> int:
    """An ephemeral loopback port, for a server that must be told its port up front."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def http_mcp_server():
    """The demo MCP server (tests/capabilities/mcp_demo_server.py) over streamable HTTP on an
    ephemeral loopback port, as a subprocess: its URL."""
    import socket

    port = _free_port()
    server = ROOT / "tests" / "capabilities" / "mcp_demo_server.py"
    process = subprocess.Popen([sys.executable, str(server), "--http", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        pytest.fail("the MCP HTTP server did not start")
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(10)


# -- an HTTP service that tells which TCP connection each request came on --------------------------

class _CountingHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive). Answers {"n", "connection", "asked"}: n from the query or the JSON body,
    the number of the TCP connection the request came on, and the request's Connection header.
    /big pads the answer to 5 KB; /close answers `Connection: close`; /drop-after closes the
    connection after answering without saying so, as a server that drops an idle one does."""

    protocol_version = "HTTP/1.1"
    numbers = itertools.count(1)

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.number = next(self.numbers)
        self.server.connections.append(self.number)

    def do_GET(self):
        self.answer(parse_qs(urlsplit(self.path).query).get("n", [None])[0])

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.answer((json.loads(self.rfile.read(length)) if length else {}).get("n"))

    def answer(self, n):
        path = urlsplit(self.path).path
        found = {"n": None if n is None else int(n), "connection": self.number, "asked": self.headers.get("Connection")}
        body = json.dumps({**found, "pad": "x" * 5000} if path == "/big" else found).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if path == "/close":
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if path == "/drop-after":
            self.wfile.flush()
            self.close_connection = True


class _LedgerHandler(BaseHTTPRequestHandler):
    """Each POST's body's `n` appended to the server's `ledger`, its path and `n` to `requests` (the
    effects, counted outside the product); answers {"n": n}. A fault set for an n in `faults`: "late"
    lands and answers after `late_s` (after its caller gave up), "lost" never lands."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        fault = self.server.faults.pop(body.get("n"), None)
        if fault != "lost":
            with self.server.lock:
                self.server.ledger.append(body.get("n"))
                self.server.requests.append((urlsplit(self.path).path, body.get("n")))
        if fault is not None:
            time.sleep(self.server.late_s)
        answer = json.dumps({"n": body.get("n")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture
def ledger_service():
    """A loopback HTTP service counting the writes it receives (_LedgerHandler)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _LedgerHandler)
    httpd.daemon_threads = True
    httpd.ledger, httpd.requests, httpd.faults, httpd.lock, httpd.late_s = [], [], {}, threading.Lock(), 2.0
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def counting_http_service():
    """A loopback HTTP service; `.connections` lists the TCP connections it accepted."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    httpd.daemon_threads = True
    httpd.connections = []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
