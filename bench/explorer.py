#!/usr/bin/env python
"""How fast are the tool-call explorer, its full-text search and failure groups at scale?

Builds (once per database) N finished runs with M attempts each over 30 days (one step per
run, 10 % of attempts failing with one of 60 kinds of message carrying ids and numbers; the
arguments and outputs hold words from a small vocabulary and a rare word every 10,000th
attempt), with bench/pages.py's bulk loader (COPY on PostgreSQL, foreign-key triggers off for the load
as pg_restore --disable-triggers does, so a superuser role). The search index is made
after the load (on PostgreSQL the GIN index is dropped and made again, as one would for a bulk
load), failure groups are rebuilt, then each page and API answer is timed server side with its
queries counted (best and median of 5 rounds) beside the issue's target.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_explorer .venv/bin/python bench/explorer.py \\
        --runs 1000000 --attempts-per-run 20
    .venv/bin/python bench/explorer.py --runs 20000                   # SQLite under --var-dir
"""
from __future__ import annotations

import argparse
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

from runtime.stop import RunStatus, StopKind, StopReason  # noqa: E402

benchenv.prepare()

ROUNDS = 5
CAPABILITIES = ["search_documents", "get_document", "create_ticket", "get_ticket_status", "send_notification"]
WORDS = ["travel", "policy", "refund", "invoice", "contract", "printer", "laptop", "expense", "hotel", "flight",
         "receipt", "manager", "approval", "budget", "vendor", "renewal", "license", "payroll", "access", "badge"]
FAILURES = [("timeout", "transient", None, "upstream timed out after {n} ms talking to node-{k}"),
            ("server_error", "transient", 503, "service unavailable for request {id}"),
            ("server_error", "transient", 500, "internal error {uuid} while saving record {n}"),
            ("rate_limited", "rate_limit", 429, "quota exceeded for key {id}, retry in {n} s"),
            ("not_found", "permanent", 404, "no ticket {n}"),
            ("conflict", "permanent", 409, "record {n} was changed by request {id}")]


def build(runs: int, per_run: int, *, end: datetime | None = None) -> dict:
    """The runs were created over the 30 days before `end` (default: now)."""
    from django.contrib.auth.models import User
    from django.db import connection, transaction
    from pages import Loader

    from runs import failures, partitions
    from runs.models import Attempt, PlanRevision, Run, Step

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
    if Run.objects.count() >= runs:
        return {"user": user, "built_s": None}
    started = time.perf_counter()
    rng = random.Random(32)
    now = end or datetime.now(UTC)
    span_s = 30 * 86_400
    vendor = connection.vendor
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute("DROP INDEX IF EXISTS attempt_search_gin_idx")
    # PostgreSQL's attempt months for the span (the scheduler creates months ahead, never past ones).
    months = [partitions.month_start(now - timedelta(seconds=span_s + 60))]
    while months[-1] < partitions.month_start(now):
        months.append(partitions.next_month(months[-1]))
    if partitions.is_partitioned():
        partitions.create_months(months)
    first_run = Run.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    with transaction.atomic():
        if vendor == "postgresql":
            # Foreign-key checks off for the load, as pg_restore --disable-triggers does: the loader
            # writes parents first, and checking 20M deferred rows at COMMIT took over an hour.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = replica")
        loader = Loader(Run, ["goal", "completion", "budgets", "planner", "owner", "status", "stop_reason",
                              "stop_detail", "trace_id", "tool_calls", "created_at", "started_at", "finished_at",
                              "updated_at"])
        for i in range(runs):
            created = now - timedelta(seconds=span_s * i / runs + 60)
            loader.add(f"bench run {i} about {WORDS[i % len(WORDS)]}", {"capability": "search_documents",
                                                                       "exists": True},
                       {"deadline_s": 600}, "rules", user.pk, RunStatus.COMPLETED.value, str(StopReason(StopKind.COMPLETED)),
                       "", f"{first_run + i:032x}",
                       per_run, created, created, created + timedelta(seconds=30), created)
        loader.flush()
        run_ids = list(Run.objects.filter(pk__gt=first_run).order_by("pk").values_list("pk", flat=True))
        revs = Loader(PlanRevision, ["run", "number", "accepted", "steps", "reason_code", "created_at"])
        for rid in run_ids:
            revs.add(rid, 1, True, [], "initial", now)
        revs.flush()
        rev_rows = PlanRevision.objects.filter(run_id__gt=first_run).order_by("run_id").values_list("run_id", "pk")
        steps = Loader(Step, ["run", "revision", "index", "key", "capability_name", "arguments", "arguments_hash",
                              "status"])
        for n, (rid, rev) in enumerate(rev_rows.iterator(chunk_size=20_000)):
            steps.add(rid, rev, 0, "s1", CAPABILITIES[n % len(CAPABILITIES)], {"q": "x"}, "a", "succeeded")
        steps.flush()
        attempts = Loader(Attempt, ["run", "step", "uid", "number", "kind", "capability_name", "signature",
                                    "signature_hash", "started_at", "ended_at", "latency_s", "status", "error_code",
                                    "error_category", "error_message", "http_status", "fingerprint", "output",
                                    "trace_id", "span_id"])
        uid = 0
        step_rows = Step.objects.filter(run_id__gt=first_run).order_by("run_id").values_list("pk", "run_id",
                                                                                          "capability_name")
        for n, (step_id, rid, capability) in enumerate(step_rows.iterator(chunk_size=20_000)):
            created = now - timedelta(seconds=span_s * n / runs + 60)
            for k in range(per_run):
                uid += 1
                at = created + timedelta(milliseconds=k * 500)
                words = " ".join(rng.choice(WORDS) for _ in range(4))
                if uid % 10_000 == 0:
                    words += " zanzibar"
                signature = f'{capability} {{"q":"{words}","n":{uid % 1000}}}'
                if rng.random() < 0.1:
                    code, category, http, template = FAILURES[(uid // 7) % len(FAILURES)]
                    message = template.format(n=rng.randrange(10_000), k=rng.randrange(50),
                                              id=f"{rng.getrandbits(48):012x}",
                                              uuid=f"123e4567-e89b-12d3-a456-{rng.getrandbits(48):012x}")
                    fp = failures.fingerprint(capability=capability, error_code=code, error_category=category,
                                              http_status=http, message=message)
                    attempts.add(rid, step_id, f"{uid:032x}", k + 1, "call", capability, signature, "s" * 64, at, at,
                                 rng.lognormvariate(-2.0, 1.0), "retryable", code, category, message, http, fp, None,
                                 "c" * 32, f"{uid:016x}")
                else:
                    attempts.add(rid, step_id, f"{uid:032x}", k + 1, "call", capability, signature, "s" * 64, at, at,
                                 rng.lognormvariate(-2.0, 1.0), "ok", "", "", "", None, "",
                                 {"documents": [{"id": f"DOC-{uid % 977}", "title": words}]}, "c" * 32,
                                 f"{uid:016x}")
        attempts.flush()
    loaded_s = time.perf_counter() - started
    index_started = time.perf_counter()
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute("SET maintenance_work_mem = '512MB'")
            cursor.execute("CREATE INDEX attempt_search_gin_idx ON runs_attempt USING gin (search_vector)")
    index_s = time.perf_counter() - index_started
    groups_started = time.perf_counter()
    with transaction.atomic():
        failures.rebuild()
    groups_s = time.perf_counter() - groups_started
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE" if vendor == "postgresql" else "ANALYZE")
    return {"user": user, "built_s": time.perf_counter() - started, "loaded_s": loaded_s, "index_s": index_s,
            "groups_s": groups_s}


def time_pages(user) -> None:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from runs.pagination import encode_cursor

    client = Client()
    client.force_login(user)
    from runs import explorer

    row = (explorer.attempt_list(filters=explorer.AttemptFilters()).values_list("started_at", "pk")[5000])
    deep = encode_cursor(*row)
    pages = [
        ("explorer, first page", "/runs/calls/", 200),
        ("explorer, 5,000 rows in (cursor)", f"/runs/calls/?after={deep}&page=101", 200),
        ("explorer, failures (status)", "/runs/calls/?status=retryable", 200),
        ("explorer, error code + capability", "/runs/calls/?error_code=rate_limited&capability=create_ticket", 200),
        ("explorer, HTTP 404", "/runs/calls/?http_status=404", 200),
        ("explorer, search: a rare word", "/runs/calls/?q=zanzibar", 200),
        ("explorer, search: a common word", "/runs/calls/?q=refund", 200),
        ("explorer, search: a phrase", "/runs/calls/?q=%22travel+policy%22", 200),
        ("explorer, search: two words + failures", "/runs/calls/?q=quota+exceeded&status=retryable", 200),
        ("API calls, first page", "/api/calls/", 200),
        ("API calls, search", "/api/calls/?q=zanzibar", 200),
        ("runs list, q (rare word)", "/runs/?q=zanzibar", 200),
        ("runs list, q (common word)", "/runs/?q=refund", 200),
        ("runs list, q (phrase)", "/runs/?q=%22travel+policy%22", 200),
        ("runs list, q (two words)", "/runs/?q=quota+exceeded", 200),
        ("failure groups", "/runs/failures/", 200),
        ("failure groups, most failures", "/runs/failures/?sort=-attempts", 200),
        ("API failure groups", "/api/failure-groups/", 200),
    ]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {ROUNDS} rounds per page, ratio = best / target")
    print(f"{'page':42} {'best ms':>8} {'median ms':>10} {'queries':>8} {'target':>7} {'ratio':>6}")
    for name, url, target in pages:
        timings = []
        for _ in range(ROUNDS):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code, response.content[:300])
        best, median = min(timings), statistics.median(timings)
        print(f"{name:42} {best:8.1f} {median:10.1f} {len(queries):8d} {target:7d} {best / target:6.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--attempts-per-run", type=int, default=20)
    parser.add_argument("--unpartitioned", action="store_true",
                        help="PostgreSQL: attempts in one table (migration runs.0033 reversed), for comparison")
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-explorer"))
    args = parser.parse_args()
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("DEBUG", "true")
    benchenv.start_django(ROOT)
    if args.unpartitioned:
        benchenv.unpartition_attempts(ROOT)
    from django.db import connection

    from runs.models import Attempt, FailureGroup

    data = build(args.runs, args.attempts_per_run)
    if data["built_s"]:
        ready = (f"built in {data['built_s']:.0f} s: loaded {data['loaded_s']:.0f} s, search index "
                 f"{data['index_s']:.0f} s, failure groups {data['groups_s']:.0f} s")
    else:
        ready = "reused"
    from runs import partitions

    layout = f", attempts in {len(partitions.partitions())} partitions" if partitions.is_partitioned() else ""
    print(f"data on {connection.vendor}{layout}: {args.runs:,} runs, {Attempt.objects.count():,} attempts, "
          f"{FailureGroup.objects.count():,} failure groups ({ready})")
    time_pages(data["user"])


if __name__ == "__main__":
    main()
