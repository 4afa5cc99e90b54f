#!/usr/bin/env python
"""How fast is comparing two large runs (the compare page and its API)?

Builds (once per database) two runs of 5,000 attempts each beside N other runs (bench/pages.py's
generator: runs over 30 days, every tenth with a step and two attempts), then times the compare
page and `GET /api/runs/compare/` server side and counts their queries (best and median of 5
rounds), against the issue's target of 500 ms.

The two runs replan as an agent does: `--revisions` plans of `--steps` steps in all, each step
tried `--attempts / --steps` times (retries, then the outcome), outputs of about 1 KB, a few stored
outputs of 1 MB (read only up to the compare cap). B differs from A in one step's arguments in ten,
one outcome in seven, and makes a few steps A did not.

    .venv/bin/python bench/compare.py                                   # SQLite under --var-dir
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/compare.py --runs 1000000
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchenv  # noqa: E402  (bench/ is on sys.path: these run as scripts)
import pages  # noqa: E402  (its Loader and its generator of N runs)

from runtime.stop import StopKind, StopReason, status_for_stop  # noqa: E402

benchenv.prepare()

ROUNDS = 5
TARGET_MS = 500
CAPABILITIES = ["search_documents", "get_document", "create_ticket", "get_ticket_status", "send_notification"]


def _build_pair(user, *, attempts: int, steps: int, revisions: int, big_outputs: int) -> tuple:
    from django.db import transaction

    from capabilities.models import StoredOutput
    from runs.models import Attempt, PlanRevision, Run, Step

    found = list(Run.objects.filter(goal__startswith="compare bench ").order_by("goal"))
    if len(found) == 2:
        return found[0], found[1], None
    started = time.perf_counter()
    now = datetime.now(UTC)
    per_step = max(1, attempts // steps)
    per_revision = max(1, steps // revisions)
    steps = per_revision * revisions
    with transaction.atomic():
        stored = []
        for n in range(big_outputs):
            content = json.dumps({"rows": [{"n": k, "side": n, "text": "row " * 10} for k in range(20_000)]})
            stored.append(StoredOutput.objects.create(sha256=hashlib.sha256(content.encode()).hexdigest(),
                                                      size_bytes=len(content), content=content))
        pair = []
        for side in ("A", "B"):
            run = Run.objects.create(goal=f"compare bench {side}", completion={"capability": "get_document",
                                                                               "exists": True},
                                     budgets={"deadline_s": 86_400}, planner="rules", owner=user,
                                     status=status_for_stop(StopKind.COMPLETED).value,
                                     stop_reason=str(StopReason(StopKind.COMPLETED)), trace_id=f"c{side}".ljust(32, "0"),
                                     tool_calls=attempts, revisions=revisions, iterations=attempts + revisions,
                                     tokens=1000 * revisions, cost=0.01 * revisions, started_at=now - timedelta(hours=1),
                                     finished_at=now)
            revs = [PlanRevision(run=run, number=r + 1, accepted=True, reason_code="initial" if r == 0
                                 else "new_information", reason="" if r == 0 else f"replan {r}",
                                 steps=[{"id": f"s{i + 1}", "capability": CAPABILITIES[i % 5]}
                                        for i in range(per_revision)], tokens=1000, cost=0.01)
                    for r in range(revisions)]
            PlanRevision.objects.bulk_create(revs)
            rev_ids = list(PlanRevision.objects.filter(run=run).order_by("number").values_list("pk", flat=True))
            loader = pages.Loader(Step, ["run", "revision", "index", "key", "capability_name", "arguments",
                                         "arguments_hash", "status"])
            extra = 5 if side == "B" else 0   # steps only B made
            for i in range(steps + extra):
                r, index = divmod(i, per_revision) if i < steps else (revisions - 1, i - steps + per_revision)
                args = {"id": f"DOC-{i}", "q": "policy"} if side == "A" or i % 10 else {"id": f"DOC-{i}", "q": "other"}
                loader.add(run.pk, rev_ids[r], index, f"s{index + 1}", CAPABILITIES[index % 5],
                           args, hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest(), "succeeded")
            loader.flush()
            step_ids = list(Step.objects.filter(run=run).order_by("revision__number", "index")
                            .values_list("pk", "capability_name"))
            attempts_loader = pages.Loader(Attempt, [
                "run", "step", "uid", "number", "kind", "capability_name", "signature", "signature_hash",
                "started_at", "ended_at", "latency_s", "status", "error_code", "error_category", "output", "output_ref",
                "trace_id", "span_id"])
            at = now - timedelta(hours=1)
            for i, (step_id, capability) in enumerate(step_ids):
                for n in range(1, per_step + 1):
                    last = n == per_step
                    status = "ok" if last else "retryable"
                    output = {"id": f"DOC-{i}", "title": "Travel policy", "body": "text " * 180,
                              "version": 2 if side == "B" and i % 7 == 0 else 1} if last else None
                    ref = stored[(i + (side == "B")) % len(stored)].pk if last and stored and i % 500 == 0 else None
                    at += timedelta(milliseconds=200)
                    attempts_loader.add(run.pk, step_id, f"{side}{i:08d}{n:04d}".ljust(32, "0"), n,
                                        "call" if n == 1 else "retry", capability, f"{capability}|{i}",
                                        f"{i:064x}", at, at + timedelta(milliseconds=150), 0.15, status,
                                        "" if last else "timeout", "" if last else "transient",
                                        {"preview": "…", "size_bytes": 1} if ref else output, ref, run.trace_id,
                                        f"{i:08x}{n:08x}")
            attempts_loader.flush()
            pair.append(run)
    return pair[0], pair[1], time.perf_counter() - started


def time_pages(user, a, b) -> None:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from runs.models import Attempt

    client = Client()
    client.force_login(user)
    base = f"a={a.pk}&b={b.pk}"
    pages_timed = [
        ("compare page, first rows", f"/runs/compare/?{base}"),
        ("compare page, last rows", f"/runs/compare/?{base}&page=1000000"),
        ("compare page, differences only", f"/runs/compare/?{base}&differences=1"),
        ("compare page, htmx (steps only)", f"/runs/compare/?{base}&page=2"),
        ("API compare", f"/api/runs/compare/?{base}"),
        ("API compare, 100 rows a page", f"/api/runs/compare/?{base}&page_size=100"),
    ]
    counts = [Attempt.objects.filter(run=r).count() for r in (a, b)]
    print(f"runs #{a.pk} and #{b.pk}: {counts[0]:,} and {counts[1]:,} attempts; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {ROUNDS} rounds, ratio = best / {TARGET_MS} ms")
    print(f"{'request':36} {'best ms':>8} {'median ms':>10} {'queries':>8} {'bytes':>10} {'ratio':>6}")
    for name, url in pages_timed:
        headers = {"HTTP_HX_REQUEST": "true"} if "htmx" in name else {}
        timings = []
        for _ in range(ROUNDS):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url, **headers)
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code, response.content[:300])
        best = min(timings)
        print(f"{name:36} {best:8.1f} {statistics.median(timings):10.1f} {len(queries):8d} "
              f"{len(response.content):10,d} {best / TARGET_MS:6.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="other runs (bench/pages.py's generator)")
    parser.add_argument("--attempts", type=int, default=5_000, help="attempts of each compared run")
    parser.add_argument("--steps", type=int, default=2_500, help="steps of each compared run")
    parser.add_argument("--revisions", type=int, default=25, help="plans of each compared run")
    parser.add_argument("--big-outputs", type=int, default=3, help="stored outputs of ~1 MB the runs end with")
    parser.add_argument("--var-dir", default=os.path.join(tempfile.gettempdir(), "agentops-bench-compare"))
    args = parser.parse_args()
    os.environ.setdefault("AGENTOPS_VAR_DIR", args.var_dir)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("DEBUG", "true")
    benchenv.start_django(ROOT)
    from django.db import connection

    data = pages.build(args.runs, 0, 0, 10)
    a, b, built_s = _build_pair(data["user"], attempts=args.attempts, steps=args.steps, revisions=args.revisions,
                                big_outputs=args.big_outputs)
    if built_s is not None:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    from runs.models import Attempt, Run

    print(f"data on {connection.vendor}: {Run.objects.count():,} runs, {Attempt.objects.count():,} attempts "
          f"({'reused' if built_s is None else f'the pair built in {built_s:.0f} s'})")
    time_pages(data["user"], a, b)


if __name__ == "__main__":
    main()
