"""mcp_agent_mail's MCP server over stdio, for bench/mcp_bench.py (its own
CLI serves HTTP only): the FastMCP server its package builds, run on stdio."""

from mcp_agent_mail import build_mcp_server

build_mcp_server().run("stdio")
