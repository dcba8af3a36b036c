"""Summary of a `cargo test` run under wine, per crate, for scripts/test-windows.

Usage: summarize.py BUILD_JSON TEST_LOG CRATE...

BUILD_JSON is the output of `cargo test --no-run --message-format=json...`
(which test executable belongs to which package); TEST_LOG is the text output
of the `cargo test` run. Prints one line per crate: tests passed, failed and
ignored, by kind (unit, integration, doc). Exits 1 if a test failed or a test
executable ended without libtest's result line (a crash, e.g. a missing DLL).
"""

import json
import re
import sys


def package_name(package_id):
    # "path+file:///x/crates/baton-api#0.1.0" or "...#baton-api@0.1.0"
    url, _, frag = package_id.partition("#")
    if "@" in frag:
        return frag.split("@")[0]
    return url.rstrip("/").rsplit("/", 1)[-1]


def main():
    build_json, test_log, crates = sys.argv[1], sys.argv[2], sys.argv[3:]
    exe_pkg, lib_pkg = {}, {}
    with open(build_json, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact":
                continue
            name = package_name(msg["package_id"])
            if msg.get("executable"):
                exe_pkg[msg["executable"]] = name
            if "lib" in msg["target"]["kind"] or "rlib" in msg["target"]["crate_types"]:
                lib_pkg[msg["target"]["name"].replace("-", "_")] = name

    counts = {c: {"unit": 0, "integration": 0, "doc": 0, "failed": 0, "ignored": 0} for c in crates}
    crashed, current, open_run, doc_seen = [], None, None, False
    running = re.compile(r"^\s*Running (\S+)(?: (\S+))? \((.+)\)$")
    doc = re.compile(r"^\s*Doc-tests (\S+)$")
    result = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored")
    with open(test_log, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = running.match(line)
            if m:
                if open_run:
                    crashed.append(open_run)
                pkg = exe_pkg.get(m.group(3), "?")
                kind = "unit" if m.group(1) == "unittests" else "integration"
                current, open_run = (pkg, kind), f"{pkg}: {m.group(1)} {m.group(2) or ''}".strip()
                continue
            m = doc.match(line)
            if m:
                if open_run:
                    crashed.append(open_run)
                doc_seen = True
                current, open_run = (lib_pkg.get(m.group(1), m.group(1)), "doc"), f"doc-tests {m.group(1)}"
                continue
            m = result.match(line)
            if m and current:
                pkg, kind = current
                c = counts.setdefault(pkg, {"unit": 0, "integration": 0, "doc": 0, "failed": 0, "ignored": 0})
                c[kind] += int(m.group(1))
                c["failed"] += int(m.group(2))
                c["ignored"] += int(m.group(3))
                open_run = None
    if open_run:
        crashed.append(open_run)

    width = max(len(c) for c in counts)
    total = 0
    for pkg, c in counts.items():
        passed = c["unit"] + c["integration"] + c["doc"]
        total += passed
        print(
            f"  {pkg:<{width}}  {passed:4} passed, {c['failed']} failed, {c['ignored']} ignored"
            f"  (unit {c['unit']}, integration {c['integration']}, doc {c['doc']})"
        )
    failed = sum(c["failed"] for c in counts.values())
    print(f"  {'all':<{width}}  {total:4} passed, {failed} failed")
    if not doc_seen:
        print("  doc tests: none ran (cargo did not run doc tests for this target)")
    for run in crashed:
        print(f"  CRASHED (no libtest result): {run}")
    return 1 if failed or crashed else 0


if __name__ == "__main__":
    sys.exit(main())
