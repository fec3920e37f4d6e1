"""The agent protocol and how an agent is chosen.

An agent is any object with a ``name`` and ``run(prompt) -> str``. ``run`` may instead
return an :class:`AgentOutput` (or a dict with the same keys) to report token usage, a
tool-call transcript, or a structured answer. Built-in agents implement
``run_case(task, prompt, inputs)``: the task object supplies their strategy (the offline
baseline), system prompt and tools, and ``inputs`` is what the agent may see of the case
(never the truth); agents without it get the prompt only.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_groundeval.agents.spec import BUILT_IN, AgentSpec, model_cache
from pytest_groundeval.model import AgentOutput

__all__ = ["BUILT_IN", "Agent", "AgentSpec", "build_agent", "load_custom", "model_cache"]


@runtime_checkable
class Agent(Protocol):
    name: str

    def run(self, prompt: str) -> "str | AgentOutput | dict[str, Any]": ...




def load_custom(spec: str, rootdir: Path | None = None) -> Any:
    """Instantiate ``module:Class`` (or ``package.module:Class``) found on sys.path, the rootdir
    or the current folder."""
    module_name, _, attr = spec.partition(":")
    for folder in (rootdir, Path.cwd()):  # the project's rootdir, and where pytest was started
        if folder is not None and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"--agent={spec}: cannot import module {module_name!r}: {e}") from e
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportError(f"--agent={spec}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    agent = obj() if isinstance(obj, type) else obj
    if not callable(getattr(agent, "run", None)):
        raise TypeError(f"--agent={spec}: {attr} has no run(prompt) method")
    if not getattr(agent, "name", None):
        agent.name = spec
    return agent


def build_agent(spec: AgentSpec, rootdir: Path | None = None, *, traced: bool = False) -> Any:
    """Construct the agent. Heavy SDK imports happen only here, only for the chosen agent.
    ``traced``: LangSmith is on for this session (the claude agent wraps its SDK client so
    each Messages call nests under its case's run)."""
    if spec.name == "baseline":
        from pytest_groundeval.agents.baseline import BaselineAgent

        return BaselineAgent()
    if spec.name == "claude":
        from pytest_groundeval.agents.claude import ClaudeAgent

        return ClaudeAgent(model=spec.model or ClaudeAgent.default_model, timeout=spec.timeout,
                           cache=model_cache(spec), traced=traced, prompt_cache=spec.prompt_cache,
                           max_tokens=spec.effective_max_tokens)
    if spec.name == "langgraph":
        from pytest_groundeval.agents.langgraph_agent import LangGraphAgent

        return LangGraphAgent.from_spec(spec)
    if spec.name == "langgraph-mcp":
        from pytest_groundeval.agents.langgraph_mcp import LangGraphMCPAgent

        return LangGraphMCPAgent.from_spec(spec)
    if spec.name == "claude-agent":
        from pytest_groundeval.agents.claude_agent import ClaudeAgentSDKAgent

        return ClaudeAgentSDKAgent.from_spec(spec)
    if spec.is_command:  # mcp:COMMAND ARGS
        from pytest_groundeval.agents.command import CommandAgent

        return CommandAgent(spec.name, timeout=spec.timeout)
    if spec.name == "chat":
        from pytest_groundeval.agents.langgraph_agent import ChatAgent

        return ChatAgent.from_spec(spec)
    if spec.hosted:  # out of the harness's process (--agent-in-process: in it)
        from pytest_groundeval.agents.host import HostedAgent

        return HostedAgent(spec.name, rootdir)
    return load_custom(spec.name, rootdir)
