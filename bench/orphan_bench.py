#!/usr/bin/env python3
"""Trivial jobs of the job service while another job has many orphans.

    python3 bench/orphan_bench.py [--profile debug] [--orphans 500] [--jobs 2000] [--rounds 1] [--baton PATH]

One job leaves N processes outside its process group (`setsid sleep`, each
re-parented to the service: orphans the service must attribute at each job
end) and keeps running; then J trivial jobs (`true`) are submitted over 4
keep-alive connections. Prints jobs/s from the first submission to the last
trivial job's end (as the service stored it), with no orphans and with N.
Builds nothing: run `cargo build -p baton [--release]` first.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from run import bin_dir  # bench/run.py: where cargo puts the binaries
from service import Server, unix_ms  # bench/service.py: one `baton serve` to measure


def submit(addr: str, bodies: list[dict]) -> list[str]:
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    ids = []
    for body in bodies:
        conn.request("POST", "/v1/jobs", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = json.loads(r.read())
        if r.status != 202:
            sys.exit(f"bench: POST /v1/jobs answered {r.status}: {data}")
        ids.append(data["id"])
    conn.close()
    return ids


def one(baton: Path, work: Path, name: str, orphans: int, jobs: int) -> float:
    srv = Server(baton, work, name, max_concurrency=10, max_queue_depth=jobs + 100)
    try:
        ready = work / f"{name}.ready"
        if orphans:
            script = (
                f"i=0; while [ $i -lt {orphans} ]; do (setsid sleep 3600 </dev/null >/dev/null 2>&1 &); "
                f"i=$((i+1)); done; touch {ready}; exec sleep 3600"
            )
            submit(srv.addr, [{"template": "sh", "prompt": script}])
            deadline = time.monotonic() + 120
            while not ready.exists():
                if time.monotonic() > deadline:
                    sys.exit("bench: the orphan job did not get ready")
                time.sleep(0.05)
            time.sleep(0.5)  # the last orphans re-parented to the service
        first = time.time() * 1000.0
        per = [[{"template": "noop"}] * (jobs // 4 + (1 if i < jobs % 4 else 0)) for i in range(4)]
        threads = [threading.Thread(target=submit, args=(srv.addr, p)) for p in per]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + 600
        while True:
            _, h = srv.get("/health")
            if h.get("active") == (1 if orphans else 0) and h.get("queued") == 0:
                break
            if time.monotonic() > deadline:
                sys.exit(f"bench: jobs not done: {h}")
            time.sleep(0.05)
        done = [j for j in srv.jobs() if j.get("template") == "noop"]
        ok = sum(1 for j in done if j["status"] == "succeeded")
        if ok != jobs:
            sys.exit(f"bench: {ok} of {jobs} trivial jobs succeeded")
        last = max(unix_ms(j["finished_at"]) for j in done)
        return jobs / ((last - first) / 1000.0)
    finally:
        srv.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--profile", default="debug")
    p.add_argument("--orphans", type=int, default=500)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--baton", type=Path, help="the binary to measure (default: the profile's)")
    a = p.parse_args()
    baton = a.baton or bin_dir(a.profile) / "baton"
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            base = one(baton, Path(tmp), f"none{rnd}", 0, a.jobs)
            many = one(baton, Path(tmp), f"many{rnd}", a.orphans, a.jobs)
            print(f"{a.jobs} trivial jobs: {base:.0f} jobs/s alone, {many:.0f} jobs/s beside "
                  f"a job with {a.orphans} orphans", flush=True)


if __name__ == "__main__":
    main()
