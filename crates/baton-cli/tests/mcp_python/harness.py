"""What the MCP tests share: sessions of `baton mcp` driven by the official
Python SDK (`mcp`: stdio_client + ClientSession), and a way to report.

Every script gets the `baton` binary, the baton dir and the repository in
BATON, BATON_DIR and REPO, asserts what it checks (an AssertionError fails
the Rust test with the script's stderr) and prints one JSON document of what
it saw, which the Rust test checks again.
"""

import contextlib
import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

BATON = os.environ["BATON"]
BATON_DIR = os.environ["BATON_DIR"]
REPO = os.environ["REPO"]


def server(agent=None, extra=()):
    """The parameters that start `baton mcp` on the test's repository."""
    args = ["--dir", BATON_DIR, "mcp", "--repo", REPO]
    if agent:
        args += ["--agent", agent]
    args += list(extra)
    return StdioServerParameters(command=BATON, args=args, env=dict(os.environ))


@contextlib.asynccontextmanager
async def session(agent=None, **kwargs):
    """An initialized ClientSession of a new `baton mcp` process."""
    async with stdio_client(server(agent)) as (read, write):
        async with ClientSession(read, write, **kwargs) as s:
            await s.initialize()
            yield s


async def call(s, tool, args, **kwargs):
    """Calls `tool`; returns (structured content or None, text, is_error)."""
    res = await s.call_tool(tool, args, **kwargs)
    text = res.content[0].text if res.content else ""
    return res.structured_content, text, bool(res.is_error)


async def ok(s, tool, args, **kwargs):
    """Calls `tool` and asserts it succeeded; returns its structured content."""
    out, text, err = await call(s, tool, args, **kwargs)
    assert not err, f"{tool} {args} failed: {text}"
    assert out is not None, f"{tool} gave no structured content: {text}"
    assert "\n" not in text, f"{tool}'s summary is not one line: {text!r}"
    return out


def now():
    return time.monotonic()


def report(doc):
    print(json.dumps(doc))
    sys.stdout.flush()


def run(main):
    anyio.run(main)
