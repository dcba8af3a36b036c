#!/usr/bin/env python3
"""baton's benchmark: the contention workload and the CLI overhead, side by side.

    python3 bench/run.py [--procs 8] [--iterations 200] [--hold-ms 1] [--quick]

Contention: P processes, each M times: lock, read a counter file, +1, write it
back, hold H, unlock. Run for baton's library, blocking flock(2) from C (the
physical reference), `baton run` and `flock(1)`. All P processes of a variant
are released at the same instant (they block reading one shared pipe, which is
closed once all are started).

Overhead: N sequential uncontended invocations of `baton run -- true`,
`flock F true` and plain `true`, timed inside the Rust worker.

Standard library only. See bench/README.md for what the columns mean.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- build


def target_dir() -> Path:
    env = os.environ.get("CARGO_TARGET_DIR")
    if env:
        return Path(env).resolve()
    try:
        meta = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )
        return Path(json.loads(meta.stdout)["target_directory"])
    except (subprocess.CalledProcessError, OSError, ValueError, KeyError):
        return ROOT / "target"


def bin_dir(profile: str = "release") -> Path:
    """Where cargo puts the binaries of `profile`: under the target triple
    when .cargo/config.toml names one (`build.target`, as this repository
    does to link baton statically), else directly under the target dir."""
    try:
        import tomllib

        with open(ROOT / ".cargo" / "config.toml", "rb") as f:
            triple = tomllib.load(f).get("build", {}).get("target")
    except (OSError, ValueError):
        triple = None
    base = target_dir()
    return base / triple / profile if isinstance(triple, str) else base / profile


def cargo_build(packages: list[str]) -> bool:
    cmd = ["cargo", "build", "--release"]
    for p in packages:
        cmd += ["-p", p]
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, cwd=ROOT).returncode == 0


def build(skip: bool) -> tuple[Path, Path | None, Path, str | None]:
    """Returns (worker, baton or None, flock_ref, note about baton)."""
    OUT.mkdir(parents=True, exist_ok=True)
    note = None
    if not skip:
        if not cargo_build(["baton", "baton-bench"]):
            log("building baton together with baton-bench failed; retrying baton-bench alone")
            note = "baton CLI not built (cargo build -p baton failed)"
            if not cargo_build(["baton-bench"]):
                sys.exit("run.py: cannot build baton-bench")
    rel = bin_dir()
    worker = rel / "baton-bench-worker"
    if not worker.is_file():
        sys.exit(f"run.py: {worker} missing (build failed?)")
    baton: Path | None = rel / "baton"
    if not baton.is_file():
        baton, note = None, note or f"baton CLI not built ({rel / 'baton'} missing)"
    for name in ("flock_ref", "run_ref"):
        cc = ["gcc", "-O2", "-Wall", "-o", str(OUT / name), str(BENCH / f"{name}.c")]
        log("$ " + " ".join(cc))
        if subprocess.run(cc).returncode != 0:
            sys.exit(f"run.py: gcc failed on bench/{name}.c")
    return worker, baton, OUT / "flock_ref", note


def baton_works(baton: Path) -> str | None:
    """None if `baton --dir D run --lock x -- true` works, else why not."""
    with tempfile.TemporaryDirectory(prefix="baton-bench-probe-") as d:
        try:
            r = subprocess.run(
                [str(baton), "--dir", str(Path(d) / "baton"), "run", "--lock", "probe", "--", "true"],
                capture_output=True, text=True, timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"baton CLI not working ({e})"
        if r.returncode != 0:
            err = (r.stderr or r.stdout).strip().splitlines()
            return f"baton CLI not working (`baton run` exited {r.returncode}: {err[-1] if err else ''})"
    return None


# --------------------------------------------------------------------------- stats


def percentile(sorted_xs: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    if not sorted_xs:
        return float("nan")
    rank = -(-p * len(sorted_xs) // 100)  # ceil
    return sorted_xs[min(max(int(rank), 1), len(sorted_xs)) - 1]


def jain(xs: list[float]) -> float:
    s2 = sum(x * x for x in xs)
    if not xs or s2 == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * s2)


def fmt_dur(ns: float) -> str:
    if ns != ns:  # nan
        return "-"
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.0f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


# --------------------------------------------------------------------------- contention


@dataclass
class Result:
    variant: str
    skipped: str | None = None
    error: str | None = None
    ops: int = 0
    wall_ns: int = 0
    waits: list[int] = field(default_factory=list)
    proc_means: list[float] = field(default_factory=list)
    handoffs: list[int] = field(default_factory=list)
    regrants: int = 0  # grants to the process that held the lock just before
    counter: int = 0
    expected: int = 0

    def merge(self, other: "Result") -> None:
        """Pools another round of the same variant into this one."""
        self.error = self.error or other.error
        self.ops += other.ops
        self.wall_ns += other.wall_ns
        self.waits += other.waits
        self.proc_means += other.proc_means
        self.handoffs += other.handoffs
        self.regrants += other.regrants
        self.counter += other.counter
        self.expected += other.expected

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.error is None

    @property
    def ops_per_s(self) -> float:
        return self.ops / (self.wall_ns / 1e9) if self.wall_ns else float("nan")

    def wait(self, p: float) -> float:
        return percentile(sorted(self.waits), p)


def run_contention(name: str, argv_for, procs: int, iters: int, hold_us: int,
                   timeout_s: float) -> Result:
    """argv_for(i, tmp) -> argv of process i (must accept --out, --gate; they go
    before a `--` in it, if any)."""
    res = Result(name, expected=procs * iters)
    tmp = Path(tempfile.mkdtemp(prefix="baton-bench-"))
    try:
        outs = [tmp / f"waits.{i}" for i in range(procs)]
        r, w = os.pipe()
        children = []
        try:
            for i in range(procs):
                argv = argv_for(i, tmp)
                cut = argv.index("--") if "--" in argv else len(argv)
                argv[cut:cut] = ["--out", str(outs[i]), "--gate"]
                children.append(subprocess.Popen(argv, stdin=r, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.PIPE))
        finally:
            os.close(r)
            os.close(w)  # EOF on the shared stdin: all start now
        deadline = time.monotonic() + timeout_s
        errors = []
        for i, c in enumerate(children):
            try:
                _, err = c.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for k in children:
                    k.kill()
                for k in children:
                    k.wait()
                res.error = f"timed out after {timeout_s:.0f} s"
                return res
            if c.returncode != 0:
                errors.append(f"process {i} exited {c.returncode}: "
                              f"{err.decode(errors='replace').strip()}")
        if errors:
            res.error = "; ".join(errors[:3])
            log(f"  {name}: " + res.error)
        starts, ends, held = [], [], []
        for proc, f in enumerate(outs):
            if not f.exists():
                continue
            waits = []
            for line in f.read_text().splitlines():
                fields = line.split()
                if not fields:
                    continue
                if fields[0] == "elapsed":
                    starts.append(int(fields[2]))
                    ends.append(int(fields[3]))
                    continue
                waits.append(int(fields[0]))
                if len(fields) == 3:
                    held.append((int(fields[1]), int(fields[2]), proc))
            res.waits += waits
            res.ops += len(waits)
            if waits:
                res.proc_means.append(sum(waits) / len(waits))
        if starts:
            res.wall_ns = max(ends) - min(starts)
        # Handoff: from a holder starting its release to the next holder's
        # acquire returning (the time the lock does no useful work).
        held.sort()
        res.handoffs = [nxt[0] - cur[1] for cur, nxt in zip(held, held[1:])]
        res.regrants = sum(cur[2] == nxt[2] for cur, nxt in zip(held, held[1:]))
        counter = tmp / "counter"
        try:
            res.counter = int(counter.read_text().strip())
        except (OSError, ValueError):
            res.counter = 0
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- overhead


@dataclass
class Overhead:
    label: str
    times: list[int] = field(default_factory=list)
    skipped: str | None = None

    @property
    def mean(self) -> float:
        return sum(self.times) / len(self.times) if self.times else float("nan")


OVERHEAD_CHUNKS = 10


def run_overhead(worker: Path, label: str, cmd: list[str], n: int) -> Overhead:
    o = Overhead(label)
    with tempfile.TemporaryDirectory(prefix="baton-bench-oh-") as d:
        out = Path(d) / "times"
        argv = [str(worker), "overhead", "--n", str(n), "--out", str(out), "--"]
        argv += [a.replace("{tmp}", d) for a in cmd]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            o.skipped = f"failed: {r.stderr.strip()}"
            return o
        o.times = [int(x) for x in out.read_text().split()]
    return o


# --------------------------------------------------------------------------- report


def run_handoff(worker: Path, baton: Path | None, trials: int,
                flock_ref: Path | None = None) -> dict[str, list[int]]:
    """Two `grab` processes on one lock: the first holds, the second waits in
    line; then the first is released cleanly or SIGKILLed. Returns, per kind,
    the nanoseconds from the release (its own stamp) or from the kill (taken
    just before sending SIGKILL) to the waiter holding the lock."""
    out: dict[str, list[int]] = {"release": [], "SIGKILL": []}
    for k in range(trials):
        kind = "release" if k % 2 == 0 else "SIGKILL"
        with tempfile.TemporaryDirectory(prefix="baton-handoff-") as tmp:
            argv = [str(worker), "grab", "--dir", f"{tmp}/baton", "--lock", "h"]
            if flock_ref is not None:
                argv = [str(flock_ref), "--grab", f"{tmp}/lockfile"]
            holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert holder.stdout is not None and holder.stdin is not None
            holder.stdout.readline()
            waiter = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert waiter.stdout is not None and waiter.stdin is not None
            # Wait until the waiter is in line (status via the CLI when built).
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if baton is None or flock_ref is not None:
                    time.sleep(0.05)  # no way to ask flock(2) who waits
                    break
                st = subprocess.run([str(baton), "--dir", f"{tmp}/baton", "lock", "status", "h",
                                     "--json"], capture_output=True, text=True)
                if '"waiters": 1' in st.stdout:
                    break
                time.sleep(0.002)
            time.sleep(0.01)  # let the waiter settle into its blocking wait
            if kind == "release":
                holder.stdin.write("release\n")
                holder.stdin.flush()
                released = int(holder.stdout.readline().split()[1])
            else:
                released = time.monotonic_ns()
                holder.kill()
            held = int(waiter.stdout.readline().split()[1])
            out[kind].append(held - released)
            waiter.stdin.close()
            holder.wait()
            waiter.wait()
    return out


def handoff_table(variants: list[tuple[str, dict[str, list[int]]]]) -> list[str]:
    rows = ["| lock | handoff | trials | p50 | p99 | max |", "|---|---|---:|---:|---:|---:|"]
    for name, h in variants:
        for kind, label in (("release", "clean release -> waiter holds"),
                            ("SIGKILL", "holder SIGKILLed -> waiter holds")):
            xs = sorted(h[kind])
            if xs:
                rows.append(f"| {name} | {label} | {len(xs)} | {fmt_dur(percentile(xs, 50))} | "
                            f"{fmt_dur(percentile(xs, 99))} | {fmt_dur(xs[-1])} |")
    return rows


def machine_info() -> list[str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def first_line(argv):
        try:
            r = subprocess.run(argv, capture_output=True, text=True)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"

    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                             capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        rev = "?"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"- machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {cpu}",
        f"- kernel: {platform.system()} {platform.release()}",
        f"- load average at start: {load}",
        f"- baton: {rev}; {first_line(['flock', '--version'])}; {first_line(['gcc', '--version'])}",
    ]


def contention_table(results: list[Result], hold_ns: int) -> list[str]:
    ref = next((r for r in results if r.variant == "C flock(2)" and r.ok), None)
    rows = ["| variant | ops/s | efficiency | wait p50 | wait p99 | wait max | Jain fairness "
            "| lost updates | throughput vs C flock(2) | handoff p50 / p99 | re-grants |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in results:
        if r.skipped:
            rows.append(f"| {r.variant} | skipped: {r.skipped} | | | | | | | | | |")
            continue
        lost = r.expected - r.counter
        check = f"{lost} (PASS)" if lost == 0 and not r.error else (
            f"{lost} (FAIL: counter {r.counter}/{r.expected})")
        if r.error:
            check += f" ERROR: {r.error}"
        eff = r.ops * hold_ns / r.wall_ns if r.wall_ns else float("nan")
        vs = f"{r.ops_per_s / ref.ops_per_s:.2f}x" if ref and r.wall_ns else "-"
        ho = sorted(r.handoffs)
        handoff = (f"{fmt_dur(percentile(ho, 50))} / {fmt_dur(percentile(ho, 99))}"
                   if ho else "-")
        regrant = f"{r.regrants / len(ho):.0%}" if ho else "-"
        rows.append(
            f"| {r.variant} | {r.ops_per_s:.0f} | {eff:.1%} | {fmt_dur(r.wait(50))} "
            f"| {fmt_dur(r.wait(99))} | {fmt_dur(max(r.waits) if r.waits else float('nan'))} "
            f"| {jain(r.proc_means):.4f} | {check} | {vs} | {handoff} | {regrant} |")
    return rows


def overhead_table(ohs: list[Overhead]) -> list[str]:
    fl = next((o for o in ohs if o.label.startswith("flock") and o.times), None)
    rows = ["| command | mean | p50 | p99 | vs flock(1) (mean) | vs flock(1) (p50) |",
            "|---|---:|---:|---:|---:|---:|"]
    fl50 = percentile(sorted(fl.times), 50) if fl else float("nan")
    for o in ohs:
        if o.skipped:
            rows.append(f"| `{o.label}` | skipped: {o.skipped} | | | | |")
            continue
        s = sorted(o.times)
        vs = f"{o.mean / fl.mean:.2f}x" if fl else "-"
        vs50 = f"{percentile(s, 50) / fl50:.2f}x" if fl else "-"
        rows.append(f"| `{o.label}` | {fmt_dur(o.mean)} | {fmt_dur(percentile(s, 50))} "
                    f"| {fmt_dur(percentile(s, 99))} | {vs} | {vs50} |")
    return rows


def bars(results: list[Result], ohs: list[Overhead]) -> list[str]:
    by = {r.variant: r for r in results}
    lib, c = by.get("baton library"), by.get("C flock(2)")
    out = []

    def bar(text: str, ok: bool | None, detail: str) -> None:
        verdict = "n/a" if ok is None else ("PASS" if ok else "FAIL")
        out.append(f"- **{verdict}** {text}: {detail}")

    for r in results:
        if r.ok:
            bar(f"{r.variant}: no lost update", r.counter == r.expected and r.ops == r.expected,
                f"counter {r.counter}, expected {r.expected}")
    if lib and c and lib.ok and c.ok:
        bar("library throughput >= C flock(2)", lib.ops_per_s >= c.ops_per_s,
            f"{lib.ops_per_s:.0f} vs {c.ops_per_s:.0f} ops/s "
            f"({lib.ops_per_s / c.ops_per_s:.2f}x)")
        bar("library p99 wait <= C flock(2)", lib.wait(99) <= c.wait(99),
            f"{fmt_dur(lib.wait(99))} vs {fmt_dur(c.wait(99))}")
        bar("library fairness >= 0.99", jain(lib.proc_means) >= 0.99,
            f"Jain {jain(lib.proc_means):.4f} (C flock(2): {jain(c.proc_means):.4f})")
        fifo = by.get("C OFD FIFO line")
        if fifo and fifo.ok:
            out.append(
                f"- (diagnostic, no bar) what strict FIFO order costs: the same waiting line in C "
                f"without baton's bookkeeping vs C flock(2) {fifo.ops_per_s / c.ops_per_s:.2f}x; "
                f"baton library vs that line {lib.ops_per_s / fifo.ops_per_s:.2f}x")
    else:
        bar("library vs C flock(2)", None, "a variant did not run")
    ob = next((o for o in ohs if o.label.startswith("baton") and o.times), None)
    of = next((o for o in ohs if o.label.startswith("flock") and o.times), None)
    if ob and of:
        bar("`baton run` per-invocation overhead <= flock(1)", ob.mean <= of.mean,
            f"mean {fmt_dur(ob.mean)} vs {fmt_dur(of.mean)} ({ob.mean / of.mean:.2f}x)")
        ref = next((o for o in ohs if o.label.startswith("C run_ref") and o.times), None)
        if ref:
            out.append(
                f"- (diagnostic, no bar) what baton run's guarantees cost: its system calls in C "
                f"(bench/run_ref.c) vs flock(1) {ref.mean / of.mean:.2f}x; baton vs that "
                f"program {ob.mean / ref.mean:.2f}x (the rest is baton's implementation)")
    else:
        bar("`baton run` per-invocation overhead <= flock(1)", None, "baton CLI not measured")
    return out


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=8, help="concurrent processes (default 8)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="lock/unlock cycles per process (default 200, 50 with --quick)")
    ap.add_argument("--hold-ms", type=float, default=1.0, help="critical section (default 1)")
    ap.add_argument("--overhead-n", type=int, default=None,
                    help="sequential invocations per overhead row (default 300, 100 with --quick)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="runs of each variant, interleaved and pooled (default 3, 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations: under a minute")
    ap.add_argument("--skip-build", action="store_true", help="use the binaries already built")
    args = ap.parse_args()
    iters = args.iterations or (50 if args.quick else 200)
    n_oh = args.overhead_n or (100 if args.quick else 300)
    rounds = args.rounds or (1 if args.quick else 3)
    procs = args.procs
    hold_us = round(args.hold_ms * 1000)
    if min(procs, iters, n_oh, rounds) < 1 or hold_us < 0:
        sys.exit("run.py: --procs, --iterations, --rounds, --overhead-n must be >= 1, "
                 "--hold-ms >= 0")

    worker, baton, flock_ref, note = build(args.skip_build)
    if baton is not None:
        why = baton_works(baton)
        if why:
            baton, note = None, why
    if not shutil.which("flock"):
        sys.exit("run.py: flock(1) (util-linux) not found")
    if note:
        log(f"NOTE: {note}; the baton CLI rows are skipped")

    head = ["# baton benchmark", ""] + machine_info() + [
        f"- parameters: P={procs} processes x M={iters} iterations, hold H={args.hold_ms:g} ms, "
        f"{rounds} interleaved round(s) pooled; overhead N={n_oh} sequential invocations", ""]
    print("\n".join(head), flush=True)

    # Generous: 10x the serial hold time plus 5 ms per CLI op, plus slack.
    timeout_s = 60 + procs * iters * (hold_us / 1e6 * 10 + 0.05)
    w = str(worker)
    variants = [
        ("baton library", None, lambda i, t: [
            w, "lib", "--dir", str(t / "baton"), "--lock", "bench", "--counter",
            str(t / "counter"), "--iterations", str(iters), "--hold-us", str(hold_us)]),
        ("C flock(2)", None, lambda i, t: [
            str(flock_ref), "--lockfile", str(t / "lockfile"), "--counter", str(t / "counter"),
            "--iterations", str(iters), "--hold-us", str(hold_us)]),
        ("C OFD FIFO line", None, lambda i, t: [
            str(flock_ref), "--fifo", "--lockfile", str(t / "lockfile"), "--counter",
            str(t / "counter"), "--iterations", str(iters), "--hold-us", str(hold_us)]),
        ("baton run (CLI)", note, lambda i, t: [
            w, "cli", "--tool", "baton", "--baton", str(baton), "--dir", str(t / "baton"),
            "--lock", "bench", "--counter", str(t / "counter"), "--iterations", str(iters),
            "--hold-us", str(hold_us)]),
        ("flock(1) (CLI)", None, lambda i, t: [
            w, "cli", "--tool", "flock", "--lockfile", str(t / "lockfile"), "--counter",
            str(t / "counter"), "--iterations", str(iters), "--hold-us", str(hold_us)]),
    ]
    results = {name: Result(name, skipped=skip) if skip else None
               for name, skip, _ in variants}
    for rnd in range(rounds):
        for name, skip, argv_for in variants:
            if skip or (results[name] and results[name].error):
                continue
            log(f"contention round {rnd + 1}/{rounds}: {name} ...")
            t0 = time.monotonic()
            r = run_contention(name, argv_for, procs, iters, hold_us, timeout_s)
            log(f"  {time.monotonic() - t0:.1f} s, {r.ops_per_s:.0f} ops/s")
            if results[name] is None:
                results[name] = r
            else:
                results[name].merge(r)
    results = list(results.values())

    oh_cmds = [
        ("baton --dir D run --lock x -- true",
         None if baton is None else [str(baton), "--dir", "{tmp}/baton", "run", "--lock", "x",
                                     "--", "true"]),
        ("flock F true", ["flock", "{tmp}/lockfile", "true"]),
        # A diagnostic: baton run's system calls, in C (bench/run_ref.c).
        ("C run_ref D true", [str(OUT / "run_ref"), "{tmp}", "true"]),
        ("true", ["true"]),
    ]
    # Interleaved in chunks, so that a load change on a shared machine hits
    # every row alike.
    chunks = min(OVERHEAD_CHUNKS, n_oh)
    ohs = [Overhead(label, skipped=None if cmd else (note or "baton CLI not built"))
           for label, cmd in oh_cmds]
    log(f"overhead: {n_oh} invocations of each command, in {chunks} interleaved chunks ...")
    for k in range(chunks):
        part = n_oh // chunks + (1 if k < n_oh % chunks else 0)
        for o, (label, cmd) in zip(ohs, oh_cmds):
            if o.skipped is None:
                got = run_overhead(worker, label, cmd, part)
                o.skipped = got.skipped
                o.times += got.times

    trials = 20 if args.quick else 100
    log(f"handoff: {trials} trials of one holder and one waiter ...")
    handoffs = [("baton library", run_handoff(worker, baton, trials)),
                ("C flock(2)", run_handoff(worker, baton, trials, flock_ref))]

    body = ["## Contention", "",
            f"{procs} processes x {iters} iterations: lock, read counter, +1, write, "
            f"hold {args.hold_ms:g} ms, unlock; {rounds} round(s) pooled (ops/s = all ops / "
            "summed wall time; waits pooled; fairness over every process of every round).", ""]
    body += contention_table(results, hold_us * 1000)
    body += ["", "## Per-invocation overhead, uncontended", "",
             f"{n_oh} sequential invocations of each, timed in baton-bench-worker "
             f"(spawn to exit), the rows interleaved in {min(OVERHEAD_CHUNKS, n_oh)} chunks.",
             ""]
    body += overhead_table(ohs)
    body += ["", "## Handoff, two processes, otherwise idle", "",
             "One `grab` process holds the lock, a second waits in line (library); the "
             "holder then releases (measured from its own stamp just before `release()`) "
             "or is SIGKILLed (measured from just before the kill) until the waiter holds "
             "the lock. The same with the C flock(2) program. Bars: release p99 < 1 ms; "
             "SIGKILL: next waiter within 10 ms.", ""]
    body += handoff_table(handoffs)
    body += ["", "## Bars", ""] + bars(results, ohs)
    if note:
        body += ["", f"Note: {note}."]
    print("\n".join(body))
    (OUT / "results.md").write_text("\n".join(head + body) + "\n")
    log(f"\nwritten to {OUT / 'results.md'}")
    failed = any(r.error or (r.ok and r.counter != r.expected) for r in results)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
