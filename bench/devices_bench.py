#!/usr/bin/env python3
"""What each speed device of the job service buys, each switched off in turn.

    python3 bench/devices_bench.py [--rounds 5] [--jobs 2000] [--quick] [--skip-build]

The job path has two devices whose only purpose is speed, each with an
off-switch (an environment variable of `baton serve`, read once;
docs/src/design/service.md, "Speed devices"):

- `BATON_NO_CLONE_VM=1`: commands are forked, not cloned with CLONE_VM;
- `BATON_NO_GROUP_COMMIT=1`: the SQLite store commits each submission and
  each bookkeeping write alone, not what arrives together in one.

A third, the asynchronous supervisor of plain jobs
(`BATON_NO_ASYNC_SUPERVISOR=1`), was measured with this script and removed
(it bought under 10%; bench/README.md, "Speed devices").

Workload (the CPU probe of bench/README.md, "The asynchronous supervisor"):
a fresh `baton serve` (SQLite store, max_concurrency 10), 200 trivial jobs
(`true`) to warm up, then J more submitted as fast as 4 keep-alive
connections allow; measured over those J: jobs/s (first submission to the
last end, as stored), the service's CPU per job (user + system, from
/proc/PID/stat) and its voluntary context switches per job (summed over
/proc/PID/task/*/status). Variants run interleaved (all on, each off, ...)
for R rounds; medians. The gain of a device is the service CPU per job with
it off over with everything on (CPU is what the 2-core budget of
bench/README.md, "Where the time goes", counts, and it moves less with the
machine's load than jobs/s does).

Builds `cargo build --release -p baton -p baton-bench` unless --skip-build.
Prints markdown on stdout (progress on stderr) and writes bench/out/devices.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from serve_bench import OUT, build, gen_run, log
from service import Server, unix_ms

VARIANTS = [
    ("all devices on", {}),
    ("clone(CLONE_VM) off: fork", {"BATON_NO_CLONE_VM": "1"}),
    ("group commit off: a transaction per write", {"BATON_NO_GROUP_COMMIT": "1"}),
]


def cpu_and_switches(pid: int) -> tuple[float, int]:
    """(user + system CPU seconds, voluntary context switches) of process `pid`."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return cpu, switches


def burst(srv: Server, gen: Path, jobs: int) -> float:
    """Submits `jobs` trivial jobs, waits for their ends; jobs/s."""
    before = {j["id"] for j in srv.jobs()}
    b = gen_run(gen, "burst", "--addr", srv.addr, "--path", "/v1/jobs",
                "--body", json.dumps({"template": "noop"}), "--count", str(jobs), "--conns", "4")
    if b["statuses"].get("202", 0) != jobs:
        sys.exit(f"devices_bench.py: {b['statuses']} ({b['first_error']})")
    srv.wait_idle(jobs, timeout=600)
    mine = [j for j in srv.jobs() if j["id"] not in before]
    failed = [j for j in mine if j["status"] != "succeeded"]
    if failed or len(mine) != jobs:
        sys.exit(f"devices_bench.py: {len(failed)} of {len(mine)} jobs did not succeed: {failed[:1]}")
    last_end = max(unix_ms(j["finished_at"]) for j in mine)
    return jobs / ((last_end - b["first_send_unix_ms"]) / 1000.0)


def one(baton: Path, gen: Path, work: Path, name: str, env: dict[str, str], jobs: int
        ) -> tuple[float, float, float]:
    """(jobs/s, service CPU µs per job, voluntary switches per job)."""
    srv = Server(baton, work, name, env=env, max_concurrency=10, max_queue_depth=jobs + 500)
    try:
        burst(srv, gen, 200)
        cpu0, sw0 = cpu_and_switches(srv.proc.pid)
        rate = burst(srv, gen, jobs)
        cpu1, sw1 = cpu_and_switches(srv.proc.pid)
    finally:
        srv.stop()
    return rate, (cpu1 - cpu0) * 1e6 / jobs, (sw1 - sw0) / jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=None, help="default 5 (2 with --quick)")
    ap.add_argument("--jobs", type=int, default=None, help="default 2000 (500 with --quick)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--profile", default="release", choices=["release", "debug"])
    a = ap.parse_args()
    rounds = a.rounds or (2 if a.quick else 5)
    jobs = a.jobs or (500 if a.quick else 2000)
    baton, gen = build(a.skip_build, a.profile)
    load0 = os.getloadavg()
    got: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="baton-devices-") as tmp:
        work = Path(tmp)
        for rnd in range(rounds):
            for i, (label, env) in enumerate(VARIANTS):
                r = one(baton, gen, work, f"r{rnd}v{i}", env, jobs)
                log(f"round {rnd + 1}/{rounds}: {label}: {r[0]:.0f} jobs/s, "
                    f"{r[1]:.0f} µs CPU/job, {r[2]:.1f} switches/job")
                got[label].append(r)
    load1 = os.getloadavg()
    base_cpu = statistics.median(c for _, c, _ in got[VARIANTS[0][0]])
    base_rate = statistics.median(r for r, _, _ in got[VARIANTS[0][0]])
    rows = ["| variant | jobs/s | service CPU per job | voluntary switches per job "
            "| CPU vs all on | jobs/s vs all on |", "|---|---:|---:|---:|---:|---:|"]
    for label, _ in VARIANTS:
        rs = got[label]
        rate = statistics.median(r for r, _, _ in rs)
        cpu = statistics.median(c for _, c, _ in rs)
        sw = statistics.median(s for _, _, s in rs)
        rows.append(f"| {label} | {rate:.0f} | {cpu:.0f} µs | {sw:.1f} "
                    f"| {cpu / base_cpu:.2f}x | {rate / base_rate:.2f}x |")
    head = ["# Speed devices of the job service, each off in turn", "",
            f"- {a.profile} build; {rounds} interleaved rounds, medians; J={jobs} jobs "
            f"(`true`) after 200 to warm up, max_concurrency 10, SQLite store",
            f"- load average at start {load0[0]:.1f}, at end {load1[0]:.1f}; "
            f"{os.cpu_count()} CPUs", "",
            "Rounds (jobs/s, CPU µs/job): " + "; ".join(
                f"{label}: " + ", ".join(f"{r:.0f}/{c:.0f}" for r, c, _ in got[label])
                for label, _ in VARIANTS), ""]
    out = head + rows
    print("\n".join(out))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "devices.md").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
