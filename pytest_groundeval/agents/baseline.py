"""The offline, deterministic reference agent (no key, no network).

It has no strategy of its own: each task declares its offline baseline
(``Task.baseline(inputs)``), and this agent runs it. A task without one makes the case
an ``agent`` error that names the task.
"""

from __future__ import annotations

from typing import Any

from pytest_groundeval.model import AgentOutput


class BaselineAgent:
    name = "baseline"
    model = None

    def run(self, prompt: str) -> str:
        raise TypeError("the baseline agent runs each task's own offline strategy; it is driven through run_case()")

    def run_case(self, task: Any, prompt: str, inputs: dict[str, Any]) -> AgentOutput:
        return task.baseline(inputs)
