"""kill -9 of a holding session's `baton mcp` (argv[1] == "server") or of
its client ("client") frees its reservation for a waiting session at once,
and the waiter is told that the previous holder died; its lock too."""

import json
import os
import signal
import subprocess
import sys

import anyio

from harness import ok, now, report, run, session

HERE = os.path.dirname(os.path.abspath(__file__))


async def main():
    target = sys.argv[1]
    holder = subprocess.Popen([sys.executable, os.path.join(HERE, "holder.py"), "src"],
                              stdout=subprocess.PIPE, text=True)
    try:
        ids = json.loads(holder.stdout.readline())
        assert ids["reported_client_pid"] == ids["client_pid"], ids
        seen = {"ids": ids}
        async with session("survivor") as s:
            out = await ok(s, "reserve", {"paths": ["src/lib.rs"]})
            assert not out["granted"], out
            assert out["conflicts"][0]["holder"]["pid"] == ids["server_pid"], out
            result = {}

            async def wait():
                result["out"] = await ok(s, "reserve", {"paths": ["src/lib.rs"], "wait_seconds": 30})
                result["at"] = now()

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(0.5)
                assert "out" not in result
                killed_at = now()
                os.kill(ids["server_pid" if target == "server" else "client_pid"], signal.SIGKILL)
            out = result["out"]
            seen["freed_after_s"] = result["at"] - killed_at
            assert out["granted"], out
            assert out["previous_holder_died"], out
            prev = out["previous_holder"]
            assert prev["agent"] == "victim" and prev["pid"] == ids["server_pid"], prev
            assert prev["reason"] == "about to die", prev
            lock = await ok(s, "lock", {"name": "held-lock", "wait_seconds": 10})
            assert lock["previous_holder_died"], lock
            seen["out"] = out
    finally:
        holder.kill()
        holder.wait()
    report(seen)


run(main)
