"""A small real MCP server written with the official SDK, for the tests: stdio by default,
streamable HTTP with ``--http PORT`` (on 127.0.0.1)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("notes")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def note(text: str) -> str:
    """Write a note into notes.txt in the working folder."""
    with open("notes.txt", "a", encoding="utf-8") as fh:
        fh.write(text + "\n")
    return f"noted in {os.getcwd()}/notes.txt"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek(path: str) -> str:
    """What the server can read at a path (to show what its sandbox hides)."""
    try:
        return Path(path).read_text()[:200]
    except OSError as exc:
        return f"cannot read: {type(exc).__name__}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whereami() -> str:
    """The server's pid, working folder and the variable NOTES_TAG."""
    return f"pid={os.getpid()} cwd={os.getcwd()} tag={os.environ.get('NOTES_TAG', '')}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
