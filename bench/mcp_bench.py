#!/usr/bin/env python3
"""`baton mcp` against mcp_agent_mail: a reservation round trip over stdio.

    python3 bench/mcp_bench.py [--cycles 2000] [--rounds 1] [--skip-build] [--quick]

One MCP client, the official Python SDK (`mcp` from PyPI: stdio_client +
ClientSession, pinned below, installed into target/mcp-bench/client-venv),
times N cycles of reserve + release of one path, each call awaited, over
stdio, against:

- `baton mcp` (the release build): `reserve {paths}` + `release {}`;
- mcp_agent_mail (PyPI `mcp-agent-mail`, pinned, its FastMCP server run over
  stdio by bench/mcp_agent_mail_server.py, installed into
  target/mcp-bench/agent-mail-venv; SQLite and its git archive in a temp
  dir): `file_reservation_paths {project_key, agent_name, paths}` +
  `release_file_reservations {project_key, agent_name, paths}`, after
  `ensure_project` and `register_agent`.

A cycle is timed from sending the reserve to receiving the release's
result; the first 50 cycles of each server are a warm-up, not counted.
With --rounds R the servers are run R times interleaved and pooled. Prints
markdown (p50, p99, max, cycles/s) and writes bench/out/mcp.md. The bar
(docs/src/design/architecture.md): baton's p99 < 5 ms. If mcp_agent_mail cannot be installed or
started, its row says why and baton's still runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import OUT, ROOT, bin_dir, cargo_build, fmt_dur, log, machine_info, percentile

BENCH = Path(__file__).resolve().parent
MCP_CLIENT = "mcp==2.3.0"
AGENT_MAIL = "mcp-agent-mail==0.1.0"
WARMUP = 50
CLIENT = r'''
import json, os, sys, time
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

kind, command, cycles, warmup = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cwd = sys.argv[5]

async def check(res, what):
    if res.is_error:
        raise SystemExit(f"{what} failed: {res.content[0].text if res.content else res}")
    return res.structured_content

async def main():
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ), cwd=cwd)
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        if kind == "baton":
            async def cycle():
                out = await check(await s.call_tool("reserve", {"paths": ["src/module.py"]}), "reserve")
                assert out["granted"], out
                await check(await s.call_tool("release", {}), "release")
        else:
            project = cwd
            await check(await s.call_tool("ensure_project", {"human_key": project}), "ensure_project")
            agent = await check(await s.call_tool("register_agent", {
                "project_key": project, "program": "bench", "model": "none",
                "name": "GreenCastle", "task_description": "bench"}), "register_agent")
            name = agent.get("name", "GreenCastle") if isinstance(agent, dict) else "GreenCastle"
            async def cycle():
                out = await check(await s.call_tool("file_reservation_paths", {
                    "project_key": project, "agent_name": name, "paths": ["src/module.py"],
                    "ttl_seconds": 3600, "exclusive": True}), "file_reservation_paths")
                assert out["granted"] and not out["conflicts"], out
                await check(await s.call_tool("release_file_reservations", {
                    "project_key": project, "agent_name": name, "paths": ["src/module.py"]}),
                    "release_file_reservations")
        times = []
        for i in range(warmup + cycles):
            t0 = time.perf_counter_ns()
            await cycle()
            t1 = time.perf_counter_ns()
            if i >= warmup:
                times.append(t1 - t0)
    print(json.dumps(times))

anyio.run(main)
'''


def venv(path: Path, packages: list[str]) -> Path | str:
    """A venv at `path` with `packages`; its python, or why it failed."""
    py = path / "bin" / "python"
    if not py.exists():
        r = subprocess.run([sys.executable, "-m", "venv", str(path)], capture_output=True, text=True)
        if r.returncode != 0:
            return f"venv failed: {r.stderr.strip()[-300:]}"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"pip install {' '.join(packages)} failed: {r.stderr.strip()[-300:]}"
    return py


def run_client(client_py: Path, kind: str, command: list[str], cycles: int, cwd: Path,
               env: dict[str, str]) -> list[int] | str:
    import json

    r = subprocess.run([str(client_py), "-c", CLIENT, kind, json.dumps(command), str(cycles),
                        str(WARMUP), str(cwd)], capture_output=True, text=True, env=env, cwd=cwd)
    if r.returncode != 0:
        return f"client failed: {(r.stderr or r.stdout).strip()[-400:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def git_repo(path: Path) -> None:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README").write_text("bench\n")
    subprocess.run(["git", "-C", str(path), "add", "README"], check=True)
    subprocess.run(["git", "-C", str(path), "-c", "user.email=b@b", "-c", "user.name=b", "commit",
                    "-q", "-m", "bench"], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--quick", action="store_true", help="200 cycles")
    ap.add_argument("--baton", help="this baton binary instead of the release build (no build)")
    args = ap.parse_args()
    if args.quick:
        args.cycles = 200
    if not args.skip_build and not args.baton and not cargo_build(["baton"]):
        log("cargo build failed")
        return 1
    baton = Path(args.baton).resolve() if args.baton else bin_dir() / "baton"
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "mcp-bench"
    target.mkdir(parents=True, exist_ok=True)
    log("installing the MCP client (the official Python SDK) ...")
    client = venv(target / "client-venv", [MCP_CLIENT])
    if isinstance(client, str):
        log(client)
        return 1
    log("installing mcp_agent_mail ...")
    mail = venv(target / "agent-mail-venv", [AGENT_MAIL])

    info = machine_info()  # the load average before the runs
    results: dict[str, list[int]] = {"baton mcp": [], "mcp_agent_mail": []}
    notes: dict[str, str] = {}
    if isinstance(mail, str):
        notes["mcp_agent_mail"] = mail
    for rnd in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="mcp-bench-") as tmp:
            tmp = Path(tmp)
            repo = tmp / "repo"
            git_repo(repo)
            env = {**os.environ, "HOME": str(tmp)}
            log(f"round {rnd + 1}: baton mcp, {args.cycles} cycles")
            got = run_client(client, "baton",
                             [str(baton), "--dir", str(tmp / "baton"), "mcp", "--repo", str(repo),
                              "--agent", "bench"], args.cycles, repo, env)
            if isinstance(got, str):
                notes["baton mcp"] = got
            else:
                results["baton mcp"] += got
            if "mcp_agent_mail" in notes:
                continue
            log(f"round {rnd + 1}: mcp_agent_mail, {args.cycles} cycles")
            mail_env = {**env,
                        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'mail.sqlite3'}",
                        "STORAGE_ROOT": str(tmp / "mailbox"),
                        "TOOLS_LOG_ENABLED": "false", "LOG_RICH_ENABLED": "false",
                        "LLM_ENABLED": "false", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                        # Its reservation tools are "extended" tools, not exposed by default.
                        "MCP_TOOLS_MODE": "extended"}
            got = run_client(client, "mail", [str(mail), str(BENCH / "mcp_agent_mail_server.py")],
                             args.cycles, repo, mail_env)
            if isinstance(got, str):
                notes["mcp_agent_mail"] = got
            else:
                results["mcp_agent_mail"] += got

    lines = [
        "## MCP: reserve + release round trip over stdio (official Python SDK client)",
        "",
        *info,
        "",
        f"{args.cycles} cycles x {args.rounds} round(s) per server after {WARMUP} warm-up cycles; "
        "one cycle = reserve one path + release it, each call awaited.",
        "",
        "| server | cycles | p50 | p99 | max | cycles/s |",
        "|---|---|---|---|---|---|",
    ]
    for name, times in results.items():
        if not times:
            lines.append(f"| {name} | 0 | - | - | - | {notes.get(name, 'not run')} |")
            continue
        xs = sorted(float(t) for t in times)
        lines.append(f"| {name} | {len(xs)} | {fmt_dur(percentile(xs, 50))} | {fmt_dur(percentile(xs, 99))} "
                     f"| {fmt_dur(xs[-1])} | {len(xs) / (sum(xs) / 1e9):.0f} |")
    baton_times = results["baton mcp"]
    verdict = "no data"
    if baton_times:
        p99 = percentile(sorted(float(t) for t in baton_times), 99)
        verdict = f"baton p99 {fmt_dur(p99)}: {'PASS' if p99 < 5e6 else 'FAIL'} (bar: < 5 ms)"
    lines += ["", verdict]
    text = "\n".join(lines) + "\n"
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "mcp.md").write_text(text)
    return 0 if baton_times and "baton mcp" not in notes else 1


if __name__ == "__main__":
    sys.exit(main())
