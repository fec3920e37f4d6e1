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
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_groundeval.model import AgentOutput


@runtime_checkable
class Agent(Protocol):
    name: str

    def run(self, prompt: str) -> "str | AgentOutput | dict[str, Any]": ...


@dataclass
class AgentSpec:
    """What ``--agent`` / ``--model`` / ``--model-base-url`` ask for, checked before anything runs."""

    name: str
    model: str | None = None
    base_url: str | None = None
    timeout: float = 120.0
    cache_mode: str = "off"
    cache_dir: str | None = None

    @property
    def is_live(self) -> bool:
        """Calls a model over the network (default concurrency 8 rather than 1)."""
        return self.name in ("claude", "langgraph", "chat")

    @property
    def required_key(self) -> str | None:
        if self.name == "claude":
            return "ANTHROPIC_API_KEY"
        if self.name in ("langgraph", "chat"):
            model = self.model or ""
            if self.base_url or model.startswith("openai:"):
                return None  # OpenAI-compatible local server; its own key (if any) is optional
            return "ANTHROPIC_API_KEY"
        return None

    def check(self, needs_key: bool = True) -> str | None:
        """An error message if this agent can't run here, else None. Never falls back."""
        key = self.required_key
        if needs_key and key and not os.environ.get(key) and self.cache_mode != "strict":
            return (
                f"--agent={self.name} calls a live model and needs {key} in the environment; "
                f"set it, or run the offline agent with --agent=baseline"
            )
        if ":" in self.name and self.name not in BUILT_IN:
            module, _, attr = self.name.partition(":")
            if not module or not attr:
                return f"--agent={self.name}: expected module:Class"
        elif self.name not in BUILT_IN:
            return f"--agent={self.name}: unknown agent; use baseline, claude, langgraph, chat or module:Class"
        if self.model and self.name not in ("claude", "langgraph", "chat"):
            return (f"--model {self.model}: --agent={self.name} takes no model (a module:Class agent "
                    "chooses its own and may report it as AgentOutput.model); drop --model")
        if self.base_url and self.name not in ("langgraph", "chat"):
            return f"--model-base-url is for --agent=langgraph or chat; --agent={self.name} would ignore it"
        return None


BUILT_IN = ("baseline", "claude", "langgraph", "chat")


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


def model_cache(spec: AgentSpec) -> Any:
    """The model-call cache for this session's agent, or None when off."""
    if spec.cache_mode == "off":
        return None
    from pytest_groundeval.run.cache import ModelCache

    return ModelCache(Path(spec.cache_dir or ".groundeval/cache"), spec.cache_mode)


def build_agent(spec: AgentSpec, rootdir: Path | None = None) -> Any:
    """Construct the agent. Heavy SDK imports happen only here, only for the chosen agent."""
    if spec.name == "baseline":
        from pytest_groundeval.agents.baseline import BaselineAgent

        return BaselineAgent()
    if spec.name == "claude":
        from pytest_groundeval.agents.claude import ClaudeAgent

        return ClaudeAgent(model=spec.model or ClaudeAgent.default_model, timeout=spec.timeout,
                           cache=model_cache(spec))
    if spec.name == "langgraph":
        from pytest_groundeval.agents.langgraph_agent import LangGraphAgent

        return LangGraphAgent.from_spec(spec)
    if spec.name == "chat":
        from pytest_groundeval.agents.langgraph_agent import ChatAgent

        return ChatAgent.from_spec(spec)
    return load_custom(spec.name, rootdir)
