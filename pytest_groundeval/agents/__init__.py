"""Agents: the protocol, the built-in agents, and ``module:Class`` loading.

Nothing is imported until asked for (``from pytest_groundeval.agents import build_agent``):
the options import ``agents.spec`` alone, and must not pull the agents' modules in.
"""

from typing import Any

__all__ = ["Agent", "AgentOutput", "AgentSpec", "build_agent"]


def __getattr__(name: str) -> Any:
    if name == "AgentOutput":
        from pytest_groundeval.model import AgentOutput

        return AgentOutput
    if name == "AgentSpec":
        from pytest_groundeval.agents.spec import AgentSpec

        return AgentSpec
    if name in ("Agent", "build_agent"):
        from pytest_groundeval.agents import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
