"""Two sessions: overlapping reservations exclude each other, disjoint ones
do not wait, shared ones coexist, a session's own never conflict; a waiter
gets progress notifications at least once a second and is granted the
moment the holder releases; a cancelled wait stops and leaves the line."""

import anyio

from harness import call, now, ok, report, run, session


async def main():
    seen = {}
    async with session("alice") as a, session("bob") as b:
        held = await ok(a, "reserve", {"paths": ["src", "docs/*.md"], "reason": "refactor"})
        assert held["granted"] and held["token"] and held["paths"] == ["src", "docs/*.md"], held
        # Overlapping: refused at once, naming the holder.
        t0 = now()
        out = await ok(b, "reserve", {"paths": ["src/lib.rs"]})
        seen["refused_s"] = now() - t0
        assert not out["granted"] and out["token"] is None, out
        c = out["conflicts"][0]
        assert c["path"] == "src" and c["mode"] == "exclusive" and c["granted"], c
        assert c["holder"]["agent"] == "alice" and c["holder"]["reason"] == "refactor", c
        seen["conflict"] = c
        out = await ok(b, "reserve", {"paths": ["docs/readme.md"]})
        assert not out["granted"], out
        # Disjoint: granted at once.
        t0 = now()
        out = await ok(b, "reserve", {"paths": ["tests", "docs/img/a.png"]})
        seen["disjoint_s"] = now() - t0
        assert out["granted"], out
        # A session's own reservations never conflict.
        out = await ok(a, "reserve", {"paths": ["src/inner"]})
        assert out["granted"], out
        # Shared coexist; shared and exclusive do not.
        assert (await ok(a, "reserve", {"paths": ["assets"], "mode": "shared"}))["granted"]
        assert (await ok(b, "reserve", {"paths": ["assets/logo"], "mode": "shared"}))["granted"]
        assert not (await ok(b, "reserve", {"paths": ["assets/x"]}))["granted"]

        listed = (await ok(b, "reservations", {}))["reservations"]
        mine = sorted(r["path"] for r in listed if r["this_session"])
        theirs = sorted(r["path"] for r in listed if not r["this_session"])
        assert mine == ["assets/logo", "docs/img/a.png", "tests"], mine
        assert theirs == ["assets", "docs/*.md", "src", "src/inner"], theirs
        only = (await ok(b, "reservations", {"path": "src/a/b.rs"}))["reservations"]
        assert [r["path"] for r in only] == ["src"], only
        only = (await ok(b, "reservations", {"path": "src/inner/x"}))["reservations"]
        assert sorted(r["path"] for r in only) == ["src", "src/inner"], only
        r0 = next(r for r in listed if r["path"] == "src")
        assert r0["agent"] == "alice" and r0["pid"] > 0 and r0["client_pid"] and r0["token"] == held["token"], r0
        seen["row"] = r0

        # A waiter: progress while it waits, granted when alice releases.
        progress = []

        async def on_progress(p, total, message):
            progress.append((now(), p, message))

        result = {}

        async def wait_for_src():
            result["t0"] = now()
            result["out"] = await ok(b, "reserve", {"paths": ["src/main.rs"], "wait_seconds": 30},
                                     progress_callback=on_progress)
            result["at"] = now()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_src)
            await anyio.sleep(2.6)
            assert "out" not in result, result
            released_at = now()
            rel = await ok(a, "release", {"paths": ["src"]})
            assert sorted(rel["released"]) == ["docs/*.md", "src"], rel
            assert (await ok(a, "release", {"paths": ["src/inner"]}))["released"] == ["src/inner"]
        out = result["out"]
        assert out["granted"] and not out["previous_holder_died"], out
        seen["handover_s"] = result["at"] - released_at
        times = [result["t0"]] + [t for t, _, _ in progress] + [result["at"]]
        seen["progress"] = len(progress)
        seen["max_gap_s"] = max(b2 - b1 for b1, b2 in zip(times, times[1:]))
        assert len(progress) >= 3, progress
        assert all(p2 > p1 for (_, p1, _), (_, p2, _) in zip(progress, progress[1:])), "progress must increase"
        seen["progress_message"] = progress[0][2]

        # Cancellation: bob waits for assets (alice's shared), then gives up.
        waiting = {}

        async def wait_for_assets():
            with anyio.move_on_after(1.0) as scope:
                await call(b, "reserve", {"paths": ["assets/x"], "wait_seconds": 60})
            waiting["cancelled"] = scope.cancelled_caught

        t0 = now()
        await wait_for_assets()
        assert waiting["cancelled"], waiting
        # The wait has left the line: no waiting row of bob's remains.
        deadline = now() + 5
        while True:
            rows = (await ok(a, "reservations", {"path": "assets/x"}))["reservations"]
            if not any(not r["granted"] for r in rows):
                break
            assert now() < deadline, f"the cancelled wait is still in line: {rows}"
            await anyio.sleep(0.05)
        seen["cancel_gone_s"] = now() - t0 - 1.0
        # bob's session goes on.
        all_released = await ok(b, "release", {})
        assert sorted(all_released["released"]) == ["assets/logo", "docs/img/a.png", "src/main.rs", "tests"], all_released
        assert (await ok(b, "release", {}))["released"] == []
    report(seen)


run(main)
