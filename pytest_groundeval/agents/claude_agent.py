"""``--agent claude-agent``: the Claude Agent SDK (Claude Code as a library) on the case's MCP
server, with every built-in tool off. Optional: ``pip install 'groundeval[claude-agent]'``
(the SDK bundles the Claude Code CLI, ~385 MB).

Per case (per attempt) the harness opens the case's server (``integrations/mcp/host.py``) and
runs one SDK ``query`` with:

* ``tools=[]``: no built-in tool (no Bash, Read, Edit, web: nothing that could read a truth
  file); ``allowed_tools``: the case's MCP tools only (``mcp__groundeval__<name>``), approved
  without a prompt (permission skipping is refused as root, and needs no use here);
  ``strict_mcp_config``: no other MCP server from the user's settings; no setting sources;
* ``ENABLE_TOOL_SEARCH=false`` in its environment (with tool search on, the model is not shown
  the MCP tools up front and never calls them), non-essential traffic and telemetry off;
* ``--model`` (default ``claude-opus-4-8``), ``--model-base-url`` as ``ANTHROPIC_BASE_URL``
  (an Anthropic-compatible server), the task's system prompt, a turn limit, its own empty
  working folder (the case's private folder);
* the attempt's deadline: the query is cancelled when it passes (the SDK ends the CLI).

The answer is the result message's text; usage and the model from the result message
(``usage``: Anthropic's convention, as the ``claude`` agent records it; cost from groundeval's
price table, not the SDK's own ``total_cost_usd``). The tool calls are recorded by the
harness as they run on the case's server: the ``transcript`` and ``grounded`` come from there;
the SDK's messages are kept as ``agent_reported``. The model-call cache does not apply: the CLI
makes its calls itself.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from pytest_groundeval.agents.spec import AgentSpec
from pytest_groundeval.model import AgentOutput
from pytest_groundeval.run.calls import CallTimeout, attempt_deadline

DEFAULT_MODEL = "claude-opus-4-8"
DEFAULT_MAX_TURNS = 16
SERVER = "groundeval"
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class ClaudeAgentSDKAgent:
    """The Claude Agent SDK over the case's MCP server (``--agent claude-agent``)."""

    name = "claude-agent"
    default_model = DEFAULT_MODEL

    def __init__(self, model: str | None = None, *, base_url: str | None = None, timeout: float = 120.0,
                 max_turns: int = DEFAULT_MAX_TURNS) -> None:
        import claude_agent_sdk  # noqa: F401  (the extra: a clear ImportError at start otherwise)

        self.model = model or DEFAULT_MODEL
        self.base_url = base_url
        self.timeout = float(timeout)
        self.max_turns = int(max_turns)

    @classmethod
    def from_spec(cls, spec: AgentSpec) -> "ClaudeAgentSDKAgent":
        try:
            return cls(model=spec.model, base_url=spec.base_url, timeout=spec.timeout)
        except ImportError as exc:
            raise ImportError(f"{exc}; --agent=claude-agent needs the optional extra: "
                              "pip install 'groundeval[claude-agent]' (uv sync --extra claude-agent)") from None

    def prepare(self) -> None:
        import claude_agent_sdk  # noqa: F401
        import langchain_core.tools  # noqa: F401

    def run(self, prompt: str) -> AgentOutput:
        raise TypeError("--agent=claude-agent runs eval cases only (it needs a case's MCP server)")

    def options(self, host: Any, system: str | None) -> Any:
        from claude_agent_sdk import ClaudeAgentOptions

        entry = host.server_entry()
        env = {"ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1"}
        if self.base_url:
            env["ANTHROPIC_BASE_URL"] = self.base_url
            env.setdefault("ANTHROPIC_API_KEY", os.environ.get("ANTHROPIC_API_KEY") or "not-needed")
        return ClaudeAgentOptions(
            tools=[], allowed_tools=[f"mcp__{SERVER}__{t['name']}" for t in host.schemas],
            mcp_servers={SERVER: {"type": "stdio", "command": entry["command"], "args": entry["args"]}},
            strict_mcp_config=True, setting_sources=[], system_prompt=system, model=self.model,
            max_turns=self.max_turns, cwd=str(host.dir), env=env)

    def run_case(self, task: Any, prompt: str, inputs: dict[str, Any]) -> AgentOutput:
        from pytest_groundeval.integrations.mcp.host import CaseHost

        system = getattr(task, "agent_system_prompt", None)
        if hasattr(task, "agent_prompt"):
            prompt = task.agent_prompt(prompt, inputs)
        deadline = attempt_deadline()
        budget = self.timeout if deadline is None else max(0.0, deadline - time.monotonic())
        with CaseHost(task, inputs) as host:
            try:
                return asyncio.run(asyncio.wait_for(self._query(prompt, self.options(host, system)), budget))
            except asyncio.TimeoutError:
                raise CallTimeout(f"claude-agent: no answer by the deadline ({budget:.3g} s)") from None

    async def _query(self, prompt: str, options: Any) -> AgentOutput:
        from claude_agent_sdk import AssistantMessage, ResultMessage, TextBlock, ToolUseBlock, query

        reported: list[dict[str, Any]] = []
        result = None
        served = None
        async for message in query(prompt=prompt, options=options):
            if isinstance(message, AssistantMessage):
                served = getattr(message, "model", None) or served
                texts = [b.text for b in message.content if isinstance(b, TextBlock)]
                calls = [{"name": b.name, "args": b.input, "id": b.id} for b in message.content
                         if isinstance(b, ToolUseBlock)]
                reported.append({"type": "ai", "content": "".join(texts), "tool_calls": calls})
            elif isinstance(message, ResultMessage):
                result = message
        if result is None:
            raise RuntimeError("claude-agent: the SDK ended without a result message")
        if result.is_error:
            raise RuntimeError(f"claude-agent: {result.subtype}: {'; '.join(result.errors or []) or result.result}")
        raw = result.usage or {}
        usage = {k: raw[k] for k in USAGE_KEYS if isinstance(raw.get(k), int)} or None
        return AgentOutput(text=result.result or "", usage=usage, model=self.model, transcript=reported,
                           steps=result.num_turns, extra={"served_model": served})


__all__ = ["ClaudeAgentSDKAgent", "DEFAULT_MODEL"]
