#!/usr/bin/env python3
"""Supersede latency of `baton run --group KEY --mode supersede`.

For each trial: an old run's command (a small Python program) is running in
group KEY; a newer run is launched. Two intervals are measured on
CLOCK_MONOTONIC, which is the same clock in every process:

  1. newer run launched -> old command receives SIGTERM  (bar: p99 < 50 ms)
  2. old command exits   -> newer command starts        (bar: p99 < 5 ms)

The old command stamps the time it receives SIGTERM and exits at once
(os._exit); the newer command is `baton-bench-worker crit`, which prints its
start stamp first thing in main. Usage: python3 bench/group_bench.py [--trials N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import bin_dir  # bench/run.py: where cargo puts the binaries

ROOT = Path(__file__).resolve().parent.parent

OLD = r"""
import os, signal, sys, time
stamp = sys.argv[1]
def on_term(*_):
    t = time.monotonic_ns()
    with open(stamp, "w") as f:
        f.write(f"{t} {time.monotonic_ns()}")
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(60)
"""


def pct(xs: list[int], p: float) -> float:
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def fmt(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} µs"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--skip-build", action="store_true")
    args = ap.parse_args()
    if not args.skip_build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "baton", "-p", "baton-bench"],
                       cwd=ROOT, check=True)
    baton = bin_dir() / "baton"
    worker = bin_dir() / "baton-bench-worker"
    to_term: list[int] = []
    handover: list[int] = []
    for _ in range(args.trials):
        with tempfile.TemporaryDirectory(prefix="baton-group-bench-") as tmp:
            t = Path(tmp)
            base = [str(baton), "--dir", str(t / "baton"), "run", "--group", "g",
                    "--mode", "supersede", "--"]
            old = subprocess.Popen(base + [sys.executable, "-c", OLD, str(t / "term")],
                                   stdout=subprocess.PIPE, text=True)
            assert old.stdout is not None
            old.stdout.readline()  # the old command runs and handles TERM
            t0 = time.monotonic_ns()
            new = subprocess.Popen(base + [str(worker), "crit", "--counter", str(t / "counter"),
                                           "--hold-us", "0"],
                                   stdout=subprocess.PIPE, text=True)
            out, _ = new.communicate(timeout=30)
            old.wait(timeout=30)
            started = int(out.split()[0])
            got_term, exited = (int(x) for x in (t / "term").read_text().split())
            to_term.append(got_term - t0)
            handover.append(started - exited)
    rows = [
        "| interval | trials | p50 | p99 | max | bar |",
        "|---|---:|---:|---:|---:|---|",
        f"| newer run launched -> old command gets SIGTERM | {len(to_term)} | "
        f"{fmt(pct(to_term, 50))} | {fmt(pct(to_term, 99))} | {fmt(max(to_term))} | "
        f"p99 < 50 ms: {'PASS' if pct(to_term, 99) < 50e6 else 'FAIL'} |",
        f"| old command exits -> newer command starts | {len(handover)} | "
        f"{fmt(pct(handover, 50))} | {fmt(pct(handover, 99))} | {fmt(max(handover))} | "
        f"p99 < 5 ms: {'PASS' if pct(handover, 99) < 5e6 else 'FAIL'} |",
    ]
    print("\n".join(rows))
    print(f"(median of all: {fmt(statistics.median(to_term))} / {fmt(statistics.median(handover))})")


if __name__ == "__main__":
    main()
