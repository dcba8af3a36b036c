"""One process of bench/python_bench.py: M lock cycles with one Python lock
implementation, in the format of baton-bench-worker (bench/src/worker.rs).

    python python_worker.py contend --impl baton|filelock|portalocker --dir D
        --counter FILE --iterations M --hold-us H --out FILE [--gate]
    python python_worker.py json --impl ... --dir D --file F --iterations M [--gate]

contend: each cycle is lock, read the counter (text, zero-padded, rewritten
in place like the Rust worker's), +1, sleep H, unlock; --out gets one line
per cycle, `WAIT_NS HELD_NS RELEASING_NS` (CLOCK_MONOTONIC), then `elapsed
ELAPSED START END`. json: each cycle is lock, json.load F, n += 1, json.dump
F (truncate and rewrite, as scripts do), unlock: the lost-update check.
With --gate, the loop starts once stdin reaches EOF.
"""

import argparse
import json
import os
import sys
import time

now = time.monotonic_ns  # CLOCK_MONOTONIC on Linux: the clock of every process


def make_lock(impl, d):
    """(acquire, release) of the implementation, used as its users do."""
    if impl == "baton":
        import baton

        lock = baton.Lock("bench", baton_dir=os.path.join(d, "baton"))
        return lock.acquire, lock.release
    if impl == "filelock":
        import filelock

        # The default: a non-blocking flock tried every 50 ms until it works.
        lock = filelock.FileLock(os.path.join(d, "lockfile"))
        return lock.acquire, lock.release
    if impl == "portalocker":
        import portalocker

        # Its blocking call (flock(LOCK_EX) waits in the kernel): the fastest
        # way to use it; portalocker.Lock would poll like filelock.
        fh = open(os.path.join(d, "lockfile"), "a")

        def acquire():
            portalocker.lock(fh, portalocker.LockFlags.EXCLUSIVE)

        def release():
            portalocker.unlock(fh)

        return acquire, release
    if impl == "baton-filelock":
        import baton

        # baton's filelock adapter: baton's lock, then the path's flock for
        # processes still on filelock (its interop cost is measured here).
        lock = baton.FileLock(os.path.join(d, "lockfile"), baton_dir=os.path.join(d, "baton"))
        return lock.acquire, lock.release
    if impl == "fasteners":
        import fasteners

        lock = fasteners.InterProcessLock(os.path.join(d, "lockfile"))
        return lock.acquire, lock.release
    if impl == "none":
        return (lambda: None), (lambda: None)
    sys.exit(f"python_worker: unknown --impl {impl}")


def bump_counter(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        text = os.read(fd, 64).strip()
        n = int(text) + 1 if text else 1
        os.pwrite(fd, b"%020d\n" % n, 0)
    finally:
        os.close(fd)


def bump_json(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        doc = {"n": 0}
    doc["n"] += 1
    with open(path, "w") as f:
        json.dump(doc, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["contend", "json", "uncontended"])
    ap.add_argument("--impl", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--counter")
    ap.add_argument("--file")
    ap.add_argument("--iterations", type=int, required=True)
    ap.add_argument("--hold-us", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--gate", action="store_true")
    a = ap.parse_args()
    acquire, release = make_lock(a.impl, a.dir)
    if a.gate:
        sys.stdin.buffer.read()
    hold = a.hold_us / 1e6
    if a.mode == "uncontended":
        for _ in range(50):  # warm-up
            acquire()
            release()
        samples = []
        for _ in range(a.iterations):
            t0 = now()
            acquire()
            release()
            samples.append(now() - t0)
        print(json.dumps(samples))
        return
    if a.mode == "json":
        for _ in range(a.iterations):
            acquire()
            try:
                bump_json(a.file)
            except ValueError:
                # A torn file (read while another process rewrote it): only
                # without a lock; that update is lost.
                pass
            release()
        return
    lines = []
    start = now()
    for _ in range(a.iterations):
        t0 = now()
        acquire()
        t1 = now()
        bump_counter(a.counter)
        time.sleep(hold)
        t2 = now()
        release()
        lines.append(f"{t1 - t0} {t1} {t2}\n")
    end = now()
    lines.append(f"elapsed {end - start} {start} {end}\n")
    with open(a.out, "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
