"""Agents: the protocol, the built-in agents, and ``module:Class`` loading."""

from .base import Agent, AgentOutput, AgentSpec, build_agent, call_agent

__all__ = ["Agent", "AgentOutput", "AgentSpec", "build_agent", "call_agent"]
