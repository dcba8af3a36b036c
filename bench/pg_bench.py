#!/usr/bin/env python3
"""Many machines on PostgreSQL: baton's locks and job service on one
PostgreSQL database, side by side with etcd and with baton's local backend.

    python3 bench/pg_bench.py [--quick] [--skip-build] [--rounds 3] [--pg URL] ...

1. Lock cycles: P processes (default 8), each M times, run the critical
   section (`baton-bench-worker crit`: counter file +1, hold H = 1 ms) under a
   lock through a CLI: `baton --backend postgres://... run --lock L --`,
   `etcdctl --endpoints=... lock L --` against a local one-node etcd, and
   `baton --dir D run --lock L --` (the local backend); baton on PostgreSQL
   runs twice, in plain (`sslmode=disable`) and with TLS (`sslmode=require`,
   when the server has `ssl` on), on the same server. All P released at
   once (run.py's gate); rounds interleaved (A B C A B C ...), median
   cycles/s, waits pooled. Lost updates must be 0. Bar: baton on PostgreSQL
   >= 3x etcdctl.
2. Job service: J trivial jobs (`true`) through 1 and through 3 `baton serve`
   nodes on one database (max_concurrency C, cluster-wide), the submissions
   split evenly over the nodes; rounds interleaved, medians. Then the claim
   latency: jobs submitted at a steady R/s for D s, created_at -> started_at
   as the service stores them, p50 / p99.

Each measurement gets a fresh database with a random name (CREATE DATABASE
through psql), dropped at the end, also on failure; etcd runs on free ports
with a temporary data dir and is stopped at the end. etcd-server and
etcd-client are installed with apt-get when missing (unless --no-install),
else that row says why it was skipped. Standard library only; prints
markdown on stdout (progress on stderr) and writes it to bench/out/pg.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from run import Result, cargo_build, fmt_dur, log, percentile, run_contention, bin_dir
from service import Server, unix_ms

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"

PG_LOCK, ETCD_LOCK, LOCAL_LOCK = "baton on PostgreSQL", "etcdctl lock (etcd)", "baton, local backend"
PG_TLS_LOCK = "baton on PostgreSQL, TLS"
NO_BACKEND = "this baton has no --backend"


def die(msg: str) -> None:
    sys.exit(f"pg_bench.py: {msg}")


def run_quiet(argv: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """Runs argv capturing its output; a missing program or a timeout is exit 127 / 124."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except OSError as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {timeout:.0f} s")


def last_line(r: subprocess.CompletedProcess) -> str:
    lines = (r.stderr or r.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {r.returncode}"


# --------------------------------------------------------------------------- build


def build(skip: bool) -> tuple[Path, Path, Path]:
    """(baton, baton-bench-worker, baton-bench-http), release builds."""
    if not skip and not cargo_build(["baton", "baton-bench"]):
        die("cargo build failed")
    rel = bin_dir()
    bins = rel / "baton", rel / "baton-bench-worker", rel / "baton-bench-http"
    for b in bins:
        if not b.is_file():
            die(f"{b} missing (build failed?)")
    return bins


# --------------------------------------------------------------------------- PostgreSQL


class Databases:
    """Fresh databases with random names on one server; drop_all() removes them."""

    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/")
        self.created: list[str] = []

    def psql(self, sql: str) -> subprocess.CompletedProcess:
        return run_quiet(["psql", f"{self.base}/postgres", "-v", "ON_ERROR_STOP=1", "-qAtc", sql])

    def version(self) -> str:
        r = self.psql("SHOW server_version")
        return r.stdout.strip() if r.returncode == 0 else "?"

    def ssl(self) -> bool:
        """Whether the server has TLS on (`SHOW ssl`)."""
        r = self.psql("SHOW ssl")
        return r.returncode == 0 and r.stdout.strip() == "on"

    def create(self) -> str:
        """A fresh database's URL, in plain (`sslmode=disable`): the rows
        measured before TLS existed stay comparable."""
        name = f"baton_bench_{secrets.token_hex(6)}"
        r = self.psql(f"CREATE DATABASE {name}")
        if r.returncode != 0:
            die(f"CREATE DATABASE through psql at {self.base} failed: {last_line(r)}")
        self.created.append(name)
        return f"{self.base}/{name}?sslmode=disable"

    def drop_all(self) -> None:
        while self.created:
            name = self.created.pop()
            r = self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            if r.returncode != 0:
                log(f"WARNING: could not drop database {name}: {last_line(r)}")


def baton_backend_works(baton: Path, url: str) -> tuple[str | None, str | None]:
    """(skipped, error): why the PostgreSQL lock rows cannot run, if they cannot."""
    migrate = run_quiet([str(baton), "--backend", url, "db", "migrate"])
    if "unexpected argument '--backend'" in migrate.stderr:
        return NO_BACKEND, None
    probe = run_quiet([str(baton), "--backend", url, "run", "--lock", "probe", "--", "true"])
    if "unexpected argument '--backend'" in probe.stderr:
        return NO_BACKEND, None
    if probe.returncode != 0:
        return None, f"`baton --backend URL run --lock probe -- true` failed: {last_line(probe)}"
    return None, None


# --------------------------------------------------------------------------- etcd


def ensure_etcd(install: bool) -> str | None:
    """None when etcd and etcdctl are on PATH (installing them if allowed), else why not."""
    if shutil.which("etcd") and shutil.which("etcdctl"):
        return None
    if not install:
        return "etcd / etcdctl not installed (--no-install)"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "etcd / etcdctl not installed (installing needs root and apt-get)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = None
    for update_first in (False, True):
        if update_first:
            log("$ apt-get update")
            run_quiet(["apt-get", "update", "-q"], timeout=600, env=env)
        log("$ apt-get install -y etcd-server etcd-client")
        r = run_quiet(["apt-get", "install", "-y", "-q", "etcd-server", "etcd-client"],
                      timeout=600, env=env)
        if r.returncode == 0 and shutil.which("etcd") and shutil.which("etcdctl"):
            return None
    return f"etcd not installed (apt-get install etcd-server etcd-client: {last_line(r)})"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """One etcd member on 127.0.0.1, free ports, its data in `work`."""

    def __init__(self, work: Path) -> None:
        client, peer = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
        self.endpoint = client
        self.log = open(work / "etcd.log", "wb")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "bench", "--data-dir", str(work / "etcd-data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"bench={peer}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    def ctl(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return run_quiet(["etcdctl", f"--endpoints={self.endpoint}", *args], timeout=timeout)

    def wait_healthy(self, timeout: float = 30) -> str | None:
        """None once `etcdctl endpoint health` is OK, else why not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"etcd exited {self.proc.returncode} (see its log)"
            if self.ctl("endpoint", "health", timeout=5).returncode == 0:
                return None
            time.sleep(0.2)
        return f"etcd not healthy after {timeout:.0f} s"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def etcd_version() -> str:
    r = run_quiet(["etcd", "--version"])
    return r.stdout.splitlines()[0] if r.returncode == 0 and r.stdout else "?"


# --------------------------------------------------------------------------- lock cycles


@dataclass
class LockRow:
    name: str
    tool: str  # how one cycle is run, for the table
    argv_for: object = None  # (i, tmp) -> worker argv, as run_contention wants
    skipped: str | None = None
    error: str | None = None
    rounds: list[Result] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.error is None and bool(self.rounds)

    @property
    def cycles_s(self) -> float:
        return statistics.median(r.ops_per_s for r in self.rounds) if self.rounds else float("nan")

    @property
    def lost(self) -> int:
        return sum(r.expected - r.counter for r in self.rounds)

    def wait(self, p: float) -> float:
        return percentile(sorted(w for r in self.rounds for w in r.waits), p)


def cli_argv(worker: Path, prefix: list[str], iters: int, hold_us: int):
    """argv_for of a variant whose lock tool is `prefix` (crit is appended)."""
    def argv_for(_i: int, tmp: Path) -> list[str]:
        return [str(worker), "cli", "--tool", "cmd", "--counter", str(tmp / "counter"),
                "--iterations", str(iters), "--hold-us", str(hold_us), "--"] + prefix
    return argv_for


def lock_rows(baton: Path, worker: Path, pg_url: str | None, pg_skip: str | None,
              tls_skip: str | None, etcd: Etcd | None, etcd_skip: str | None, iters: int,
              hold_us: int) -> list[LockRow]:
    b = str(baton)
    pg = LockRow(PG_LOCK, "`baton --backend postgres://…?sslmode=disable run --lock L -- crit`",
                 skipped=pg_skip)
    tls = LockRow(PG_TLS_LOCK, "`baton --backend postgres://…?sslmode=require run --lock L -- crit`",
                  skipped=pg_skip or tls_skip)
    if pg_url and not pg_skip:
        pg.argv_for = cli_argv(worker, [b, "--backend", pg_url, "run", "--lock", "bench", "--"],
                               iters, hold_us)
        if not tls_skip:
            tls_url = pg_url.replace("sslmode=disable", "sslmode=require")
            tls.argv_for = cli_argv(worker, [b, "--backend", tls_url, "run", "--lock", "bench",
                                             "--"], iters, hold_us)
    et = LockRow(ETCD_LOCK, "`etcdctl --endpoints=… lock L -- crit`", skipped=etcd_skip)
    if etcd and not etcd_skip:
        et.argv_for = cli_argv(worker, [shutil.which("etcdctl") or "etcdctl",
                                        f"--endpoints={etcd.endpoint}", "lock", "bench", "--"],
                               iters, hold_us)
    local = LockRow(LOCAL_LOCK, "`baton --dir D run --lock L -- crit`",
                    argv_for=local_argv(worker, baton, iters, hold_us))
    return [pg, tls, et, local]


def local_argv(worker: Path, baton: Path, iters: int, hold_us: int):
    def argv_for(_i: int, tmp: Path) -> list[str]:
        return [str(worker), "cli", "--tool", "baton", "--baton", str(baton), "--dir",
                str(tmp / "baton"), "--lock", "bench", "--counter", str(tmp / "counter"),
                "--iterations", str(iters), "--hold-us", str(hold_us)]
    return argv_for


def measure_locks(rows: list[LockRow], rounds: int, procs: int, iters: int, hold_us: int) -> None:
    # Generous: 10x the serial hold time plus 100 ms per CLI cycle, plus slack.
    timeout_s = 60 + procs * iters * (hold_us / 1e6 * 10 + 0.1)
    for rnd in range(rounds):
        for row in rows:
            if row.skipped or row.error:
                continue
            log(f"lock round {rnd + 1}/{rounds}: {row.name} ...")
            r = run_contention(row.name, row.argv_for, procs, iters, hold_us, timeout_s)
            row.rounds.append(r)
            row.error = r.error
            log(f"  {r.ops_per_s:.0f} cycles/s, lost updates {r.expected - r.counter}")


# --------------------------------------------------------------------------- job service


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def start_nodes(baton: Path, work: Path, url: str, n: int, tag: str, **settings) -> list[Server]:
    nodes: list[Server] = []
    try:
        for k in range(n):
            nodes.append(Server(baton, work, f"{tag}-node{k}", store=url, **settings))
    except BaseException:
        stop_nodes(nodes)
        raise
    return nodes


def stop_nodes(nodes: list[Server]) -> None:
    for s in nodes:
        s.stop()


def gen_parallel(gen: Path, mode: str, nodes: list[Server], per_node: list[list[str]]) -> list[dict]:
    """Runs one `baton-bench-http MODE` per node at once; their JSON reports."""
    body = json.dumps({"template": "noop"})
    procs = [subprocess.Popen([str(gen), mode, "--addr", s.addr, "--path", "/v1/jobs",
                               "--body", body, *extra], stdout=subprocess.PIPE, text=True)
             for s, extra in zip(nodes, per_node)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        die(f"baton-bench-http {mode} failed")
    return [json.loads(o) for o in outs]


def max_overlap(jobs: list[dict]) -> int:
    """The most jobs running at one instant, from the stored start and end times (ms)."""
    events = []
    for j in jobs:
        if j.get("started_at") and j.get("finished_at"):
            events += [(unix_ms(j["started_at"]), 1), (unix_ms(j["finished_at"]), -1)]
    running = peak = 0
    for _, d in sorted(events):  # at one instant, ends (-1) sort before starts
        running += d
        peak = max(peak, running)
    return peak


@dataclass
class ServeRun:
    """One measurement through n nodes."""
    jobs_s: float = float("nan")
    submit_s: float = float("nan")
    waits_ms: list[float] = field(default_factory=list)
    per_node: dict = field(default_factory=dict)
    peak: int = 0
    problems: list[str] = field(default_factory=list)


def check_jobs(jobs: list[dict], expected: int, what: str, run: ServeRun) -> None:
    ok = sum(1 for j in jobs if j["status"] == "succeeded")
    if len(jobs) != expected or ok != expected:
        run.problems.append(f"{what}: {ok} of {expected} jobs succeeded ({len(jobs)} listed)")
    for j in jobs:
        run.per_node[j.get("node")] = run.per_node.get(j.get("node"), 0) + 1
    run.peak = max_overlap(jobs)


def serve_throughput(baton: Path, gen: Path, work: Path, dbs: Databases, n: int, tag: str,
                     a: argparse.Namespace) -> ServeRun:
    run = ServeRun()
    nodes = start_nodes(baton, work, dbs.create(), n, tag, max_concurrency=a.concurrency,
                        max_queue_depth=a.jobs + 500)
    try:
        reports = gen_parallel(gen, "burst", nodes, [["--count", str(c), "--conns", str(a.conns)]
                                                     for c in split(a.jobs, n)])
        accepted = sum(r["statuses"].get("202", 0) for r in reports)
        if accepted != a.jobs:
            run.problems.append(f"{tag}: {accepted} of {a.jobs} accepted")
        nodes[0].wait_idle(a.jobs, timeout=600)
        jobs = nodes[0].jobs()
        check_jobs(jobs, a.jobs, tag, run)
        first = min(r["first_send_unix_ms"] for r in reports)
        last_end = max(unix_ms(j["finished_at"]) for j in jobs if j["finished_at"])
        run.jobs_s = a.jobs / ((last_end - first) / 1000)
        run.submit_s = a.jobs / max(r["elapsed_s"] for r in reports)
        log(f"  {n} node(s): {run.jobs_s:.0f} jobs/s (submissions alone {run.submit_s:.0f}/s)")
    finally:
        stop_nodes(nodes)
    return run


def serve_claim_latency(baton: Path, gen: Path, work: Path, dbs: Databases, n: int,
                        a: argparse.Namespace) -> ServeRun:
    run = ServeRun()
    total = int(a.rate * a.duration)
    nodes = start_nodes(baton, work, dbs.create(), n, f"claim{n}", max_concurrency=a.concurrency,
                        max_queue_depth=total + 500)
    try:
        gen_parallel(gen, "seq", nodes, [["--count", "5"]] * n)  # warm-up
        nodes[0].wait_idle(5 * n, timeout=60)
        warm = {j["id"] for j in nodes[0].jobs()}
        reports = gen_parallel(gen, "rate", nodes, [["--rate", f"{a.rate / n:g}", "--duration",
                                                     f"{a.duration:g}", "--conns", "2"]] * n)
        sent = sum(r["count"] for r in reports)
        nodes[0].wait_idle(sent, timeout=600)
        jobs = [j for j in nodes[0].jobs() if j["id"] not in warm]
        check_jobs(jobs, sent, f"claim latency, {n} node(s)", run)
        run.waits_ms = sorted(float(j["queue_wait_ms"]) for j in jobs
                              if j.get("queue_wait_ms") is not None)
        log(f"  {n} node(s): claim p50 {percentile(run.waits_ms, 50):.0f} ms, "
            f"p99 {percentile(run.waits_ms, 99):.0f} ms over {len(run.waits_ms)} jobs")
    finally:
        stop_nodes(nodes)
    return run


@dataclass
class Serve:
    tp: dict[int, list[ServeRun]] = field(default_factory=lambda: {1: [], 3: []})
    claim: dict[int, ServeRun] = field(default_factory=dict)

    def problems(self) -> list[str]:
        runs = [r for rs in self.tp.values() for r in rs] + list(self.claim.values())
        return [p for r in runs for p in r.problems]


def measure_serve(baton: Path, gen: Path, work: Path, dbs: Databases, a: argparse.Namespace) -> Serve:
    res = Serve()
    for rnd in range(a.rounds):
        for n in (1, 3):
            log(f"serve throughput round {rnd + 1}/{a.rounds}: {a.jobs} jobs through {n} node(s)")
            res.tp[n].append(serve_throughput(baton, gen, work, dbs, n, f"tp{rnd}-{n}", a))
    for n in (1, 3):
        log(f"claim latency: {a.rate:g} jobs/s for {a.duration:g} s through {n} node(s)")
        res.claim[n] = serve_claim_latency(baton, gen, work, dbs, n, a)
    return res


# --------------------------------------------------------------------------- report


def met(ok: bool | None) -> str:
    return "-" if ok is None else ("bar met" if ok else "**NOT met**")


def lock_table(rows: list[LockRow]) -> list[str]:
    by = {r.name: r for r in rows}
    et = by[ETCD_LOCK]
    out = ["| variant | one cycle | cycles/s | vs etcdctl | wait p50 | wait p99 | lost updates "
           "| bar | met? |", "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        bar = ">= 3x etcdctl" if r.name == PG_LOCK else "-"
        if not r.ok:
            why = f"skipped: {r.skipped}" if r.skipped else f"**failed**: {r.error}"
            out.append(f"| {r.name} | {r.tool} | {why} | | | | | {bar} | - |")
            continue
        ratio = r.cycles_s / et.cycles_s if et.ok else float("nan")
        verdict = met(ratio >= 3 if et.ok else None) if r.name == PG_LOCK else "-"
        lost = f"{r.lost}" if r.lost == 0 else f"**{r.lost}** (exclusion broken)"
        out.append(f"| {r.name} | {r.tool} | {r.cycles_s:.0f} | "
                   f"{'-' if ratio != ratio else f'{ratio:.2f}x'} | {fmt_dur(r.wait(50))} | "
                   f"{fmt_dur(r.wait(99))} | {lost} | {bar} | {verdict} |")
    return out


def lock_details(rows: list[LockRow]) -> list[str]:
    out = []
    by = {r.name: r for r in rows}
    plain, tls = by[PG_LOCK], by[PG_TLS_LOCK]
    if plain.ok and tls.ok:
        out.append(f"- TLS: {tls.cycles_s / plain.cycles_s:.2f}x the plain cycles/s on the same "
                   f"server (wait p50 {fmt_dur(tls.wait(50))} vs {fmt_dur(plain.wait(50))})")
    for r in rows:
        if r.rounds:
            per = ", ".join(f"{x.ops_per_s:.0f}" for x in r.rounds)
            out.append(f"- {r.name}: cycles/s per round {per}; wait max "
                       f"{fmt_dur(r.wait(100))}; counter {sum(x.counter for x in r.rounds)} "
                       f"of {sum(x.expected for x in r.rounds)}")
    return out


def serve_table(s: Serve, a: argparse.Namespace) -> list[str]:
    one, three = (statistics.median(x.jobs_s for x in s.tp[n]) for n in (1, 3))
    sub1, sub3 = (statistics.median(x.submit_s for x in s.tp[n]) for n in (1, 3))
    c1, c3 = s.claim[1].waits_ms, s.claim[3].waits_ms

    def lat(w: list[float]) -> str:
        return f"{percentile(w, 50):.0f} / {percentile(w, 99):.0f} / {w[-1] if w else 0:.0f} ms"

    return [
        "| measure | 1 node | 3 nodes | 3 nodes / 1 node | bar | met? |",
        "|---|---:|---:|---:|---|---|",
        f"| throughput: {a.jobs} jobs (`true`), max_concurrency {a.concurrency} cluster-wide, "
        f"first submission to last stored end | {one:.0f} jobs/s | {three:.0f} jobs/s "
        f"| {three / one:.2f}x | none set (reported) | - |",
        f"| (diagnostic) the submissions alone, {a.conns} connections per node "
        f"| {sub1:.0f} jobs/s | {sub3:.0f} jobs/s | {sub3 / sub1:.2f}x | | |",
        f"| claim latency (created_at -> started_at, as stored) at {a.rate:g} jobs/s for "
        f"{a.duration:g} s: p50 / p99 / max | {lat(c1)} | {lat(c3)} "
        f"| p99 {percentile(c3, 99) / max(percentile(c1, 99), 1):.2f}x | none set (reported) | - |",
    ]


def serve_details(s: Serve, a: argparse.Namespace) -> list[str]:
    out = []
    for n in (1, 3):
        per = ", ".join(f"{x.jobs_s:.0f}" for x in s.tp[n])
        sub = ", ".join(f"{x.submit_s:.0f}" for x in s.tp[n])
        peak = max(x.peak for x in s.tp[n] + [s.claim[n]])
        nodes = sorted(s.tp[n][-1].per_node.values(), reverse=True)
        out.append(f"- {n} node(s): jobs/s per round {per} (submissions alone {sub}); most jobs "
                   f"running at once, from the stored times: {peak} (cap {a.concurrency}); jobs "
                   f"run per node in the last round: {nodes}; claim-latency jobs: "
                   f"{len(s.claim[n].waits_ms)}")
    return out


def header(a: argparse.Namespace, load0: float, pg_version: str, etcd_ver: str) -> list[str]:
    rev = run_quiet(["git", "describe", "--always", "--dirty"], cwd=ROOT).stdout.strip() or "?"
    return [
        "# baton on PostgreSQL: many machines", "",
        f"- machine: {os.cpu_count()} CPUs, Linux {platform.release()}; load average (1 min) "
        f"before / after: {load0:.2f} / {os.getloadavg()[0]:.2f}",
        f"- baton {rev}; PostgreSQL {pg_version} at {a.pg}; {etcd_ver}",
        f"- locks: P={a.procs} processes x M={a.iterations} cycles, hold {a.hold_ms:g} ms, "
        f"{a.rounds} interleaved round(s), median cycles/s, waits pooled",
        f"- job service: {a.jobs} jobs per throughput round, {a.rounds} interleaved round(s), "
        f"medians; claim latency {a.rate:g} jobs/s for {a.duration:g} s", ""]


# --------------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432",
                    help="PostgreSQL server URL, without a database (one is created per measurement)")
    ap.add_argument("--procs", type=int, default=8, help="contending processes (default 8)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="lock cycles per process (default 100, 25 with --quick)")
    ap.add_argument("--hold-ms", type=float, default=1.0, help="critical section (default 1)")
    ap.add_argument("--jobs", type=int, default=None, help="jobs per throughput round (2000; 500)")
    ap.add_argument("--concurrency", type=int, default=8, help="max_concurrency, cluster-wide")
    ap.add_argument("--conns", type=int, default=4, help="submitting connections per node")
    ap.add_argument("--rate", type=float, default=50, help="claim latency: jobs per second")
    ap.add_argument("--duration", type=float, default=None, help="claim latency: seconds (10; 3)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (3; 1)")
    ap.add_argument("--quick", action="store_true", help="fewer cycles, jobs and rounds")
    ap.add_argument("--skip-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--no-install", action="store_true", help="never apt-get install etcd")
    a = ap.parse_args()
    q = a.quick
    a.iterations = a.iterations or (25 if q else 100)
    a.jobs = a.jobs or (500 if q else 2000)
    a.duration = a.duration or (3.0 if q else 10.0)
    a.rounds = a.rounds or (1 if q else 3)
    if min(a.procs, a.iterations, a.jobs, a.concurrency, a.conns, a.rounds) < 1 or a.rate <= 0:
        die("--procs, --iterations, --jobs, --concurrency, --conns, --rounds, --rate must be >= 1")
    return a


def main() -> None:
    a = parse_args()
    # SIGTERM unwinds like Ctrl-C, so that the finally below stops etcd and drops the databases.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    baton, worker, gen = build(a.skip_build)
    if not shutil.which("psql"):
        die("psql not found (the PostgreSQL client creates and drops the databases)")
    etcd_skip = ensure_etcd(not a.no_install)
    dbs, etcd = Databases(a.pg), None
    hold_us = round(a.hold_ms * 1000)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="baton-pg-bench-") as tmp:
        work = Path(tmp).resolve()
        os.chdir(work)  # no baton run falls back to a baton dir in this repository's .git
        try:
            pg_url = dbs.create()
            pg_skip, pg_error = baton_backend_works(baton, pg_url)
            tls_skip = None if dbs.ssl() else "the server has ssl off (`SHOW ssl`)"
            tls_error = None
            if not pg_skip and not pg_error and not tls_skip:
                _, tls_error = baton_backend_works(
                    baton, pg_url.replace("sslmode=disable", "sslmode=require"))
            if not etcd_skip:
                etcd = Etcd(work)
                etcd_skip = etcd.wait_healthy()
            rows = lock_rows(baton, worker, pg_url, pg_skip, tls_skip, etcd, etcd_skip,
                             a.iterations, hold_us)
            rows[0].error = pg_error
            rows[1].error = pg_error or tls_error
            measure_locks(rows, a.rounds, a.procs, a.iterations, hold_us)
            serve = measure_serve(baton, gen, work, dbs, a)
            pg_version = dbs.version()
        finally:
            if etcd:
                etcd.stop()
            dbs.drop_all()
    etcd_ver = etcd_version() if shutil.which("etcd") else "etcd: -"
    report(a, rows, serve, header(a, load0, pg_version, etcd_ver))


def report(a: argparse.Namespace, rows: list[LockRow], serve: Serve, head: list[str]) -> None:
    text = head + [
        "## Lock cycles", "",
        f"{a.procs} processes x {a.iterations} cycles, each: launch the lock tool, which runs "
        f"`baton-bench-worker crit` (counter +1, hold {a.hold_ms:g} ms) under the lock; wait = "
        "launch -> crit starts.", ""]
    text += lock_table(rows) + [""] + lock_details(rows)
    text += ["", "## Job service on one database", ""] + serve_table(serve, a) + [""]
    text += serve_details(serve, a)
    problems = serve.problems() + [f"{r.name}: {r.error}" for r in rows if r.error]
    problems += [f"{r.name}: {r.lost} lost updates" for r in rows if r.rounds and r.lost]
    if problems:
        text += ["", "Problems: " + "; ".join(problems) + "."]
    print("\n".join(text))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "pg.md").write_text("\n".join(text) + "\n")
    log(f"written to {OUT / 'pg.md'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
