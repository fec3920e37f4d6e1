"""Task registry. A new task type is one module here plus its scorer, registered below;
the plugin iterates this registry and never changes for a new task."""

from __future__ import annotations

from .base import Case, ParseError, Task
from .extraction import ExtractionTask
from .write import WriteTask

TASKS: dict[str, type[Task]] = {t.name: t for t in (ExtractionTask, WriteTask)}

__all__ = ["TASKS", "Case", "ParseError", "Task"]
