"""Where a task's cases live (:class:`CaseSource`), and the facts about a built-in task the
plugin needs before any task module is imported (:class:`TaskInfo`): its name, description
and case source, for the options and markers every pytest run registers. Nothing here
imports the rest of groundeval, so a pytest run with no eval item pays for no more.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CaseSource:
    """Where a task's cases live: ``--<flag>`` on the command line (relative to the current
    folder), else the ini key (relative to the rootdir), else ``default``: relative to
    groundeval's packaged data when ``packaged`` (the built-in suites), else to the rootdir."""

    flag: str  # e.g. "--data-dir"
    ini: str  # e.g. "groundeval_data_dir"
    default: str  # e.g. "synthea" (packaged) or "my_cases.json" (rootdir)
    help: str
    key: str  # the name of this setting in the record's options, e.g. "data_dir"
    packaged: bool = False

    @property
    def dest(self) -> str:
        return self.ini


@dataclass(frozen=True)
class TaskInfo:
    """What the plugin registers for a task at start-up (options, ini keys, a marker)."""

    name: str
    description: str
    source: CaseSource
    spec: str  # "package.module:TaskClass", imported when an eval item needs the task


__all__ = ["CaseSource", "TaskInfo"]
