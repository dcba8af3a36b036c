"""lock/unlock are `baton run --lock`'s locks, held by the session;
state_update merges under the file's lock and refuses a stale version."""

import json
import os
import subprocess

import anyio

from harness import BATON, BATON_DIR, REPO, call, now, ok, report, run, session


def baton(*args):
    return subprocess.run([BATON, "--dir", BATON_DIR, *args], capture_output=True, text=True)


async def main():
    seen = {}
    async with session("alice") as a, session("bob") as b:
        got = await ok(a, "lock", {"name": "build", "wait_seconds": 0})
        assert got["name"] == "build" and got["mode"] == "exclusive" and got["token"] > 0, got
        # The same lock as `baton run --lock`: busy for the CLI too.
        cli = baton("run", "--lock", "build", "--no-wait", "--", "true")
        seen["cli_busy_code"] = cli.returncode
        out, text, err = await call(b, "lock", {"name": "build", "wait_seconds": 0})
        assert err, text
        seen["busy"] = text
        # bob waits; alice's unlock hands it over.
        result = {}

        async def wait_for_it():
            result["out"] = await ok(b, "lock", {"name": "build", "wait_seconds": 30})
            result["at"] = now()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_it)
            await anyio.sleep(0.5)
            assert "out" not in result, "bob got the lock alice holds"
            released_at = now()
            await ok(a, "unlock", {"name": "build"})
        assert result["out"]["token"] > got["token"], result
        seen["handover_s"] = result["at"] - released_at
        await ok(b, "unlock", {"name": "build"})
        cli = baton("run", "--lock", "build", "--no-wait", "--", "true")
        seen["cli_free_code"] = cli.returncode
        # Shared and semaphores.
        await ok(a, "lock", {"name": "cache", "wait_seconds": 0, "shared": True})
        await ok(b, "lock", {"name": "cache", "wait_seconds": 0, "shared": True})
        await ok(a, "lock", {"name": "gpu", "wait_seconds": 0, "max": 2})
        await ok(b, "lock", {"name": "gpu", "wait_seconds": 0, "max": 2})
        async with session("carol") as c:
            out, text, err = await call(c, "lock", {"name": "gpu", "wait_seconds": 0, "max": 2})
            assert err, f"a third holder of a semaphore of 2: {text}"
        out, text, err = await call(a, "lock", {"name": "x", "wait_seconds": 0, "shared": True, "max": 2})
        assert err, text

        # State files, relative to the repository's root.
        v0 = await ok(a, "state_read", {"file": "tasks.json"})
        assert v0 == {"content": None, "version": "absent"}, v0
        v1 = await ok(a, "state_update", {"file": "tasks.json", "merge_patch": {"t1": "open", "n": 1}})
        v2 = await ok(b, "state_update", {"file": "tasks.json", "merge_patch": {"t1": None, "t2": {"by": "bob"}},
                                          "expected_version": v1["version"]})
        assert v2["content"] == {"n": 1, "t2": {"by": "bob"}}, v2
        out, text, err = await call(a, "state_update", {"file": "tasks.json", "merge_patch": {"n": 2},
                                                         "expected_version": v1["version"]})
        assert err, f"a stale expected_version was accepted: {text}"
        assert v1["version"] in text and v2["version"] in text, f"both versions not named: {text}"
        seen["stale"] = text
        read = await ok(a, "state_read", {"file": "tasks.json"})
        assert read == v2, (read, v2)
        with open(os.path.join(REPO, "tasks.json")) as f:
            assert json.load(f) == v2["content"]
        got = json.loads(baton("state", "get", os.path.join(REPO, "tasks.json"), "--json").stdout)
        assert got["version"] == v2["version"], got
        await ok(a, "state_append", {"file": "events.jsonl", "record": {"e": 1}})
        await ok(b, "state_append", {"file": "events.jsonl", "record": {"e": 2, "s": "a\nb"}})
        with open(os.path.join(REPO, "events.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        assert lines == [{"e": 1}, {"e": 2, "s": "a\nb"}], lines
        out, text, err = await call(a, "state_update", {"file": "events.jsonl", "merge_patch": {}})
        assert err, text
        # A name a prompt could have written never reaches a file outside
        # the repository; each refusal is one line naming the file.
        outside = os.path.join(os.path.dirname(REPO), "outside.json")
        for name in ["../outside.json", outside, "*.json", ".", "a\nb.json"]:
            for tool, args in [("state_update", {"merge_patch": {"x": 1}}),
                               ("state_append", {"record": {"x": 1}}),
                               ("state_read", {})]:
                out, text, err = await call(a, tool, {"file": name, **args})
                assert err, f"{tool} {name!r} was accepted: {text}"
                assert "\n" not in text, f"{tool} {name!r}: not one line: {text!r}"
        assert not os.path.exists(outside), "a state file was written outside the repository"
    report(seen)


run(main)
