"""Over raw stdio: the initialize handshake of each protocol revision
(negotiated down for an older or unknown one), and stdin EOF: everything
released at once, exit status 0."""

import json
import os
import subprocess
import time

from harness import BATON, BATON_DIR, REPO, ok, report, run, session


def start(agent=("--agent", "raw")):
    return subprocess.Popen([BATON, "--dir", BATON_DIR, "mcp", "--repo", REPO, *agent],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)


def send(p, msg):
    p.stdin.write(json.dumps(msg) + "\n")
    p.stdin.flush()


def reply(p, id):
    while True:
        line = p.stdout.readline()
        assert line, "baton mcp closed stdout"
        msg = json.loads(line)
        if msg.get("id") == id:
            return msg


def handshake(p, version):
    send(p, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": version, "capabilities": {},
                        "clientInfo": {"name": "raw-client", "version": "1"}}})
    got = reply(p, 1)["result"]
    send(p, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return got


async def main():
    seen = {"negotiated": {}}
    for asked in ["2025-06-18", "2025-11-25", "2025-03-26", "2024-11-05", "1999-01-01", "2030-01-01"]:
        p = start()
        seen["negotiated"][asked] = handshake(p, asked)["protocolVersion"]
        p.stdin.close()
        assert p.wait(10) == 0
    # Without --agent: the client's name from initialize and the client's pid.
    p = start(())
    handshake(p, "2025-11-25")
    send(p, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "reserve", "arguments": {"paths": ["named"]}}})
    assert reply(p, 2)["result"]["structuredContent"]["granted"]
    send(p, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
             "params": {"name": "reservations", "arguments": {}}})
    rows = reply(p, 3)["result"]["structuredContent"]["reservations"]
    seen["default_agent"] = rows[0]["agent"]
    assert rows[0]["agent"] == f"raw-client-{os.getpid()}", rows
    assert rows[0]["pid"] == p.pid and rows[0]["client_pid"] == os.getpid(), rows
    p.stdin.close()
    assert p.wait(10) == 0
    p = start()
    init = handshake(p, "2025-06-18")
    assert init["serverInfo"]["name"] == "baton", init
    send(p, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "reserve", "arguments": {"paths": ["eof"]}}})
    assert reply(p, 2)["result"]["structuredContent"]["granted"]
    send(p, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
             "params": {"name": "lock", "arguments": {"name": "eof-lock", "wait_seconds": 0}}})
    assert not reply(p, 3)["result"].get("isError")
    async with session("next") as s:
        out = await ok(s, "reserve", {"paths": ["eof/x"]})
        assert not out["granted"] and out["conflicts"][0]["holder"]["agent"] == "raw", out
        closed_at = time.monotonic()
        p.stdin.close()
        # Released at once: granted with a short wait, not after the exit.
        out = await ok(s, "reserve", {"paths": ["eof/x"], "wait_seconds": 10})
        seen["freed_after_s"] = time.monotonic() - closed_at
        assert out["granted"] and not out["previous_holder_died"], out
        lock = await ok(s, "lock", {"name": "eof-lock", "wait_seconds": 10})
        assert not lock["previous_holder_died"], lock
        seen["exit_code"] = p.wait(10)
        seen["exited_after_s"] = time.monotonic() - closed_at
    assert seen["exit_code"] == 0, seen
    report(seen)


run(main)
