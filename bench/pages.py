#!/usr/bin/env python
"""How fast are the operator pages with production-sized data?

Builds (once per database) N runs spread over 30 days (every tenth with a step and two
attempts over five capabilities), one run with 50,000 attempts and 10,000 runs awaiting
approval, with a bulk loader (COPY on PostgreSQL, multi-row INSERTs on SQLite), rebuilds
the dashboard rollup from it, then times each page server side and counts
its queries, beside the target where the issue set one (best and median of 5 rounds).

    .venv/bin/python bench/pages.py --runs 100000                      # SQLite under --var-dir
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/pages.py --runs 1000000

On a streaming replica (core/replica.py), the same pages, each read where the router sends it:
build on the primary first, then run again with the replica named (a second cluster of your own):

    pg_basebackup -h 127.0.0.1 -p 5496 -U postgres -D /path/replica -R  # then start it on port 5497
    DATABASE_URL=postgres://postgres@127.0.0.1:5496/bench \
      DATABASE_REPLICA_URL=postgres://postgres@127.0.0.1:5497/bench .venv/bin/python bench/pages.py --runs 1000000
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)

from runtime.budgets import BudgetName  # noqa: E402
from runtime.observation import ErrorCode  # noqa: E402
from runtime.stop import RunStatus, StopKind, StopReason, status_for_stop, stop_kind  # noqa: E402

benchenv.prepare()

# Best of 5: on a shared machine the fastest round is the closest to the page's own cost.
ROUNDS = 5
CAPABILITIES = ["search_documents", "get_document", "create_ticket", "get_ticket_status", "send_notification"]
REASONS = [str(r) for r in [StopReason(StopKind.COMPLETED)] * 6 + [
    StopReason(StopKind.STALLED), StopReason(StopKind.BUDGET_EXHAUSTED, BudgetName.DEADLINE),
    StopReason(StopKind.BUDGET_EXHAUSTED, BudgetName.TOOL_CALLS), StopReason(StopKind.TERMINAL_FAILURE, ErrorCode.TIMEOUT),
    StopReason(StopKind.APPROVAL_REJECTED), StopReason(StopKind.CANCELLED)]]


class Loader:
    """Rows straight into a table: COPY on PostgreSQL, executemany of INSERTs on SQLite.

    Values are given per row only for the columns that vary; the others take the
    model's default, prepared for the database once.
    """

    def __init__(self, model, columns: list[str]):
        from django.db import connection

        from core.projects import active_project_id

        self.connection = connection
        self.model = model
        fields = [f for f in model._meta.concrete_fields if not f.primary_key and not f.generated]
        self.fields = fields
        self.varying = [model._meta.get_field(c) for c in columns]
        self.positions = [fields.index(f) for f in self.varying]
        # A row of a model that holds its project is in the one in scope (bulk rows send no pre_save).
        self.template = [active_project_id() if f.name == "project" else
                         None if f.null and not f.has_default() else self._prep(f, f.get_default())
                         for f in fields]
        self.batch: list[tuple] = []

    def _prep(self, field, value):
        if value is None:
            return None
        if field.get_internal_type() == "JSONField":
            return json.dumps(value)
        return field.get_db_prep_save(value, self.connection)

    def add(self, *values) -> None:
        row = list(self.template)
        for pos, field, value in zip(self.positions, self.varying, values, strict=False):
            if value is None or isinstance(value, (int, float, str, bool)) and field.get_internal_type() != "JSONField":
                row[pos] = value
            else:
                row[pos] = self._prep(field, value)
        self.batch.append(tuple(row))
        if len(self.batch) >= 20_000:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        table = self.model._meta.db_table
        columns = [self.connection.ops.quote_name(f.column) for f in self.fields]
        with self.connection.cursor() as cursor:
            if self.connection.vendor == "postgresql":
                with cursor.cursor.copy(f'COPY "{table}" ({", ".join(columns)}) FROM STDIN') as copy:
                    for row in self.batch:
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(columns))
                cursor.executemany(f'INSERT INTO "{table}" ({", ".join(columns)}) VALUES ({marks})', self.batch)
        self.batch = []


def _ids(model, since_id: int) -> list[int]:
    return list(model.objects.filter(pk__gt=since_id).order_by("pk").values_list("pk", flat=True))


def _max_id(model) -> int:
    return model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def build(runs: int, big_attempts: int, approvals: int, attempt_every: int) -> dict:
    from django.contrib.auth.models import User
    from django.db import connection, transaction

    from runs.dashboard import rollup
    from runs.models import Approval, Attempt, PlanRevision, Run, Step

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    big = Run.objects.filter(goal="big run").first()
    if big is not None and Run.objects.count() >= runs:
        return {"user": user, "big": big, "built_s": None}
    started = time.perf_counter()
    rng = random.Random(16)
    now = datetime.now(UTC)
    span_s = 30 * 86_400
    first_run = _max_id(Run)
    with transaction.atomic():
        loader = Loader(Run, ["goal", "completion", "budgets", "planner", "owner", "status", "stop_reason",
                              "stop_detail", "trace_id", "tool_calls", "tokens", "cost", "iterations", "created_at",
                              "started_at", "finished_at", "updated_at"])
        for i in range(runs):
            created = now - timedelta(seconds=span_s * i / runs + 60)
            if i < approvals:  # the newest are waiting for a decision
                status, reason, finished = "awaiting_approval", "", None
            elif i % 200 == 1:
                status, reason, finished = "running", "", None
            else:
                reason = REASONS[i % len(REASONS)]
                status = status_for_stop(stop_kind(reason)).value
                finished = created + timedelta(seconds=5 + i % 90)
            loader.add(f"bench run {i}", {"capability": "search_documents", "path": "documents.0.id",
                                          "exists": True},
                       {"deadline_s": 600, "max_tool_calls": 100}, "rules", user.pk, status, reason,
                       "bench" if reason else "", f"{first_run + i:032x}", i % 17, (i * 37) % 5000,
                       (i % 100) / 100, i % 23, created, created, finished, finished or created)
        loader.flush()
        run_ids = _ids(Run, first_run)
        # The big run: one step polled 50,000 times, outputs of ~1 KB.
        big = Run.objects.create(goal="big run", completion={"capability": "get_ticket_status", "exists": True},
                                 budgets={"deadline_s": 86_400}, planner="rules", owner=user, status=RunStatus.STOPPED,
                                 stop_reason=StopKind.STALLED, stop_detail="bench", trace_id="b" * 32,
                                 tool_calls=big_attempts, finished_at=now)
        # Plans and steps: one per run with attempts, one per run awaiting approval, one for the big run.
        with_attempts = [rid for n, rid in enumerate(run_ids) if n % attempt_every == 0] if attempt_every else []
        waiting = run_ids[:approvals]
        plan_runs = sorted(set(with_attempts) | set(waiting)) + [big.pk]
        first_rev = _max_id(PlanRevision)
        revs = Loader(PlanRevision, ["run", "number", "accepted", "steps", "reason_code", "created_at"])
        for rid in plan_runs:
            revs.add(rid, 1, True, [{"id": "s1", "capability": "create_ticket", "arguments": {"title": "t"}}],
                     "initial", now)
        revs.flush()
        rev_of = dict(zip(plan_runs, _ids(PlanRevision, first_rev), strict=False))
        first_step = _max_id(Step)
        steps = Loader(Step, ["run", "revision", "index", "key", "capability_name", "arguments", "arguments_hash",
                              "approval_state", "status"])
        waiting_set = set(waiting)
        for n, rid in enumerate(plan_runs):
            capability = "get_ticket_status" if rid == big.pk else "create_ticket" if rid in waiting_set \
                else CAPABILITIES[n % len(CAPABILITIES)]
            steps.add(rid, rev_of[rid], 0, "s1", capability, {"title": f"ticket {rid}"}, "a",
                      "pending" if rid in waiting_set else "not_required",
                      "awaiting_approval" if rid in waiting_set else "succeeded")
        steps.flush()
        step_rows = list(Step.objects.filter(pk__gt=first_step).order_by("pk")
                         .values_list("pk", "run_id", "capability_name", "revision_id"))
        # Runs were loaded in order, so a run's position gives its creation time back.
        run_created = {rid: now - timedelta(seconds=span_s * n / runs + 60)
                       for n, rid in enumerate(run_ids) if attempt_every and n % attempt_every == 0}
        attempts = Loader(Attempt, ["run", "step", "uid", "number", "kind", "capability_name", "signature",
                                    "signature_hash", "started_at", "ended_at", "latency_s", "status", "error_code",
                                    "error_category", "output", "trace_id", "span_id", "repeated_without_progress"])
        output = {"status": "open", "history": [{"at": k, "note": "still open " * 8} for k in range(10)]}
        uid = 0
        for step_id, rid, capability, _rev in step_rows:
            if rid == big.pk:
                for n in range(big_attempts):
                    at = now - timedelta(seconds=big_attempts - n)
                    uid += 1
                    attempts.add(rid, step_id, f"{uid:032x}", n + 1, "poll" if n else "call", capability,
                                 'get_ticket_status|{"ticket_id":1}', "s" * 64, at, at, 0.01 + (n % 50) / 1000,
                                 "ok", "", "", output, "b" * 32, f"{n:016x}", False)
            elif rid in run_created:
                for n in (1, 2):
                    at = run_created[rid] + timedelta(seconds=n)
                    failed = rng.random() < 0.1
                    uid += 1
                    attempts.add(rid, step_id, f"{uid:032x}", n, "call", capability, f"{capability}|{rid}",
                                 f"{rid:064x}", at, at, rng.lognormvariate(-2.0, 1.0),
                                 "retryable" if failed else "ok", "timeout" if failed else "",
                                 "transient" if failed else "", {"documents": [{"id": "POL-7"}]}, "c" * 32,
                                 f"{uid:016x}", n == 2 and failed)
        attempts.flush()
        approval_rows = Loader(Approval, ["run", "kind", "revision", "step", "capability_name", "arguments",
                                          "arguments_hash", "requested_at", "expires_at", "state"])
        for step_id, rid, capability, rev in step_rows:
            if rid in waiting_set:
                approval_rows.add(rid, "step", rev, step_id, capability, {"title": f"ticket {rid}"}, "a", now,
                                  now + timedelta(days=1), "pending")
        approval_rows.flush()
    rollup_started = time.perf_counter()
    rollup.rebuild()
    rollup_s = time.perf_counter() - rollup_started
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    else:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return {"user": user, "big": big, "built_s": time.perf_counter() - started, "rollup_s": rollup_s}


def _deep_cursor(sort: str, offset: int, **filters) -> str:
    """The cursor a reader would hold after paging `offset` rows into the list."""
    from core.pagination import encode_cursor
    from runs import selectors

    ordering = selectors.run_ordering(sort)
    row = (selectors.run_list(filters=selectors.RunFilters(sort=sort, **filters))
           .values_list(ordering.field, "pk")[offset - 1])
    return encode_cursor(*row)


def time_pages(user, big, runs: int) -> list[tuple]:
    """Each page timed; with DATABASE_REPLICA_URL set, the queries the replica served are counted too
    (core/replica.py routes the pages' reads there)."""
    from contextlib import ExitStack

    from django.db import connection, connections
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    replica = connections["replica"] if "replica" in connections.databases else None

    client = Client()
    client.force_login(user)
    filtered = "status=stopped&stop_reason=stalled&sort=-tool_calls"
    deep = min(25_000, runs // 4)
    pages = [
        ("runs list", "/runs/", None),
        ("runs list, filtered + sorted", f"/runs/?{filtered}", 200),
        (f"runs list, filtered, {deep:,} rows in (cursor)",
         f"/runs/?{filtered}&after="
         f"{_deep_cursor('-tool_calls', deep // 12, status=RunStatus.STOPPED, stop_reason=StopKind.STALLED)}"
         f"&page={deep // 12 // 50 + 1}", 200),
        (f"runs list, {deep:,} rows in (cursor)", f"/runs/?after={_deep_cursor('-created', deep)}&page=501", 200),
        ("runs list, by capability + cost", "/runs/?capability=search_documents&sort=-cost", 200),
        ("runs list, finished earliest", "/runs/?sort=finished", 200),
        (f"trace of {big.tool_calls:,} attempts", f"/runs/{big.pk}/", 300),
        ("trace, last attempts page", f"/runs/{big.pk}/?attempts_page={big.tool_calls // 100}", 300),
        ("trace JSON download", f"/runs/{big.pk}/trace.json", None),
        ("approval inbox", "/runs/approvals/", None),
        ("dashboard 1h", "/runs/dashboard/?window=1h", 300),
        ("dashboard 24h", "/runs/dashboard/?window=24h", 300),
        ("dashboard 7d", "/runs/dashboard/?window=7d", 300),
        ("dashboard 30d", "/runs/dashboard/?window=30d", 300),
        ("API runs", "/api/runs/", None),
        ("API attempts of the big run", f"/api/runs/{big.pk}/attempts/", None),
    ]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {ROUNDS} rounds per page, ratio = best / target")
    if replica is not None:
        print(f"pages read from the replica at {replica.settings_dict['HOST']}:{replica.settings_dict['PORT']} "
              "where core/replica.py routes them; 'replica q' = the queries it served")
    print(f"{'page':40} {'best ms':>8} {'median ms':>10} {'queries':>8} {'replica q':>9} {'bytes':>11} "
          f"{'target':>7} {'ratio':>6}")
    results = []
    for name, url, target in pages:
        timings = []
        for _ in range(ROUNDS):
            with ExitStack() as stack:
                queries = stack.enter_context(CaptureQueriesContext(connection))
                on_replica = stack.enter_context(CaptureQueriesContext(replica)) if replica is not None else []
                started = time.perf_counter()
                response = client.get(url)
                body = b"".join(response.streaming_content) if response.streaming else response.content
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code, body[:300])
        median, best = statistics.median(timings), min(timings)
        ratio = f"{best / target:6.2f}" if target else ""
        extra = f"  {len(body) / 1e6 / (best / 1000):.0f} MB/s" if name.startswith("trace JSON") else ""
        print(f"{name:40} {best:8.1f} {median:10.1f} {len(queries):8d} {len(on_replica):9d} {len(body):11,d} "
              f"{target or '':>7} {ratio}{extra}", flush=True)
        results.append((name, best, median, len(queries), len(body), target))
    return results


def raw_read_rate(big) -> None:
    """The floor for the JSON download: reading the same attempt rows as text, nothing else."""
    from django.db import connection

    from runs.models import Attempt

    table = Attempt._meta.db_table
    columns = ", ".join(f.column for f in Attempt._meta.concrete_fields)
    started = time.perf_counter()
    size = 0
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT {columns} FROM "{table}" WHERE run_id = %s ORDER BY started_at, id', [big.pk])
        while rows := cursor.fetchmany(2000):
            size += sum(len(str(r)) for r in rows)
    elapsed = time.perf_counter() - started
    print(f"raw read of the big run's attempt rows (fetch + str): {elapsed * 1000:.0f} ms, {size / 1e6:.1f} MB, "
          f"{size / 1e6 / elapsed:.0f} MB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--attempts", type=int, default=50_000, help="attempts of the one big run")
    parser.add_argument("--approvals", type=int, default=10_000)
    parser.add_argument("--attempt-every", type=int, default=10, help="every Nth run gets a step and 2 attempts")
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-pages"))
    args = parser.parse_args()
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("DEBUG", "true")
    benchenv.start_django(ROOT)
    from django.db import connection

    data = build(args.runs, args.attempts, args.approvals, args.attempt_every)
    ready = f"built in {data['built_s']:.0f} s, rollup rebuilt in {data['rollup_s']:.1f} s" if data["built_s"] \
        else "reused"
    print(f"data on {connection.vendor}: {args.runs:,} runs, {args.attempts:,} attempts in one run, "
          f"{args.approvals:,} pending approvals ({ready})")
    time_pages(data["user"], data["big"], args.runs)
    raw_read_rate(data["big"])


if __name__ == "__main__":
    main()
