"""8 sessions contend for one path: served in arrival order, never two at
once (intervals recorded by each holder)."""

import anyio

from harness import now, ok, report, run, session

N = 8


async def main():
    intervals = {}
    async with session("gate") as gate:
        assert (await ok(gate, "reserve", {"paths": ["hot/file.txt"]}))["granted"]

        async def contender(i, queued):
            async with session(f"c{i}") as s:
                async def enter():
                    out = await ok(s, "reserve", {"paths": ["hot"], "wait_seconds": 120})
                    assert out["granted"], out
                    start = now()
                    await anyio.sleep(0.05)
                    intervals[i] = (start, now(), out["token"])
                    await ok(s, "release", {})

                async with anyio.create_task_group() as tg:
                    tg.start_soon(enter)
                    # Arrival: in line once the table shows it waiting.
                    while True:
                        rows = (await ok(s, "reservations", {"path": "hot"}))["reservations"]
                        if any(r["this_session"] and not r["granted"] for r in rows):
                            break
                        await anyio.sleep(0.01)
                    queued.set()

        async with anyio.create_task_group() as tg:
            for i in range(N):
                queued = anyio.Event()
                tg.start_soon(contender, i, queued)
                await queued.wait()
            await ok(gate, "release", {})
    order = sorted(intervals, key=lambda i: intervals[i][0])
    assert order == list(range(N)), f"served in order {order}"
    spans = [intervals[i] for i in order]
    for (s1, e1, t1), (s2, e2, t2) in zip(spans, spans[1:]):
        assert e1 <= s2, f"overlap: {(s1, e1)} and {(s2, e2)}"
        assert t2 > t1, "tokens must increase"
    report({"order": order, "intervals": [[s, e] for s, e, _ in spans]})


run(main)
