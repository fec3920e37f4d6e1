"""SIGTERM handled like Ctrl-C: what a CI cancel sends (to the whole process group, so under
xdist the controller and every worker get it).

In the controller (or the only process) the first SIGTERM ends the session the way pytest
ends it on Ctrl-C (a KeyboardInterrupt in the main thread: the session finishes, the reporter writes the record of
what finished, cut short with the reason ``terminated (SIGTERM)``, exit status INTERRUPTED);
a SIGTERM once the session is finishing (the record being written) is ignored (SIGKILL still
ends the process).
In an xdist worker it interrupts the item in flight the same way, so the worker ends at once
instead of finishing its case; the controller records only what finished.

Installed only from the main thread (``signal.signal``'s rule) and put back at unconfigure,
so a pytester session inside a longer-lived process leaves that process's handler as it was.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

REASON = "terminated (SIGTERM)"
TERMINATED = pytest.StashKey[str]()


class _Finishing:
    """Once the session finishes (every item ran, or it is already stopping), a SIGTERM no
    longer interrupts: the record is being written."""

    def __init__(self) -> None:
        self.finishing = False

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outside the reporter's wrapper: before the record
    def pytest_sessionfinish(self) -> Any:
        self.finishing = True
        return (yield)


def install(config: pytest.Config) -> None:
    if threading.current_thread() is not threading.main_thread() or TERMINATED in config.stash:
        return
    config.stash[TERMINATED] = ""  # installed; not (yet) terminated
    state = _Finishing()
    config.pluginmanager.register(state, "groundeval-sigterm")

    def on_sigterm(signum: int, frame: Any) -> None:
        if config.stash.get(TERMINATED, "") or state.finishing:
            return  # already stopping, or the record is being written: let it be written
        config.stash[TERMINATED] = REASON
        # not pytest.exit: its exception is an Exception, which an agent's own error handling
        # (and the runner's) would catch as the agent failing
        raise KeyboardInterrupt(REASON)

    previous = signal.signal(signal.SIGTERM, on_sigterm)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)
        if config.pluginmanager.is_registered(state):
            config.pluginmanager.unregister(state)

    config.add_cleanup(restore)


def terminated(config: pytest.Config) -> str | None:
    """``terminated (SIGTERM)`` when this process received SIGTERM, else None."""
    return config.stash.get(TERMINATED, "") or None
