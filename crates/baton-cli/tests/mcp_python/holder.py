"""A session that reserves argv[1:] (and takes lock `held-lock`), prints
{"server_pid", "client_pid"} and waits to be killed."""

import os
import sys

import anyio

from harness import ok, report, run, session


async def main():
    async with session("victim") as s:
        out = await ok(s, "reserve", {"paths": sys.argv[1:], "reason": "about to die"})
        assert out["granted"], out
        await ok(s, "lock", {"name": "held-lock", "wait_seconds": 0})
        rows = (await ok(s, "reservations", {}))["reservations"]
        mine = [r for r in rows if r["this_session"]]
        report({"server_pid": mine[0]["pid"], "client_pid": os.getpid(),
                "reported_client_pid": mine[0]["client_pid"]})
        await anyio.sleep(3600)


run(main)
