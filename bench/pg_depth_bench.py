#!/usr/bin/env python3
"""The cost of a submission batch on PostgreSQL as the queue grows: one
`baton serve` on a fresh database (max_concurrency 1, its one slot held by a
long job, so everything else stays queued), submissions one at a time;
the service's own measure of each batch (its debug line "submit batch",
`us`) is read from its log at two queue lengths.

    python3 bench/pg_depth_bench.py [--baton target/debug/baton] [--queued 2500] [--n 300]

The database runs with `synchronous_commit = off` (the commit's flush would
dwarf the reads being measured); it gets a random name (CREATE DATABASE through psql) and is
dropped at the end, also on failure. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import statistics
import subprocess
import tempfile
from pathlib import Path

from service import Server

ROOT = Path(__file__).resolve().parent.parent


def psql(pg: str, sql: str) -> None:
    subprocess.run(["psql", pg + "/postgres", "-qAtc", sql], check=True)


def submit(s: Server) -> None:
    body = json.dumps({"template": "noop"})
    s.conn.request("POST", "/v1/jobs", body, {"content-type": "application/json"})
    r = s.conn.getresponse()
    r.read()
    if r.status != 202:
        raise SystemExit(f"bench: a submission got {r.status}")


def batches(log: Path) -> list[int]:
    text = log.read_text(errors="replace")
    return [int(m) for m in re.findall(r"submit batch.*?\bus=(\d+)", text)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baton", default=str(ROOT / "target" / "debug" / "baton"))
    ap.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    ap.add_argument("--queued", type=int, default=2500, help="queue length of the second measure")
    ap.add_argument("--n", type=int, default=300, help="submissions measured at each length")
    a = ap.parse_args()
    db = f"baton_test_depth_{secrets.token_hex(4)}"
    psql(a.pg, f"CREATE DATABASE {db}")
    # Without the commit's flush, which would dwarf what the batch reads.
    psql(a.pg, f"ALTER DATABASE {db} SET synchronous_commit = off")
    os.environ["BATON_LOG"] = "baton_serve::store=debug"
    try:
        with tempfile.TemporaryDirectory() as work:
            s = Server(Path(a.baton), Path(work), "node", store=f"{a.pg}/{db}",
                       max_concurrency=1, max_queue_depth=a.queued + 2 * a.n + 10,
                       default_template="hold")
            try:
                s.conn.request("POST", "/v1/jobs", json.dumps({"template": "hold"}),
                               {"content-type": "application/json"})
                s.conn.getresponse().read()
                rows = []
                for label, fill in (("a few", 0), (str(a.queued), a.queued)):
                    for _ in range(fill):
                        submit(s)
                    before = len(batches(s.dir / "serve.log"))
                    for _ in range(a.n):
                        submit(s)
                    us = batches(s.dir / "serve.log")[before:]
                    rows.append((label, statistics.median(us) / 1000,
                                 sorted(us)[int(len(us) * 0.9)] / 1000, len(us)))
            finally:
                s.stop()
    finally:
        psql(a.pg, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    print("| queued | submit batch p50 (ms) | p90 (ms) | batches |")
    print("|---|---|---|---|")
    for label, p50, p90, n in rows:
        print(f"| {label} | {p50:.2f} | {p90:.2f} | {n} |")


if __name__ == "__main__":
    main()
