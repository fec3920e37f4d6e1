"""The stdio MCP server of one case: ``python -m pytest_groundeval.integrations.mcp.server SPEC``.

An agent's MCP client starts it (from the config file the harness wrote, named by
``GROUNDEVAL_MCP_CONFIG``). It serves, over MCP stdio, the tools the harness holds for that
case (``host.py``): ``tools/list`` gives their names, descriptions and argument schemas,
``tools/call`` runs one in the harness, which records the call and its result in the case's
observed log, and returns the result as text (``isError`` for an error value). The server holds
no data and no tool of its own: with no harness behind it (the case is over, the socket is
closed, the token is wrong) it has nothing to serve and exits.

Built on the ``mcp`` Python SDK's low-level server rather than HealthChain's
``FHIRToolkit.as_mcp()``: that toolkit's ``load_bundle`` tool takes any path (a client could load
another case's bundle) and its CLI has no catalog option; here the tools are the task's own,
the same objects the LangGraph agent is given.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from pytest_groundeval.integrations.mcp.wire import Lines, send


class Bridge:
    """Calls forwarded to the harness over the case's socket, answered in any order."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(spec["socket"]))
        send(self.sock, {"op": "hello", "token": spec.get("token"), "pid": os.getpid()})
        self.lines = Lines(self.sock)
        hello = self.lines.next()
        if not isinstance(hello, dict) or not isinstance(hello.get("tools"), list):
            raise SystemExit("groundeval mcp server: the harness refused this server (case over, or wrong spec)")
        self.tools: list[dict[str, Any]] = hello["tools"]
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._next = 0
        threading.Thread(target=self._read, daemon=True, name="groundeval-mcp-bridge").start()

    def _read(self) -> None:
        while True:
            message = self.lines.next()
            if message is None:  # the harness closed the case: nothing left to serve
                os._exit(0)
            with self._lock:
                future = self._pending.pop(message.get("id"), None)
            if future is not None:
                future.set_result(message)

    def call(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        future: Future = Future()
        with self._lock:
            self._next += 1
            ident = self._next
            self._pending[ident] = future
            send(self.sock, {"op": "call", "id": ident, "name": name, "arguments": arguments or {}})
        return future.result()


def serve(spec: dict[str, Any]) -> None:
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    bridge = Bridge(spec)
    server: Server = Server("groundeval", instructions=f"The tools of one groundeval case ({spec.get('task')}).")

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [types.Tool(name=t["name"], description=t.get("description") or "", inputSchema=t["inputSchema"])
                for t in bridge.tools]

    @server.call_tool(validate_input=False)  # the tool validates its own arguments, as it does for LangGraph
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        reply = await anyio.to_thread.run_sync(bridge.call, name, arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=str(reply.get("text", "")))],
                                    isError=bool(reply.get("error")))

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pytest_groundeval.integrations.mcp.server SPEC.json", file=sys.stderr)
        return 2
    try:
        spec = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"groundeval mcp server: cannot read the spec {args[0]}: {exc}", file=sys.stderr)
        return 2
    try:
        serve(spec)
    except (OSError, KeyError) as exc:
        print(f"groundeval mcp server: no harness for this case ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
