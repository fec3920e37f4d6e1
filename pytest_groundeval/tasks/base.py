"""What a task is: cases, the prompt an agent sees, ground truth, output parsing, scoring.

A task never knows which agent runs; the plugin never knows a task's rules. Adding a
task type = a subclass here + its scorer + an entry in ``tasks.TASKS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..datasets import CaseRef
from ..jsontext import json_objects
from ..scorers.base import Score


class ParseError(Exception):
    """The agent's output could not be read as an answer (recorded with the raw output)."""


@dataclass
class Case:
    """A loaded case. ``inputs`` is everything the agent may see (never the truth)."""

    ref: CaseRef
    prompt: str
    inputs: dict[str, Any]
    truth: Any
    content_hash: str

    @property
    def case_id(self) -> str:
        return self.ref.case_id


@dataclass
class Task(ABC):
    """Base class of a task type. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    description: ClassVar[str]
    # summary keys a threshold may name (``TASK.KEY``), and short aliases for some of them
    metrics: ClassVar[tuple[str, ...]]
    metric_aliases: ClassVar[dict[str, str]] = {}

    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def add_options(cls, group: Any, parser: Any) -> None:
        """Register this task's own command-line / ini options (e.g. where its cases live)."""

    @classmethod
    def from_config(cls, config: Any) -> "Task":
        return cls()

    @abstractmethod
    def discover(self) -> list[CaseRef]:
        """List the cases without reading their content."""

    @abstractmethod
    def load(self, ref: CaseRef) -> Case:
        """Read one case; raise ``CaseError`` naming the file and reason when it can't be used."""

    @abstractmethod
    def parse(self, text: str, structured: Any = None) -> Any:
        """Turn the agent's output into a prediction; raise ``ParseError`` otherwise."""

    @abstractmethod
    def score(self, prediction: Any, case: Case) -> Score: ...

    @abstractmethod
    def summarize(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        """Aggregate the record's case entries of this task (errors count as failures)."""

    def resolve_metric(self, key: str) -> str | None:
        key = self.metric_aliases.get(key, key)
        return key if key in self.metrics else None


def extract_json_object(text: str) -> dict[str, Any]:
    """The one JSON object in ``text``: bare, or in a fenced block, anywhere in the text.

    No object, or more than one top-level object, is a :class:`ParseError`."""
    if not isinstance(text, str):
        raise ParseError(f"agent output is {type(text).__name__}, not text")
    found = json_objects(text)
    if not found:
        raise ParseError("no JSON object found in the output")
    if len(found) > 1:
        raise ParseError(f"found {len(found)} JSON objects in the output; expected exactly one")
    return found[0]
