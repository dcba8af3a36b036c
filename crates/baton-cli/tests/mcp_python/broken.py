"""`baton reserve --check` (the agent hook's check) passes for the session's
own client and its descendants and refuses (75, naming the holder) others;
an operator's `baton reservations break` is told to the session with a
logging notification, and the reservation is gone from `reservations`."""

import json
import os
import subprocess
import tempfile
import time

import anyio

from harness import BATON, BATON_DIR, REPO, now, ok, report, run, session


def baton(*args):
    return subprocess.run([BATON, "--dir", BATON_DIR, *args], capture_output=True, text=True, cwd=REPO)


def check_from_outside(path):
    """`baton reserve --check PATH` from a process that does not descend
    from this client (setsid -f: its parent exits, it is reparented)."""
    out = tempfile.mktemp()
    subprocess.run(["setsid", "-f", "sh", "-c",
                    f'"$0" --dir "$1" reserve --check "$2" >"$3.out" 2>&1; echo $? >"$3.tmp"; mv "$3.tmp" "$3"',
                    BATON, BATON_DIR, path, out], cwd=REPO, check=True)
    deadline = time.monotonic() + 30
    while not os.path.exists(out):
        assert time.monotonic() < deadline, "the outside check did not finish"
        time.sleep(0.02)
    with open(out) as f, open(out + ".out") as g:
        return int(f.read()), g.read().strip()


async def main():
    seen = {}
    logs = []

    async def on_log(params):
        logs.append((now(), params.level, params.data))

    async with session("guarded", logging_callback=on_log) as s:
        held = await ok(s, "reserve", {"paths": ["src"], "reason": "hook test"})
        own = baton("reserve", "--check", "src/a.rs")
        assert own.returncode == 0, f"the client's own check: {own.returncode} {own.stderr}"
        code, text = check_from_outside("src/a.rs")
        assert code == 75 and "guarded" in text, (code, text)
        seen["outside_check"] = text
        code, _ = check_from_outside("docs/a.md")
        assert code == 0, code
        broke = baton("reservations", "break", str(held["token"]))
        assert broke.returncode == 0, broke.stderr
        broken_at = now()
        while not logs:
            assert now() - broken_at < 10, "no logging notification of the break"
            await anyio.sleep(0.05)
        seen["told_after_s"] = logs[0][0] - broken_at
        level, data = logs[0][1], logs[0][2]
        assert level == "warning" and data["event"] == "reservation_broken", logs
        assert data["token"] == held["token"] and data["paths"] == ["src"], data
        seen["log"] = data
        rows = (await ok(s, "reservations", {}))["reservations"]
        assert rows == [], rows
        # Not held any more: nothing to release.
        assert (await ok(s, "release", {}))["released"] == []
    report(seen)


run(main)
