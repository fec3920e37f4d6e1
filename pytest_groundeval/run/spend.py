"""``--max-cost`` across xdist workers: one spend file that every process's :class:`usage.Budget`
reads and writes under ``fcntl.flock``.

The controller creates the file (a dot-file beside the run record) when the first worker
is configured, before any worker runs an item, hands its path to every worker through
``node.workerinput`` (xdist's public ``pytest_configure_node`` hook) and removes it when the
session ends. Each worker's budget keeps its whole state there: what was spent, the highest
cost seen for one case, and the reservations of the calls in flight, each tagged with the
worker's process id, so a reservation of a worker that crashed is dropped rather than holding
the budget forever. Without xdist the state stays in memory (``usage.LocalSpend``).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_groundeval.run.usage import new_state

WORKER_KEY = "groundeval_spend"  # in workerinput: the spend file's path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SpendFile:
    """The budget's state in a file shared by the processes of one session."""

    shared = True

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"groundeval: the session's spend file {self.path} is missing "
                                    "(the xdist controller creates it before the workers start)")

    def transact(self, fn: Callable[[dict[str, Any]], Any]) -> Any:
        """``fn(state)`` with the file locked: read, apply, write back."""
        with open(self.path, "r+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                text = f.read()
                state = json.loads(text) if text.strip() else new_state()
                state["flight"] = {k: r for k, r in state["flight"].items() if _alive(int(r["pid"]))}
                result = fn(state)
                f.seek(0)
                f.truncate()
                f.write(json.dumps(state))
                f.flush()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return result

    def read(self) -> dict[str, Any]:
        return self.transact(lambda st: json.loads(json.dumps(st)))


class SpendShare:
    """The controller's side: creates the file when the first xdist worker is configured
    (a run without workers has none) and passes its path to each worker."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.absolute()  # the workers get the path as it is here
        self.path: Path | None = None

    def pytest_configure_node(self, node: Any) -> None:
        if self.path is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=".groundeval-spend-", suffix=".json", dir=self.folder)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(new_state()))
            self.path = Path(name)
        node.workerinput[WORKER_KEY] = str(self.path)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


pytest.hookimpl(optionalhook=True)(SpendShare.pytest_configure_node)


def register_spend_share(config: pytest.Config, folder: Path) -> SpendShare:
    """In the controller under ``--max-cost``: the spend file xdist workers will share."""
    share = SpendShare(folder)
    config.pluginmanager.register(share, "groundeval-spend")
    return share
