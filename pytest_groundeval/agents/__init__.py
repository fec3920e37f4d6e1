"""Agents: the protocol, the built-in agents, and ``module:Class`` loading."""

from pytest_groundeval.model import AgentOutput
from pytest_groundeval.agents.base import Agent, AgentSpec, build_agent

__all__ = ["Agent", "AgentOutput", "AgentSpec", "build_agent"]
