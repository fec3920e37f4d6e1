"""SIGTERM handled like Ctrl-C: what a CI cancel sends (to the whole process group, so under
xdist the controller and every worker get it).

In the controller (or the only process) the first SIGTERM ends the session the way pytest
ends it on Ctrl-C (a KeyboardInterrupt in the main thread: the session finishes, the reporter writes the record of
what finished, cut short with the reason ``terminated (SIGTERM)``, exit status INTERRUPTED);
a second SIGTERM while the record is written is ignored (SIGKILL still ends the process).
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


def install(config: pytest.Config) -> None:
    if threading.current_thread() is not threading.main_thread() or TERMINATED in config.stash:
        return
    config.stash[TERMINATED] = ""  # installed; not (yet) terminated

    def on_sigterm(signum: int, frame: Any) -> None:
        if config.stash.get(TERMINATED, ""):
            return  # already stopping: let the record be written
        config.stash[TERMINATED] = REASON
        # not pytest.exit: its exception is an Exception, which an agent's own error handling
        # (and the runner's) would catch as the agent failing
        raise KeyboardInterrupt(REASON)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous))


def terminated(config: pytest.Config) -> str | None:
    """``terminated (SIGTERM)`` when this process received SIGTERM, else None."""
    return config.stash.get(TERMINATED, "") or None
