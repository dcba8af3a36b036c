"""The tools are listed with input and output schemas; bad arguments are
refused (tool errors, one line), and the server goes on serving."""

from harness import call, ok, report, run, session

EXPECTED = {
    "reserve", "release", "reservations", "lock", "unlock", "state_read",
    "state_update", "state_append", "workspace_create", "workspace_remove", "push",
}


async def main():
    async with session("lister") as s:
        tools = (await s.list_tools()).tools
        names = {t.name for t in tools}
        assert names == EXPECTED, f"tools: {sorted(names)}"
        schemas = {}
        for t in tools:
            assert t.input_schema.get("type") == "object", t.name
            assert t.output_schema and t.output_schema.get("type") == "object", t.name
            assert t.description, t.name
            schemas[t.name] = {
                "input": sorted(t.input_schema.get("properties", {})),
                "output": sorted(t.output_schema.get("properties", {})),
                "required": sorted(t.input_schema.get("required", [])),
            }
        bad = {}
        for name, tool, args in [
            ("missing", "lock", {"name": "x"}),
            ("wrong_type", "reserve", {"paths": "src"}),
            ("bad_mode", "reserve", {"paths": ["src"], "mode": "bogus"}),
            ("unknown_field", "reserve", {"paths": ["src"], "path": "x"}),
            ("negative_wait", "reserve", {"paths": ["src"], "wait_seconds": -1}),
            ("outside", "reserve", {"paths": ["../elsewhere"]}),
            ("empty", "reserve", {"paths": []}),
            ("bad_lock_name", "lock", {"name": "", "wait_seconds": 0}),
            ("not_held", "unlock", {"name": "never"}),
            ("release_not_held", "release", {"paths": ["src"]}),
        ]:
            out, text, err = await call(s, tool, args)
            assert err, f"{name}: {tool} {args} was accepted: {text}"
            assert text and "\n" not in text, f"{name}: not one line: {text!r}"
            bad[name] = text
        # Still serving.
        out = await ok(s, "reserve", {"paths": ["src"]})
        assert out["granted"], out
    report({"names": sorted(names), "schemas": schemas, "bad": bad})


run(main)
