#!/usr/bin/env python3
"""State-file edits per second under contention: `baton state edit` against the
same workload done by a lock-then-write shell script with flock(1).

    python3 bench/state_bench.py [--procs 8] [--edits 40] [--rounds 3] [--quick] [--skip-build]

Edits: P processes, each E times: under a lock, read counter.json, add 1 to .n
with a filter, write the file back. Two filters: jq (what scripts use; jq 1.6
takes ~30 ms to start, so it dominates) and awk (starts in ~1 ms, so the
locking and writing themselves show). Variants:

  baton state edit       baton state edit F -- FILTER (temp file, fsync, rename, fsync dir)
  flock(1) + fsync       ( flock 9; FILTER <F >F.tmp && sync F.tmp && mv F.tmp F && sync DIR ) 9>L
                         (the same durability, by hand)
  flock(1), no fsync     ( flock 9; FILTER <F >F.tmp && mv F.tmp F ) 9>L  (the usual script;
                         atomic against crashes of the writer, not against power loss)
  no lock                FILTER <F >F.tmp.$$ && mv F.tmp.$$ F  (what the lock is for: lost updates)

Appends: P processes x E appends of one JSON line: `baton state append` against
`( flock 9; printf ... >>F && sync F ) 9>L`, without the sync, and a bare `>>`.

All P workers of a variant start at one instant (they block reading one pipe,
closed once all are started); variants are interleaved over R rounds and the
median round is reported. Python standard library only; prints a markdown table
on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from run import bin_dir  # bench/run.py: where cargo puts the binaries

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

AWK_INCREMENT = (
    r'match($0, /"n":[0-9]+/) { n = substr($0, RSTART+4, RLENGTH-4) + 1; '
    r'$0 = substr($0, 1, RSTART-1) "\"n\":" n substr($0, RSTART+RLENGTH) } 1'
)
FILTERS = {
    "jq": ["jq", "-c", ".n += 1"],
    "awk": ["awk", AWK_INCREMENT],
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def q(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


# --------------------------------------------------------------------------- build


def build(skip: bool) -> Path:
    if not skip:
        cmd = ["cargo", "build", "--release", "-p", "baton"]
        log("$ " + " ".join(cmd))
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            sys.exit("state_bench.py: cargo build failed")
    baton = bin_dir() / "baton"
    if not baton.is_file():
        sys.exit(f"state_bench.py: {baton} missing (build failed?)")
    return baton


# --------------------------------------------------------------------------- workloads


@dataclass
class Variant:
    workload: str  # "edit" or "append"
    filt: str  # filter name, "-" for appends
    name: str
    durable: str  # what survives what
    step: str  # one iteration of the worker loop, sh syntax; $W = worker, $i = iteration
    ops_per_s: list[float] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    failed: str | None = None


def variants(baton: Path, bdir: Path, work: Path, have_jq: bool) -> list[Variant]:
    f = work / "counter.json"
    lk = work / "counter.lock"
    ev = work / "events.jsonl"
    elk = work / "events.lock"
    b = q([str(baton), "--dir", str(bdir)])
    out: list[Variant] = []
    for fname, argv in FILTERS.items():
        if fname == "jq" and not have_jq:
            continue
        filt = q(argv)
        F, L, T, D = q([str(f)]), q([str(lk)]), q([str(f) + ".tmp"]), q([str(work)])
        out += [
            Variant("edit", fname, "baton state edit", "crash + power loss",
                    f"{b} state edit {F} -- {filt}"),
            Variant("edit", fname, "flock(1) + fsync", "crash + power loss",
                    f"( flock 9 || exit 1; {filt} <{F} >{T} && sync {T} && mv {T} {F} && sync {D} ) 9>{L}"),
            Variant("edit", fname, "flock(1), no fsync", "crash only",
                    f"( flock 9 || exit 1; {filt} <{F} >{T} && mv {T} {F} ) 9>{L}"),
            Variant("edit", fname, "no lock", "nothing (lost updates)",
                    f"{filt} <{F} >{T}.$$ && mv {T}.$$ {F}"),
        ]
    E, EL = q([str(ev)]), q([str(elk)])
    rec = '"{\\"w\\":$W,\\"i\\":$i}"'
    out += [
        Variant("append", "-", "baton state append", "crash + power loss, torn-line repair",
                f"{b} state append {E} {rec}"),
        Variant("append", "-", "flock(1) + fsync", "crash + power loss",
                f"( flock 9 || exit 1; printf '%s\\n' {rec} >>{E} && sync {E} ) 9>{EL}"),
        Variant("append", "-", "flock(1), no fsync", "crash only (torn lines stay)",
                f"( flock 9 || exit 1; printf '%s\\n' {rec} >>{E} ) 9>{EL}"),
        Variant("append", "-", "bare >> (O_APPEND)", "nothing (torn lines stay)",
                f"printf '%s\\n' {rec} >>{E}"),
    ]
    return out


def worker_script(step: str, edits: int) -> str:
    return (
        "read _ || true\n"
        "exec </dev/null\n"
        "i=0\n"
        f"while [ $i -lt {edits} ]; do\n"
        f"  {step} || exit 1\n"
        "  i=$((i+1))\n"
        "done\n"
    )


def run_variant(v: Variant, work: Path, procs: int, edits: int) -> None:
    counter = work / "counter.json"
    events = work / "events.jsonl"
    counter.write_text('{"n":0}\n')
    for p in (events, work / "counter.json.tmp"):
        if p.exists():
            p.unlink()
    script = worker_script(v.step, edits)
    r, w = os.pipe()
    children = []
    try:
        for wid in range(procs):
            env = dict(os.environ, W=str(wid))
            children.append(subprocess.Popen(
                ["sh", "-c", script], stdin=r, env=env, cwd=work,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            ))
        os.close(r)
        r = -1
        start = time.perf_counter()
        os.close(w)
        w = -1
        errs = []
        for c in children:
            _, err = c.communicate()
            if c.returncode != 0:
                errs.append(err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {c.returncode}"])
        elapsed = time.perf_counter() - start
    finally:
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)
    expected = procs * edits
    if errs and v.name != "no lock":
        v.failed = f"worker failed: {errs[0][0]}"
        return
    if v.workload == "edit":
        try:
            n = json.loads(counter.read_text())["n"]
        except (OSError, ValueError, KeyError) as e:
            v.failed = f"counter unreadable: {e}"
            return
        v.lost.append(expected - n)
    else:
        lines = events.read_bytes().split(b"\n")
        whole = [ln for ln in lines[:-1] if valid_json(ln)]
        v.lost.append(expected - len(whole))
    v.ops_per_s.append(expected / elapsed)


def valid_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------- report


def fs_type(path: Path) -> str:
    best, kind = "", "?"
    try:
        with open("/proc/mounts") as m:
            for line in m:
                parts = line.split()
                if len(parts) >= 3 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def table(vs: list[Variant], procs: int, edits: int) -> str:
    rows = [
        "| workload | filter | variant | survives | ops/s | per op | lost or torn | vs flock(1) + fsync |",
        "|---|---|---|---|---:|---:|---|---:|",
    ]
    ref: dict[tuple[str, str], float] = {}
    for v in vs:
        if v.name == "flock(1) + fsync" and v.ops_per_s:
            ref[(v.workload, v.filt)] = statistics.median(v.ops_per_s)
    for v in vs:
        what = f"{v.workload} ({procs}x{edits})"
        if v.failed or not v.ops_per_s:
            rows.append(f"| {what} | {v.filt} | {v.name} | {v.durable} | - | - | {v.failed or 'not run'} | - |")
            continue
        ops = statistics.median(v.ops_per_s)
        lost = max(v.lost)
        total = procs * edits
        verdict = "0 (PASS)" if lost == 0 else f"{lost} of {total} (worst round)"
        r = ref.get((v.workload, v.filt))
        ratio = f"{ops / r:.2f}x" if r else "-"
        rows.append(
            f"| {what} | {v.filt} | {v.name} | {v.durable} | {ops:.0f} | {1000 / ops:.2f} ms | {verdict} | {ratio} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--edits", type=int, default=40, help="edits (or appends) per process")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="--edits 10 --rounds 1")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--dir", type=Path, default=None, help="where to put the files [a temp dir]")
    args = ap.parse_args()
    if args.quick:
        args.edits, args.rounds = 10, 1
    for tool in ("flock", "awk", "sync", "sh"):
        if not shutil.which(tool):
            sys.exit(f"state_bench.py: {tool} not found")
    have_jq = shutil.which("jq") is not None
    baton = build(args.skip_build)
    with tempfile.TemporaryDirectory(prefix="baton-state-bench-", dir=args.dir) as tmp:
        work = Path(tmp).resolve()
        bdir = work / "baton"
        vs = variants(baton, bdir, work, have_jq)
        for rnd in range(args.rounds):
            for v in vs:
                if v.failed:
                    continue
                log(f"round {rnd + 1}/{args.rounds}: {v.workload} {v.filt} {v.name}")
                run_variant(v, work, args.procs, args.edits)
        fs = fs_type(work)
    cpu = platform.processor() or platform.machine()
    print(
        f"{args.procs} processes x {args.edits} operations each, median of {args.rounds} rounds; "
        f"files on {fs}; {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}"
        + ("" if have_jq else "; jq not installed, jq rows skipped")
    )
    print()
    print(table(vs, args.procs, args.edits))
    print()
    print(bar(vs))


def bar(vs: list[Variant]) -> str:
    """The bar of the performance issue: the time of a `baton state edit` with jq,
    against the flock(1) + jq + fsync script of the same durability."""
    by = {(v.workload, v.filt, v.name): v for v in vs}
    b, f = by.get(("edit", "jq", "baton state edit")), by.get(("edit", "jq", "flock(1) + fsync"))
    if not (b and f and b.ops_per_s and f.ops_per_s and not b.failed and not f.failed):
        return "- **n/a** `baton state edit` with jq <= flock(1) + jq + fsync: not measured (jq missing?)"
    ratio = statistics.median(f.ops_per_s) / statistics.median(b.ops_per_s)
    verdict = "PASS" if ratio <= 1.0 else "FAIL"
    return (f"- **{verdict}** time per `baton state edit` with jq <= the flock(1) + jq + fsync script: "
            f"{1000 / statistics.median(b.ops_per_s):.2f} ms vs {1000 / statistics.median(f.ops_per_s):.2f} ms "
            f"({ratio:.2f}x)")


if __name__ == "__main__":
    main()
