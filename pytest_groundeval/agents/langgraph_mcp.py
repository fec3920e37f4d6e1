"""``--agent langgraph-mcp``: the built-in LangGraph agent taking its tools from the case's MCP
server, through ``langchain-mcp-adapters``, as an MCP-client agent would.

Per case (per attempt) the harness opens the case's server (``integrations/mcp/host.py``); this
agent starts it over stdio from the same config an ``mcp:COMMAND`` agent is given, loads its
tools with ``langchain_mcp_adapters.tools.load_mcp_tools`` and runs the LangGraph agent
(``langgraph_agent.py``: the same graph, model, limits and answer rule) over them. Every call
goes MCP client → server → harness, where it is recorded in the case's observed log: the
``transcript`` and ``grounded`` come from there, as for any MCP client (the calls carry no
LangGraph step, so ``grounded`` orders them by the log's clock alone). The graph runs
synchronously in its worker thread; the MCP session lives on an event loop of its own thread,
and each tool call is handed to it.

This module imports langchain / mcp; it is itself imported only when the agent is chosen.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

from pytest_groundeval.agents.langgraph_agent import DEFAULT_MODEL, LangGraphAgent
from pytest_groundeval.agents.spec import AgentSpec
from pytest_groundeval.model import AgentOutput


@functools.lru_cache(maxsize=4)
def _sync_class(BaseTool: type) -> type:
    class MCPTool(BaseTool):  # type: ignore[misc,valid-type]
        """An adapters' MCP tool (async only) called from the graph's synchronous tool node."""

        inner: Any
        session: Any = None

        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            return _as_text(self.session.run(self.inner.ainvoke(input)))

        async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            return _as_text(await self.inner.ainvoke(input))

        def _run(self, *args: Any, **kwargs: Any) -> Any:  # every call goes through invoke
            raise NotImplementedError("called through invoke")

    return MCPTool


def _as_text(output: Any) -> Any:
    """A result of one text block as that text: the model reads a tool's JSON text exactly as
    it does from the LangGraph agent's own tools."""
    content = getattr(output, "content", None)
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
            and content[0].get("type") == "text":
        output.content = content[0].get("text", "")
    return output


class MCPSession:
    """One MCP stdio session to a case's server, on an event loop in a thread of its own."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.entry = entry
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="groundeval-mcp-client")
        self._thread.start()
        self._closing: asyncio.Event | None = None
        self._done: Any = None
        self.tools: list[Any] = []

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def open(self) -> list[Any]:
        started = threading.Event()
        box: dict[str, Any] = {}

        async def hold() -> None:
            from langchain_mcp_adapters.tools import load_mcp_tools
            from mcp import ClientSession, StdioServerParameters
            from mcp.client.stdio import stdio_client

            self._closing = asyncio.Event()
            params = StdioServerParameters(command=self.entry["command"], args=list(self.entry["args"]))
            try:
                async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    box["tools"] = await load_mcp_tools(session)
                    started.set()
                    await self._closing.wait()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box.setdefault("error", exc)
                started.set()

        self._done = asyncio.run_coroutine_threadsafe(hold(), self.loop)
        started.wait()
        if "error" in box and "tools" not in box:
            self.close()
            raise box["error"]
        from langchain_core.tools import BaseTool

        cls = _sync_class(BaseTool)
        self.tools = [cls(name=t.name, description=t.description, args_schema=t.args_schema,
                          response_format=t.response_format, handle_tool_error=t.handle_tool_error,
                          inner=t, session=self) for t in box["tools"]]
        return self.tools

    def close(self) -> None:
        if self._closing is not None:
            self.loop.call_soon_threadsafe(self._closing.set)
        if self._done is not None:
            try:
                self._done.result()
            except BaseException:  # noqa: BLE001 - the session is over either way
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class LangGraphMCPAgent(LangGraphAgent):
    """The LangGraph agent over the case's MCP server (``--agent langgraph-mcp``)."""

    name = "langgraph-mcp"

    @classmethod
    def from_spec(cls, spec: AgentSpec) -> "LangGraphMCPAgent":
        from pytest_groundeval.agents.spec import model_cache

        return cls(model=spec.model or DEFAULT_MODEL, base_url=spec.base_url, timeout=spec.timeout,
                   cache=model_cache(spec), **spec.model_settings())

    def prepare(self) -> None:
        super().prepare()
        import langchain_mcp_adapters.tools  # noqa: F401
        import mcp.client.stdio  # noqa: F401

    def run_case(self, task: Any, prompt: str, inputs: dict[str, Any]) -> AgentOutput:
        from pytest_groundeval.integrations.mcp.host import CaseHost

        system = getattr(task, "agent_system_prompt", None) or self.system_prompt
        if hasattr(task, "agent_prompt"):
            prompt = task.agent_prompt(prompt, inputs)
        with CaseHost(task, inputs) as host:
            session = MCPSession(host.server_entry())
            try:
                tools = session.open()
                return self._run(prompt, system, tools, getattr(task, "answer_tool", None))
            finally:
                session.close()


__all__ = ["LangGraphMCPAgent", "MCPSession"]
