#!/usr/bin/env python3
"""The Python lock API against what Python programs use today, side by side.

    python3 bench/python_bench.py [--procs 8] [--iterations 200] [--hold-ms 1]
                                  [--rounds 3] [--json-edits 40] [--quick] [--skip-build]

Builds the release wheel (scripts/build-wheel --release) and installs it
into a venv of its own (target/python/bench-venv) with the pinned peers of
python/requirements-dev.txt. Then, in one run:

Contention (the workload of bench/run.py, README "The contention workload"):
P Python processes, each M times: lock, read a counter file, +1, write it
back, hold H, unlock; all released at one instant; variants interleaved over
R rounds and pooled. Variants: `baton.Lock`, `filelock.FileLock` (its
default: try a non-blocking flock every 50 ms) and `portalocker.lock`
(blocking flock(2), waiting in the kernel), `fasteners.InterProcessLock`
(non-blocking flock retried with a 10-100 ms backoff) and `baton.FileLock`
(baton's filelock adapter: baton's lock, then the path's flock, for
processes still on filelock). Columns as in bench/run.py.

Uncontended: one process, N acquire+release pairs on a lock nobody else
uses (after 50 warm-up pairs); median and p99 per pair.

Lost updates: P processes x E read-modify-writes of one JSON file
(json.load, n += 1, json.dump) under each lock, and without a lock (which
must lose updates, or the check proves nothing).

Prints markdown on stdout and writes bench/out/python.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import (OUT, ROOT, Result, fmt_dur, jain, log, machine_info, percentile,
                 run_contention)

BENCH = Path(__file__).resolve().parent
WORKER = BENCH / "python_worker.py"
IMPLS = [("baton.Lock", "baton"), ("baton.FileLock", "baton-filelock"),
         ("filelock.FileLock", "filelock"), ("portalocker.lock", "portalocker"),
         ("fasteners.InterProcessLock", "fasteners")]


def uncontended(py: str, impl: str, n: int) -> list[int]:
    """Nanoseconds of N acquire+release pairs in one process, no other user."""
    with tempfile.TemporaryDirectory(prefix="baton-pybench-u-") as d:
        out = subprocess.run([py, str(WORKER), "uncontended", "--impl", impl, "--dir", d,
                              "--iterations", str(n)], capture_output=True, text=True, check=True)
        return sorted(json.loads(out.stdout))


def venv_python(skip_build: bool) -> str:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    venv = target / "python" / "bench-venv"
    py = venv / "bin" / "python"
    req = ROOT / "python" / "requirements-dev.txt"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "-r", str(req)], check=True)
    if not skip_build:
        wheel = subprocess.run([str(ROOT / "scripts" / "build-wheel"), "--release", str(py)],
                               check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--force-reinstall", "--no-deps", wheel], check=True)
    return str(py)


def json_check(py: str, impl: str, procs: int, edits: int) -> tuple[int, int]:
    """(final n, expected) of P processes x E JSON read-modify-writes."""
    with tempfile.TemporaryDirectory(prefix="baton-pybench-json-") as d:
        f = Path(d) / "state.json"
        f.write_text('{"n": 0}')
        r, w = os.pipe()
        try:
            kids = [subprocess.Popen([py, str(WORKER), "json", "--impl", impl, "--dir", d,
                                      "--file", str(f), "--iterations", str(edits), "--gate"],
                                     stdin=r) for _ in range(procs)]
        finally:
            os.close(r)
            os.close(w)
        for k in kids:
            if k.wait(timeout=600) != 0:
                sys.exit(f"python_bench: a {impl} JSON worker exited {k.returncode}")
        try:
            n = json.loads(f.read_text())["n"]
        except ValueError:
            n = 0
        return n, procs * edits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=None, help="default 200 (50 with --quick)")
    ap.add_argument("--hold-ms", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (1 with --quick)")
    ap.add_argument("--json-edits", type=int, default=40)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-build", action="store_true", help="use the wheel already installed")
    a = ap.parse_args()
    iters = a.iterations or (50 if a.quick else 200)
    rounds = a.rounds or (1 if a.quick else 3)
    hold_us = round(a.hold_ms * 1000)
    py = venv_python(a.skip_build)
    versions = subprocess.run(
        [py, "-c", "import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in "
                   "['baton-locks', 'filelock', 'portalocker', 'fasteners']))"],
        capture_output=True, text=True, check=True).stdout.strip()
    head = ["# baton Python benchmark", ""] + machine_info() + [
        f"- Python: {subprocess.run([py, '-V'], capture_output=True, text=True).stdout.strip()}; "
        f"{versions} (release wheel)",
        f"- parameters: P={a.procs} processes x M={iters} iterations, hold H={a.hold_ms:g} ms, "
        f"{rounds} interleaved round(s) pooled; lost-update check P={a.procs} x "
        f"{a.json_edits} JSON edits", ""]
    print("\n".join(head), flush=True)

    un_rows = ["| variant | median | p99 |", "|---|---:|---:|"]
    medians = {}
    for label, impl in IMPLS:
        log(f"uncontended: {label} ...")
        ns = uncontended(py, impl, 2000 if not a.quick else 500)
        medians[impl] = percentile(ns, 50)
        un_rows.append(f"| {label} | {fmt_dur(percentile(ns, 50))} | {fmt_dur(percentile(ns, 99))} |")

    timeout_s = 120 + a.procs * iters * (hold_us / 1e6 * 10 + 0.1)
    results: dict[str, Result] = {}
    for rnd in range(rounds):
        for label, impl in IMPLS:
            log(f"contention round {rnd + 1}/{rounds}: {label} ...")
            t0 = time.monotonic()
            r = run_contention(label, lambda i, t, impl=impl: [
                py, str(WORKER), "contend", "--impl", impl, "--dir", str(t),
                "--counter", str(t / "counter"), "--iterations", str(iters),
                "--hold-us", str(hold_us)], a.procs, iters, hold_us, timeout_s)
            log(f"  {time.monotonic() - t0:.1f} s, {r.ops_per_s:.0f} ops/s")
            if label in results:
                results[label].merge(r)
            else:
                results[label] = r
    base = results["baton.Lock"]
    rows = ["| variant | ops/s | baton.Lock vs it | wait p50 | wait p99 | wait max "
            "| Jain fairness | lost updates | handoff p50 / p99 | re-grants |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for label, _ in IMPLS:
        r = results[label]
        lost = r.expected - r.counter
        check = f"{lost} (PASS)" if lost == 0 and not r.error else f"{lost} (FAIL)"
        if r.error:
            check += f" ERROR: {r.error}"
        ho = sorted(r.handoffs)
        rows.append(
            f"| {label} | {r.ops_per_s:.0f} | {base.ops_per_s / r.ops_per_s:.2f}x "
            f"| {fmt_dur(r.wait(50))} | {fmt_dur(r.wait(99))} "
            f"| {fmt_dur(max(r.waits) if r.waits else float('nan'))} | {jain(r.proc_means):.4f} "
            f"| {check} | {fmt_dur(percentile(ho, 50))} / {fmt_dur(percentile(ho, 99))} "
            f"| {r.regrants / len(ho):.0%} |" if ho else f"| {label} | no data | | | | | | {check} | | |")

    json_rows = ["| lock | JSON edits | final n | lost |", "|---|---:|---:|---|"]
    lost_by = {}
    for label, impl in IMPLS + [("no lock (control)", "none")]:
        log(f"lost-update check: {label} ...")
        n, expected = json_check(py, impl, a.procs, a.json_edits)
        lost_by[impl] = expected - n
        verdict = ("PASS" if n == expected else "FAIL") if impl != "none" else (
            "lost, as expected" if n != expected else "none lost: the check did not bite")
        json_rows.append(f"| {label} | {expected} | {n} | {expected - n} ({verdict}) |")

    fl, pl = results["filelock.FileLock"], results["portalocker.lock"]
    bars = [
        f"- **{'PASS' if base.ops_per_s >= 1.3 * fl.ops_per_s else 'FAIL'}** baton.Lock ops/s >= "
        f"1.3x filelock: {base.ops_per_s:.0f} vs {fl.ops_per_s:.0f} "
        f"({base.ops_per_s / fl.ops_per_s:.2f}x)",
        f"- **{'PASS' if base.ops_per_s >= pl.ops_per_s else 'FAIL'}** baton.Lock ops/s >= "
        f"portalocker: {base.ops_per_s:.0f} vs {pl.ops_per_s:.0f} "
        f"({base.ops_per_s / pl.ops_per_s:.2f}x)",
        f"- **{'PASS' if all(lost_by[i] == 0 for _, i in IMPLS) else 'FAIL'}** 0 lost updates "
        f"under every lock (without a lock: {lost_by['none']} lost)",
    ]
    bars.insert(0, f"- **{'PASS' if medians['baton'] <= 1.2 * medians['portalocker'] else 'FAIL'}** "
                f"uncontended median within 1.2x portalocker's: "
                f"{medians['baton'] / medians['portalocker']:.2f}x")
    out = head + ["## Uncontended", ""] + un_rows + ["", "## Contention", ""] + rows + ["", "## Lost updates", ""] + json_rows + [
        "", "## Bars", ""] + bars
    print("\n".join(out[len(head):]))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "python.md").write_text("\n".join(out) + "\n")
    if any(r.error or r.counter != r.expected for r in results.values()) or any(
            lost_by[i] for _, i in IMPLS):
        sys.exit(1)


if __name__ == "__main__":
    main()
