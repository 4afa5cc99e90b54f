#!/usr/bin/env python
"""DBOS baseline for bench/step_overhead.py: one workflow of N steps, each writing one row.

Runs under an interpreter that has `dbos` (not a dependency of AgentOps):

    python3.11 -m venv /tmp/dbos && /tmp/dbos/bin/pip install dbos "psycopg[binary]"
    .venv/bin/python bench/step_overhead.py --dbos-python /tmp/dbos/bin/python   # on PostgreSQL

Prints one JSON object: seconds per step (median over the workflow's steps).
"""
import json
import statistics
import sys
import time
from itertools import pairwise

import psycopg
from dbos import DBOS

url, steps = sys.argv[1], int(sys.argv[2])
conn = psycopg.connect(url, autocommit=True)
conn.execute("CREATE TABLE IF NOT EXISTS dbos_bench (id serial PRIMARY KEY, at double precision)")
base, _, name = url.rpartition("/")
DBOS(config={"name": "agentops-bench", "system_database_url": f"{base}/{name}_dbos_sys"})
ends: list[float] = []


@DBOS.step()
def one_row(i: int) -> int:
    with conn.transaction():
        conn.execute("INSERT INTO dbos_bench (at) VALUES (%s)", (time.time(),))
    ends.append(time.perf_counter())
    return i


@DBOS.workflow()
def loop(n: int) -> None:
    for i in range(n):
        one_row(i)


DBOS.launch()
loop(steps)
gaps = [b - a for a, b in pairwise(ends)]
print(json.dumps({"step_s": statistics.median(gaps), "steps": len(ends)}))
DBOS.destroy()
