"""What ``--agent`` / ``--model`` / ``--model-base-url`` ask for: a plain value the options
(``pytest/options.py``) build and check before anything runs. Standard library only, so the
settings can hold it without importing any agent (``base.build_agent`` makes the agent).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable


# tokens one model call may generate (--model-max-tokens) for the agents that call a model
# themselves: some ten times the longest answer a task asks for, so a model that loops stops
# there, not at its context's end (a local server cannot cancel a generation: the requests
# behind it wait). The claude agent's default is the same.
DEFAULT_MAX_TOKENS = 4096
MAX_TOKENS_AGENTS = ("claude", "langgraph", "chat", "langgraph-mcp")  # those that take --model-max-tokens


@dataclass
class AgentSpec:
    """What ``--agent`` / ``--model`` / ``--model-base-url`` ask for, checked before anything runs."""

    name: str
    model: str | None = None
    base_url: str | None = None
    timeout: float = 120.0
    cache_mode: str = "off"
    cache_dir: str | None = None
    in_process: bool = False  # --agent-in-process: a module:Class agent in the harness's process
    prompt_cache: bool = True  # Anthropic prompt caching (--no-prompt-cache: off)
    max_tokens: int | None = None  # --model-max-tokens (None: DEFAULT_MAX_TOKENS)
    tool_choice: str = "auto"  # --model-tool-choice: sent when tools are bound ("omit": none sent)

    def model_settings(self) -> dict[str, Any]:
        """What the chat/langgraph agents take from the options beside the model."""
        return {"max_tokens": self.max_tokens or DEFAULT_MAX_TOKENS,
                "tool_choice": None if self.tool_choice == "omit" else self.tool_choice}

    @property
    def effective_max_tokens(self) -> int | None:
        """The cap the run's agent applies (the record's ``max_tokens``); None: it takes none."""
        return (self.max_tokens or DEFAULT_MAX_TOKENS) if self.name in MAX_TOKENS_AGENTS else None

    @property
    def hosted(self) -> bool:
        """Runs in the agent host (``agents/host.py``): a ``module:Class`` agent, unless
        ``--agent-in-process``. The built-in agents and ``mcp:COMMAND`` run in the harness."""
        return not self.in_process and self.name not in BUILT_IN and not self.is_command

    @property
    def is_live(self) -> bool:
        """Calls a model over the network (default concurrency 8 rather than 1)."""
        return self.name in ("claude", "langgraph", "chat", "langgraph-mcp", "claude-agent") or self.is_command


    @property
    def tool_using(self) -> bool | None:
        """Does this agent kind take a task's tools from the harness (``toolcalls.harness_tools``)
        on a task that offers them? True: the LangGraph, LangGraph-over-MCP and Claude Agent SDK
        agents and an ``mcp:COMMAND``; False: ``baseline``, ``claude``, ``chat`` (no tools); None:
        a ``module:Class`` (it may or may not ask). What a crashed worker's case counts in."""
        if self.name in TOOL_USING or self.is_command:
            return True
        if self.name in BUILT_IN:
            return False
        return None

    @property
    def is_command(self) -> bool:
        """``mcp:COMMAND ARGS``: a command-line agent (agents/command.py), not a ``module:Class``."""
        return self.name.startswith("mcp:")

    @property
    def required_key(self) -> str | None:
        if self.name == "claude":
            return "ANTHROPIC_API_KEY"
        if self.name == "claude-agent":
            return None if self.base_url else "ANTHROPIC_API_KEY"  # an Anthropic-compatible local server
        if self.name in ("langgraph", "chat", "langgraph-mcp"):
            model = self.model or ""
            if self.base_url or model.startswith("openai:"):
                return None  # OpenAI-compatible local server; its own key (if any) is optional
            return "ANTHROPIC_API_KEY"
        return None

    @property
    def claude_model(self) -> str | None:
        """The Claude model id ``--model`` names, when this agent calls Anthropic's API with it
        (claude, claude-agent, and langgraph / chat / langgraph-mcp with ``anthropic:ID`` or a bare
        id): checked against the known ids at start. None for an OpenAI-compatible or other
        provider (``openai:NAME``, ``--model-base-url``): a local server names its models freely."""
        if not self.model or self.base_url:
            return None
        if self.name in ("claude", "claude-agent"):
            return self.model
        if self.name in ("langgraph", "chat", "langgraph-mcp"):
            provider, sep, rest = self.model.partition(":")
            if not sep:
                return self.model
            return rest if provider == "anthropic" else None
        return None

    def check(self, needs_key: bool = True, check_model: bool = True) -> str | None:
        """An error message if this agent can't run here, else None. Never falls back. What
        was asked is checked before the environment: a mistyped agent or model id is said as
        such, not as a missing key. ``check_model``: the model id against the known ids
        (``--no-preflight`` skips it, for a model newer than groundeval's table)."""
        problem = self._check_name()
        if problem is None and check_model and needs_key:
            problem = model_problem(self.claude_model, self.name, shown=self.model)
        return problem or self._check_key(needs_key)

    def _check_key(self, needs_key: bool) -> str | None:
        key = self.required_key
        if needs_key and key and not os.environ.get(key) and self.cache_mode != "strict":
            return (
                f"--agent={self.name} calls a live model and needs {key} in the environment; "
                f"set it, or run the offline agent with --agent=baseline"
            )
        return None

    def _check_name(self) -> str | None:
        if self.is_command:
            if not self.name[len("mcp:"):].strip():
                return f"--agent={self.name}: expected mcp:COMMAND ARGS (the command to run per case)"
        elif ":" in self.name and self.name not in BUILT_IN:
            module, _, attr = self.name.partition(":")
            if not module or not attr:
                return f"--agent={self.name}: expected module:Class"
        elif self.name not in BUILT_IN:
            return (f"--agent={self.name}: unknown agent{did_you_mean(self.name, BUILT_IN)}; use baseline, claude, "
                    "langgraph, chat, langgraph-mcp, claude-agent, mcp:COMMAND or module:Class")
        if self.model and self.name not in ("claude", "langgraph", "chat", "langgraph-mcp", "claude-agent"):
            return (f"--model {self.model}: --agent={self.name} takes no model (a module:Class or mcp:COMMAND "
                    "agent chooses its own and may report it: AgentOutput.model, the usage file's model); drop --model")
        if self.max_tokens is not None and self.name not in MAX_TOKENS_AGENTS:
            return (f"--model-max-tokens is for --agent={', '.join(MAX_TOKENS_AGENTS)}; "
                    f"--agent={self.name} would ignore it")
        if self.base_url and self.name not in ("langgraph", "chat", "langgraph-mcp", "claude-agent"):
            return (f"--model-base-url is for --agent=langgraph, langgraph-mcp, chat or claude-agent; "
                    f"--agent={self.name} would ignore it")
        return None


BUILT_IN = ("baseline", "claude", "langgraph", "chat", "langgraph-mcp", "claude-agent")
#: Claude ids groundeval knows but does not price (run/prices.json's comment says why); every
#: id the price table lists (models and aliases) is known too
KNOWN_UNPRICED = ("claude-haiku-5-5",)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean X?)"`` (or "X or Y") for the close matches of a mistyped name, else ""."""
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def known_claude_models() -> list[str]:
    """Every Claude model id groundeval knows (the price table's models and aliases, and the
    ones it leaves unpriced on purpose)."""
    from pytest_groundeval.run.usage import price_table

    table = price_table()
    return sorted({*table["models"], *table.get("aliases", {}), *KNOWN_UNPRICED})


def model_problem(model: str | None, agent: str, shown: str | None = None) -> str | None:
    """A usage error for a Claude model id groundeval does not know, with the close ones."""
    if model is None:
        return None
    known = known_claude_models()
    if model in known:
        return None
    hint = did_you_mean(model, known) or f" (known: {', '.join(known[:6])}, ...)"
    local = (" (an OpenAI-compatible server: --model openai:NAME with --model-base-url URL)"
             if agent in ("langgraph", "chat", "langgraph-mcp") else "")
    return (f"--model {shown or model}: not a Claude model id groundeval knows{hint}{local}; a model newer than "
            "groundeval's table (pytest_groundeval/run/prices.json): --no-preflight skips this check")
TOOL_USING = ("langgraph", "langgraph-mcp", "claude-agent")  # built-in agents given a task's harness tools


def model_cache(spec: AgentSpec) -> Any:
    """The model-call cache for this session's agent, or None when off."""
    if spec.cache_mode == "off":
        return None
    from pytest_groundeval.run.cache import ModelCache

    return ModelCache(Path(spec.cache_dir or ".groundeval/cache"), spec.cache_mode)
