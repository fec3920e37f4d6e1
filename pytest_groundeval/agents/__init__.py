"""Agents: the protocol, the built-in agents, and ``module:Class`` loading."""

from ..model import AgentOutput
from .base import Agent, AgentSpec, build_agent

__all__ = ["Agent", "AgentOutput", "AgentSpec", "build_agent"]
