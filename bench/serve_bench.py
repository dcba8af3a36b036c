#!/usr/bin/env python3
"""The job service (`baton serve`) side by side with its peers: throughput
against `xargs -P`, submission latency at a steady rate with durable
acknowledgement, the latency a chat completion adds over running its command,
and the memory of the service with many finished jobs retained.

    python3 bench/serve_bench.py [--quick] [--skip-build] [--rounds 3] [--jobs 2000] ...

1. Throughput: J trivial jobs (`true`) at max_concurrency C through the
   service (all submitted as fast as 4 keep-alive connections allow, into a
   queue deep enough for all of them; time from the first submission to the
   last job's end, as stored by the service) against the design it replaces
   (bench/peers/seed_service.py: FastAPI on uvicorn, jobs in memory, one
   `asyncio.create_subprocess_exec` per job, C at a time; measured the same
   way) and against `seq J | xargs -P C -n 1 true`. Rounds interleaved
   (A B C A B C ...), medians. Bars: service >= 2x the seed design; goal
   beyond it >= 0.8x xargs.
2. Submission latency of `POST /v1/jobs` at a steady R requests/s for D
   seconds, open loop over 4 keep-alive connections (bench/src/http.rs:
   latency counts from when a request was due, so a stall shows), while the
   jobs run (template `true`, C at a time). The 202 comes once the job is
   stored durably (SQLite WAL, synchronous=FULL); the seed design's 202 once
   the job is in memory. Bar: p99 < 10 ms. A second,
   diagnostic run holds the jobs in the queue (one `sleep` runs, the rest
   wait), which leaves the submission path alone. The peer column is the
   disk's floor: append 200 bytes + fdatasync.
3. Chat completion: `POST /v1/chat/completions` (model = a template whose
   command is `echo hi`) sequentially N times against running `echo hi`
   directly (fork + exec with pipes, from the same load generator), p50 of
   each; the difference is what the service adds. Bar: < 5 ms. "skipped" when
   the endpoint answers 404.
4. Memory: M jobs (`true`) run and retained (job_ttl 24h); VmRSS of the
   `baton serve` process once all have ended. Bar: < 50 MiB.
5. Log readers: one job writes 16 MiB to its stdout, then R = 60 clients read
   `GET /v1/jobs/{id}/log` at once, slowly (64 KiB, a 5 ms pause, ...); the
   service's peak VmRSS (VmHWM) while they read. Bar: < 200 MiB.
6. The PostgreSQL store (--pg URL, default postgres://postgres@127.0.0.1:5432;
   --no-pg leaves it out): the throughput of 1 as of 2 (through 1 and 3
   nodes on one fresh database, pg_bench.py's measurement) and the
   submission latency of 2 through one node while every node runs jobs.
   No bar yet. The databases are dropped at the end.

Needs Rust (cargo), xargs and Python 3.11; the seed design's packages
(bench/peers/requirements.txt) are installed into bench/out/venv on the
first run (--no-seed leaves that peer out). Builds
`cargo build --release -p baton -p baton-bench` unless --skip-build. Prints a
markdown table on stdout (progress on stderr) and writes it to
bench/out/serve.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from run import bin_dir  # bench/run.py: where cargo puts the binaries
from service import Server, unix_ms  # bench/service.py: one `baton serve` to measure

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"

CHAT_BODY = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- build


def build(skip: bool, profile: str) -> tuple[Path, Path]:
    if not skip:
        cmd = ["cargo", "build", "-p", "baton", "-p", "baton-bench"]
        if profile == "release":
            cmd.insert(2, "--release")
        log("$ " + " ".join(cmd))
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            sys.exit("serve_bench.py: cargo build failed")
    bins = bin_dir(profile)
    baton, gen = bins / "baton", bins / "baton-bench-http"
    for b in (baton, gen):
        if not b.is_file():
            sys.exit(f"serve_bench.py: {b} missing (build failed?)")
    return baton, gen


# --------------------------------------------------------------------------- the service


def seed_python() -> Path:
    """The benchmark venv's Python with the seed design's packages (made
    on the first run, in bench/out/venv)."""
    venv = OUT / "venv"
    py = venv / "bin" / "python"
    stamp = venv / "requirements.txt"
    wanted = (BENCH / "peers" / "requirements.txt").read_text()
    if not py.is_file() or not stamp.is_file() or stamp.read_text() != wanted:
        log(f"$ python3 -m venv {venv} && pip install -r bench/peers/requirements.txt")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "-r",
                            str(BENCH / "peers" / "requirements.txt")])
        if r.returncode != 0:
            sys.exit("serve_bench.py: cannot install the seed design's packages (or pass --no-seed)")
        stamp.write_text(wanted)
    return py


class SeedServer(Server):
    """The seed design (bench/peers/seed_service.py) on 127.0.0.1:<free port>."""

    def __init__(self, python: Path, work: Path, name: str, conc: int) -> None:  # noqa: super not called
        import socket
        self.dir = work / name
        self.dir.mkdir(parents=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.stderr = open(self.dir / "seed.log", "wb")
        env = dict(os.environ, SEED_CONCURRENCY=str(conc))
        self.proc = subprocess.Popen(
            [str(python), "-m", "uvicorn", "seed_service:app", "--host", "127.0.0.1",
             "--port", str(port), "--log-level", "warning"],
            cwd=BENCH / "peers", env=env,
            stdout=subprocess.DEVNULL, stderr=self.stderr, stdin=subprocess.DEVNULL,
        )
        self.addr = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                self.get("/health")
                return
            except OSError:
                self.conn.close()
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    tail = (self.dir / "seed.log").read_text(errors="replace")[-2000:]
                    sys.exit(f"serve_bench.py: the seed design did not start:\n{tail}")
                time.sleep(0.1)


def gen_run(gen: Path, mode: str, *args: str) -> dict:
    cmd = [str(gen), mode, *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"serve_bench.py: {' '.join(cmd[:2])} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


# --------------------------------------------------------------------------- measurements


@dataclass
class Results:
    svc_jobs_s: list[float] = field(default_factory=list)
    svc_submit_s: list[float] = field(default_factory=list)  # jobs/s of the submissions alone
    xargs_jobs_s: list[float] = field(default_factory=list)
    seed_jobs_s: list[float] = field(default_factory=list)
    lat_seed: dict = field(default_factory=dict)
    lat: dict = field(default_factory=dict)
    lat_queued: dict = field(default_factory=dict)
    fsync: dict = field(default_factory=dict)
    chat: dict | None = None
    direct: dict = field(default_factory=dict)
    chat_skipped: str = ""
    mem_kib: tuple[int, int] = (0, 0)
    mem_idle_kib: int = 0
    mem_jobs: int = 0
    readers: int = 0
    readers_hwm_kib: int = 0
    readers_before_kib: int = 0
    pg: list[tuple[int, float, dict]] = field(default_factory=list)  # (nodes, jobs/s, latency report)
    pg_skipped: str = ""
    problems: list[str] = field(default_factory=list)


def burst_through(srv: Server, gen: Path, rnd: int, jobs: int, name: str, res: Results) -> tuple[float, dict]:
    """Submits `jobs` trivial jobs to `srv` as fast as 4 connections allow and
    waits until all have ended; returns jobs/s from the first submission to
    the last end (as the service stored it) and the load generator's report."""
    b = gen_run(gen, "burst", "--addr", srv.addr, "--path", "/v1/jobs",
                "--body", json.dumps({"template": "noop"}), "--count", str(jobs), "--conns", "4")
    accepted = b["statuses"].get("202", 0)
    if accepted != jobs:
        res.problems.append(f"{name} round {rnd}: {accepted} of {jobs} accepted ({b['first_error']})")
    srv.wait_idle(jobs, timeout=600)
    all_jobs = srv.jobs()
    ok = sum(1 for j in all_jobs if j["status"] == "succeeded")
    if ok != accepted:
        res.problems.append(f"{name} round {rnd}: {ok} of {accepted} jobs succeeded")
    last_end = max(unix_ms(j["finished_at"]) for j in all_jobs if j["finished_at"])
    secs = (last_end - b["first_send_unix_ms"]) / 1000.0
    log(f"  {name}: {jobs / secs:.0f} jobs/s ({secs:.2f} s; submissions took {b['elapsed_s']:.2f} s)")
    return jobs / secs, b


def throughput_service(baton: Path, gen: Path, work: Path, rnd: int, jobs: int, conc: int, res: Results) -> None:
    srv = Server(baton, work, f"tp{rnd}", max_concurrency=conc, max_queue_depth=jobs + 500)
    try:
        rate, b = burst_through(srv, gen, rnd, jobs, "service", res)
        res.svc_jobs_s.append(rate)
        res.svc_submit_s.append(jobs / b["elapsed_s"])
    finally:
        srv.stop()


def throughput_seed(python: Path, gen: Path, work: Path, rnd: int, jobs: int, conc: int, res: Results) -> None:
    srv = SeedServer(python, work, f"seed-tp{rnd}", conc)
    try:
        res.seed_jobs_s.append(burst_through(srv, gen, rnd, jobs, "seed design", res)[0])
    finally:
        srv.stop()


def seed_latency(python: Path, gen: Path, work: Path, rate: int, secs: float, conc: int, res: Results) -> dict:
    srv = SeedServer(python, work, "seed-lat", conc)
    try:
        body = json.dumps({"template": "noop"})
        gen_run(gen, "seq", "--addr", srv.addr, "--path", "/v1/jobs", "--body", body, "--count", "20")
        r = gen_run(gen, "rate", "--addr", srv.addr, "--path", "/v1/jobs", "--body", body,
                    "--rate", str(rate), "--duration", str(secs), "--conns", "4")
        non = {k: v for k, v in r["statuses"].items() if k != "202"}
        if non or r["errors"]:
            res.problems.append(f"seed submission latency: non-202 {non}, errors {r['errors']} ({r['first_error']})")
        log(f"  seed design: p50 {r['p50_us'] / 1000:.2f} ms, p99 {r['p99_us'] / 1000:.2f} ms, "
            f"max {r['max_us'] / 1000:.2f} ms at {r['achieved_rate']} req/s")
        return r
    finally:
        srv.stop()


def throughput_xargs(jobs: int, conc: int, res: Results) -> None:
    t0 = time.monotonic()
    r = subprocess.run(f"seq {jobs} | xargs -P {conc} -n 1 true", shell=True)
    secs = time.monotonic() - t0
    if r.returncode != 0:
        res.problems.append(f"xargs exited {r.returncode}")
    res.xargs_jobs_s.append(jobs / secs)
    log(f"  xargs -P {conc}: {jobs / secs:.0f} jobs/s ({secs:.2f} s)")


def submission_latency(baton: Path, gen: Path, work: Path, rate: int, secs: float, conc: int,
                       held: bool, res: Results) -> dict:
    n = int(rate * secs)
    name = "lat-held" if held else "lat"
    settings: dict[str, object] = {"max_queue_depth": n + 1000}
    settings["max_concurrency"] = 1 if held else conc
    srv = Server(baton, work, name, **settings)
    try:
        template = "hold" if held else "noop"
        # Warm up: connections, the store's pages, the first job's thread.
        gen_run(gen, "seq", "--addr", srv.addr, "--path", "/v1/jobs",
                "--body", json.dumps({"template": template}), "--count", "20")
        r = gen_run(gen, "rate", "--addr", srv.addr, "--path", "/v1/jobs",
                    "--body", json.dumps({"template": template}),
                    "--rate", str(rate), "--duration", str(secs), "--conns", "4")
        non = {k: v for k, v in r["statuses"].items() if k != "202"}
        if non or r["errors"]:
            res.problems.append(
                f"submission latency{' (held)' if held else ''}: non-202 {non}, errors {r['errors']}"
                f" ({r['first_error']})")
        log(f"  {name}: p50 {r['p50_us'] / 1000:.2f} ms, p99 {r['p99_us'] / 1000:.2f} ms, "
            f"max {r['max_us'] / 1000:.2f} ms at {r['achieved_rate']} req/s")
        return r
    finally:
        if held:
            srv.proc.kill()  # the held `sleep` dies with the service (parent-death signal)
            srv.proc.wait()
        srv.stop()


def pg_rows(baton: Path, gen: Path, work: Path, a: argparse.Namespace, res: Results) -> None:
    """The throughput and submission latency on the PostgreSQL store, through
    1 and 3 nodes on one fresh database each (pg_bench.py's nodes and
    throughput; the latency through node 0 while every node runs jobs)."""
    import pg_bench  # only when the PostgreSQL rows are measured
    dbs = pg_bench.Databases(a.pg)
    r = dbs.psql("SELECT 1")
    if r.returncode != 0:
        res.pg_skipped = f"skipped: psql at {a.pg}: {pg_bench.last_line(r)}"
        log(f"  PostgreSQL: {res.pg_skipped}")
        return
    try:
        for n in (1, 3):
            ns = argparse.Namespace(jobs=a.jobs, concurrency=a.concurrency, conns=4)
            run = pg_bench.serve_throughput(baton, gen, work, dbs, n, f"pg{n}", ns)
            res.problems += run.problems
            nodes = pg_bench.start_nodes(baton, work, dbs.create(), n, f"pg{n}-lat",
                                         max_concurrency=a.concurrency,
                                         max_queue_depth=int(a.rate * a.duration) + 1000)
            try:
                body = json.dumps({"template": "noop"})
                lat = gen_run(gen, "rate", "--addr", nodes[0].addr, "--path", "/v1/jobs", "--body", body,
                              "--rate", str(a.rate), "--duration", str(a.duration), "--conns", "4")
            finally:
                pg_bench.stop_nodes(nodes)
            non = {k: v for k, v in lat["statuses"].items() if k != "202"}
            if non or lat["errors"]:
                res.problems.append(f"PostgreSQL {n} node(s) latency: non-202 {non}, errors {lat['errors']}")
            log(f"  PostgreSQL, {n} node(s): {run.jobs_s:.0f} jobs/s; submissions p99 {lat['p99_us'] / 1000:.2f} ms")
            res.pg.append((n, run.jobs_s, lat))
    finally:
        dbs.drop_all()


def chat_latency(baton: Path, gen: Path, work: Path, n: int, res: Results) -> None:
    res.direct = gen_run(gen, "exec", "--count", str(n), "--", "echo", "hi")
    srv = Server(baton, work, "chat")
    try:
        probe = gen_run(gen, "seq", "--addr", srv.addr, "--path", "/v1/chat/completions",
                        "--body", json.dumps(CHAT_BODY), "--count", "1")
        if probe["statuses"].get("404") and "model_not_found" not in (probe["first_error"] or ""):
            res.chat_skipped = "skipped (endpoint missing)"
            log("  chat: POST /v1/chat/completions answers 404: skipped")
            return
        if not probe["statuses"].get("200"):
            res.chat_skipped = f"failed ({probe['first_error']})"
            res.problems.append(f"chat completion: {probe['first_error']}")
            return
        gen_run(gen, "seq", "--addr", srv.addr, "--path", "/v1/chat/completions",
                "--body", json.dumps(CHAT_BODY), "--count", "5")  # warm-up
        res.chat = gen_run(gen, "seq", "--addr", srv.addr, "--path", "/v1/chat/completions",
                           "--body", json.dumps(CHAT_BODY), "--count", str(n))
        if res.chat["statuses"].get("200") != n:
            res.problems.append(f"chat completion: {res.chat['statuses']} ({res.chat['first_error']})")
        if "hi" not in res.chat.get("last_body", ""):
            res.problems.append(f"chat completion: reply without the command's output: {res.chat['last_body'][:200]}")
        log(f"  chat p50 {res.chat['p50_us'] / 1000:.2f} ms vs direct p50 {res.direct['p50_us'] / 1000:.2f} ms")
    finally:
        srv.stop()


def memory(baton: Path, gen: Path, work: Path, jobs: int, conc: int, res: Results) -> None:
    srv = Server(baton, work, "mem", max_concurrency=conc, max_queue_depth=jobs + 500)
    try:
        srv.get("/health")
        res.mem_idle_kib = srv.rss_kib()[0]
        b = gen_run(gen, "burst", "--addr", srv.addr, "--path", "/v1/jobs",
                    "--body", json.dumps({"template": "noop"}), "--count", str(jobs), "--conns", "4")
        if b["statuses"].get("202", 0) != jobs:
            res.problems.append(f"memory: {b['statuses']} ({b['first_error']})")
        srv.wait_idle(jobs, timeout=1800)
        time.sleep(0.5)
        _, h = srv.get("/health")
        res.mem_kib = srv.rss_kib()
        res.mem_jobs = jobs
        retained = len(srv.jobs())
        if retained != jobs:
            res.problems.append(f"memory: {retained} of {jobs} jobs retained")
        log(f"  memory: VmRSS {res.mem_kib[0] / 1024:.1f} MiB (peak {res.mem_kib[1] / 1024:.1f} MiB, "
            f"idle {res.mem_idle_kib / 1024:.1f} MiB) with {retained} finished jobs")
    finally:
        srv.stop()


def log_readers(baton: Path, work: Path, readers: int, res: Results) -> None:
    import threading
    srv = Server(baton, work, "logs", max_log_bytes=64 * 1024 * 1024)
    try:
        host, port = srv.addr.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        c.request("POST", "/v1/jobs", body=json.dumps({"template": "big"}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        job = json.loads(r.read())["id"]
        c.close()
        srv.wait_idle(1, timeout=120)
        res.readers_before_kib = srv.rss_kib()[0]
        got: list[int] = []
        lock = threading.Lock()

        def read_slowly() -> None:
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            conn.request("GET", f"/v1/jobs/{job}/log")
            resp = conn.getresponse()
            n = 0
            while True:
                chunk = resp.read(64 * 1024)
                if not chunk:
                    break
                n += len(chunk)
                time.sleep(0.005)
            conn.close()
            with lock:
                got.append(n)

        threads = [threading.Thread(target=read_slowly) for _ in range(readers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        res.readers = readers
        res.readers_hwm_kib = srv.rss_kib()[1]
        if got.count(16 * 1024 * 1024) != readers:
            res.problems.append(f"log readers: bytes read {sorted(set(got))}, expected {16 * 1024 * 1024} each")
        log(f"  log readers: peak VmRSS {res.readers_hwm_kib / 1024:.1f} MiB with {readers} readers "
            f"(before: {res.readers_before_kib / 1024:.1f} MiB)")
    finally:
        srv.stop()


# --------------------------------------------------------------------------- report


def ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def table(res: Results, a: argparse.Namespace) -> str:
    rows = [
        "| measure | baton serve | peer | ratio / bar | met? |",
        "|---|---:|---:|---|---|",
    ]
    svc, xa = statistics.median(res.svc_jobs_s), statistics.median(res.xargs_jobs_s)
    ratio = svc / xa
    if res.seed_jobs_s:
        seed = statistics.median(res.seed_jobs_s)
        rows.append(
            f"| throughput: {a.jobs} jobs (`true`), {a.concurrency} at a time, submit to last end "
            f"| {svc:.0f} jobs/s | seed design (FastAPI, in memory): {seed:.0f} jobs/s "
            f"| {svc / seed:.2f}x (bar >= 2x) | {yes(svc / seed >= 2)} |"
        )
    rows.append(
        f"| throughput: {a.jobs} jobs (`true`), {a.concurrency} at a time, submit to last end "
        f"| {svc:.0f} jobs/s | `xargs -P {a.concurrency}`: {xa:.0f} jobs/s | {ratio:.2f}x (bar >= 0.8x) | {yes(ratio >= 0.8)} |"
    )
    lat, fs = res.lat, res.fsync
    rows.append(
        f"| `POST /v1/jobs` latency at {a.rate} req/s for {a.duration:g} s, jobs running: p50 / p99 / max "
        f"| {ms(lat['p50_us'])} / {ms(lat['p99_us'])} / {ms(lat['max_us'])} "
        f"| append + fdatasync: {ms(fs['p50_us'])} / {ms(fs['p99_us'])} / {ms(fs['max_us'])} "
        f"| p99 < 10 ms | {yes(lat['p99_us'] < 10_000)} |"
    )
    if res.lat_seed:
        ls = res.lat_seed
        rows.append(
            f"| the same, the seed design (202 once in memory) "
            f"| | {ms(ls['p50_us'])} / {ms(ls['p99_us'])} / {ms(ls['max_us'])} | p99 ratio "
            f"{lat['p99_us'] / max(ls['p99_us'], 1):.2f}x | - |"
        )
    lq = res.lat_queued
    rows.append(
        f"| the same, jobs held in the queue (diagnostic: the submission path alone) "
        f"| {ms(lq['p50_us'])} / {ms(lq['p99_us'])} / {ms(lq['max_us'])} | | p99 < 10 ms | {yes(lq['p99_us'] < 10_000)} |"
    )
    d = res.direct
    if res.chat:
        added = res.chat["p50_us"] - d["p50_us"]
        rows.append(
            f"| chat completion (`echo hi`), sequential, p50 of {a.chat_n} "
            f"| {ms(res.chat['p50_us'])} (p99 {ms(res.chat['p99_us'])}) "
            f"| `echo hi` run directly: {ms(d['p50_us'])} | added {ms(added)} (bar < 5 ms) | {yes(added < 5_000)} |"
        )
    else:
        rows.append(
            f"| chat completion (`echo hi`), sequential, p50 of {a.chat_n} | {res.chat_skipped} "
            f"| `echo hi` run directly: {ms(d['p50_us'])} | bar < 5 ms added | - |"
        )
    for n, jobs_s, pl in res.pg:
        rows.append(
            f"| PostgreSQL store, {n} node{'s' if n > 1 else ''}: throughput ({a.jobs} jobs, `max_concurrency` "
            f"{a.concurrency} cluster-wide) / `POST /v1/jobs` at {a.rate} req/s through one node, p50 / p99 / max "
            f"| {jobs_s:.0f} jobs/s / {ms(pl['p50_us'])} / {ms(pl['p99_us'])} / {ms(pl['max_us'])} | | no bar yet | - |"
        )
    if res.pg_skipped:
        rows.append(f"| PostgreSQL store, 1 and 3 nodes | {res.pg_skipped} | | no bar yet | - |")
    rss, hwm = res.mem_kib
    rows.append(
        f"| memory: VmRSS with {res.mem_jobs} finished jobs retained "
        f"| {rss / 1024:.1f} MiB (peak {hwm / 1024:.1f}, idle {res.mem_idle_kib / 1024:.1f}) | | bar < 50 MiB | {yes(rss < 50 * 1024)} |"
    )
    if res.readers:
        hwm = res.readers_hwm_kib
        rows.append(
            f"| memory: peak VmRSS (VmHWM) while {res.readers} clients read a 16 MiB job log at once, slowly "
            f"| {hwm / 1024:.1f} MiB (before: {res.readers_before_kib / 1024:.1f}) | | bar < 200 MiB | {yes(hwm < 200 * 1024)} |"
        )
    return "\n".join(rows)


def details(res: Results, a: argparse.Namespace) -> str:
    out = [
        "Rounds (jobs/s): service "
        + ", ".join(f"{x:.0f}" for x in res.svc_jobs_s)
        + "; xargs " + ", ".join(f"{x:.0f}" for x in res.xargs_jobs_s)
        + ("; seed design " + ", ".join(f"{x:.0f}" for x in res.seed_jobs_s) if res.seed_jobs_s else "")
        + "; the service's submissions alone (4 connections, each waiting for its 202): "
        + ", ".join(f"{x:.0f}" for x in res.svc_submit_s) + " jobs/s.",
    ]
    for name, r in (("running", res.lat), ("held", res.lat_queued)):
        out.append(
            f"Submission latency ({name}): {r['count']} requests at {r['achieved_rate']} req/s over "
            f"{r['conns']} connections; p90 {ms(r['p90_us'])}, p99.9 {ms(r['p999_us'])}, mean {ms(r['mean_us'])}; "
            f"statuses {r['statuses']}; sent more than 1 ms late (all connections busy): {r['sent_late_over_1ms']}."
        )
    if res.problems:
        out.append("Problems: " + "; ".join(res.problems) + ".")
    return "\n\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000, help="jobs per throughput round")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3, help="throughput rounds (A B A B ...)")
    ap.add_argument("--rate", type=int, default=500, help="submissions per second")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds at that rate")
    ap.add_argument("--chat-n", type=int, default=200)
    ap.add_argument("--mem-jobs", type=int, default=10_000)
    ap.add_argument("--readers", type=int, default=60, help="clients reading one 16 MiB log at once")
    ap.add_argument("--only-log-readers", action="store_true", help="measure only 5 (the log readers)")
    ap.add_argument("--quick", action="store_true",
                    help="--jobs 500 --rounds 1 --duration 3 --chat-n 50 --mem-jobs 2000: < 1 minute")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--no-seed", action="store_true", help="leave out the seed design (no venv needed)")
    ap.add_argument("--profile", default="release", choices=["release", "debug"],
                    help="which build to measure [release]; debug only to try the script out")
    ap.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432",
                    help="PostgreSQL server for the PostgreSQL store's rows (fresh databases, dropped after)")
    ap.add_argument("--no-pg", action="store_true", help="leave out the PostgreSQL store's rows")
    ap.add_argument("--dir", type=Path, default=None, help="where to put the services' files [a temp dir]")
    a = ap.parse_args()
    if a.quick:
        a.jobs, a.rounds, a.duration, a.chat_n, a.mem_jobs = 500, 1, 3.0, 50, 2000
    baton, gen = build(a.skip_build, a.profile)
    seed_py = None if a.no_seed or a.only_log_readers else seed_python()
    load0 = os.getloadavg()[0]
    res = Results()
    with tempfile.TemporaryDirectory(prefix="baton-serve-bench-", dir=a.dir) as tmp:
        work = Path(tmp).resolve()
        if a.only_log_readers:
            log_readers(baton, work, a.readers, res)
            rss = res.readers_hwm_kib
            print(f"| memory: peak VmRSS (VmHWM) while {res.readers} clients read a 16 MiB job log at once, slowly "
                  f"| {rss / 1024:.1f} MiB (before: {res.readers_before_kib / 1024:.1f}) | | bar < 200 MiB | {yes(rss < 200 * 1024)} |")
            sys.exit(1 if res.problems else 0)
        for rnd in range(a.rounds):
            log(f"throughput round {rnd + 1}/{a.rounds}")
            throughput_service(baton, gen, work, rnd, a.jobs, a.concurrency, res)
            if seed_py:
                throughput_seed(seed_py, gen, work, rnd, a.jobs, a.concurrency, res)
            throughput_xargs(a.jobs, a.concurrency, res)
        log("submission latency")
        res.fsync = gen_run(gen, "fsync", "--file", str(work / "fsync.dat"), "--count", "500")
        res.lat = submission_latency(baton, gen, work, a.rate, a.duration, a.concurrency, False, res)
        res.lat_queued = submission_latency(baton, gen, work, a.rate, a.duration, a.concurrency, True, res)
        if seed_py:
            res.lat_seed = seed_latency(seed_py, gen, work, a.rate, a.duration, a.concurrency, res)
        if not a.no_pg:
            log("PostgreSQL store (1 and 3 nodes)")
            pg_rows(baton, gen, work, a, res)
        log("chat completion")
        chat_latency(baton, gen, work, a.chat_n, res)
        log(f"memory ({a.mem_jobs} jobs)")
        memory(baton, gen, work, a.mem_jobs, a.concurrency, res)
        log(f"log readers ({a.readers})")
        log_readers(baton, work, a.readers, res)
        fs = fs_type(work)
    cpu = platform.processor() or platform.machine()
    load = " / ".join(f"{x:.1f}" for x in (load0, os.getloadavg()[0]))
    head = (
        f"`baton serve` ({a.profile} build) against its peers; throughput median of {a.rounds} rounds; "
        f"files on {fs}; {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}; "
        f"load average (1 min) before / after: {load}"
    )
    text = head + "\n\n" + table(res, a) + "\n\n" + details(res, a) + "\n"
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "serve.md").write_text(text)
    log(f"written to {OUT / 'serve.md'}")
    if res.problems:
        sys.exit(1)


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


if __name__ == "__main__":
    main()
