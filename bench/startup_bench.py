#!/usr/bin/env python3
"""`baton run` start-up and binary size, of two builds of `baton` side by side.

Used for the feature `postgres` (docs/src/benchmarks.md, "Without
PostgreSQL"): a release build with the default features and one with
`--no-default-features`, each copied out of target/release first:

    cargo build --release -p baton --bin baton --no-default-features
    cp target/release/baton /tmp/baton-nopg
    cargo build --release -p baton --bin baton
    cp target/release/baton /tmp/baton-pg
    python3 bench/startup_bench.py /tmp/baton-pg /tmp/baton-nopg

Each build runs `baton --dir D run --lock x -- true` N times (default 200),
the two interleaved run by run so that the machine's load falls on both
alike, after 20 warm-up runs each. Prints a markdown table: wall time,
and the CPU time and minor page faults of each run (`wait4`), which a
loaded machine disturbs less than the wall time.
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time


def run_once(binary, baton_dir):
    """(wall time, CPU time, minor page faults) of one run, in seconds and
    faults: those of `baton` and what it waited for (its `true`)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [binary, "--dir", baton_dir, "run", "--lock", "x", "--", "true"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{binary} exited {p.returncode}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_minflt


def ms(s):
    return f"{s * 1000:.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binaries", nargs="+", help="baton binaries to compare")
    ap.add_argument("-n", type=int, default=200, help="runs of each (default 200)")
    args = ap.parse_args()
    times = {b: [] for b in args.binaries}
    with tempfile.TemporaryDirectory() as d:
        for b in args.binaries:
            for _ in range(20):
                run_once(b, d)
        for _ in range(args.n):
            for b in args.binaries:
                times[b].append(run_once(b, d))
    load = os.getloadavg()[0]
    print(f"{args.n} runs each, interleaved; load average {load:.2f}\n")
    print("| binary | size | wall mean | wall p50 | wall p99 | CPU p50 | minor faults p50 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for b, runs in times.items():
        wall = sorted(r[0] for r in runs)
        cpu = [r[1] for r in runs]
        faults = [r[2] for r in runs]
        size = os.path.getsize(b)
        p99 = wall[min(len(wall) - 1, int(len(wall) * 0.99))]
        print(
            f"| `{b}` | {size / 2**20:.2f} MiB | {ms(statistics.mean(wall))} "
            f"| {ms(statistics.median(wall))} | {ms(p99)} | {ms(statistics.median(cpu))} "
            f"| {statistics.median(faults):.0f} |"
        )


if __name__ == "__main__":
    main()
