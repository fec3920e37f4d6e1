"""What a dead xdist worker was doing: which case crashed it, and which were merely beside it.

xdist names one item when a worker dies (the item its scheduler saw running), but a worker
keeps two agent calls in flight (its current and its next item), so the call that crashed the
process may be the next item's. Each worker therefore keeps a ledger (``ledger.py``) in a
folder the controller hands it (``workerinput``): which calls were in flight on which thread,
which pytest-timeout timers fired (``timeouts.py``), and faulthandler's dump naming the thread
that received the fatal signal (the dump is also copied to the controller's stderr, where the
worker's own would have gone).

When the controller hears of the crash it reads them (:meth:`CrashLedgers.diagnose`):

* the item ran past a pytest-timeout (thread method): kind ``timeout``, one line;
* another case's agent call crashed the worker (faulthandler's faulting thread was that call's):
  the item is ``interrupted`` (not run to the end, through no fault of its own; ``--resume``
  runs it again), and the case whose call crashed, which xdist hands to a replacement worker,
  is recorded by its own run there;
* else the item is the ``crash``: its own call's thread faulted, or the main thread (its test,
  its scoring), or the process ended without a dump (``os._exit``, a kill: no evidence against
  another call); a call in flight beside it is named in the message.

The controller also counts the eval items each worker collected
(``pytest_xdist_node_collection_finished``), so a run whose workers all died still knows how
many cases it selected.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_groundeval.pytest.keys import CRASHES, listing_only
from pytest_groundeval.pytest.ledger import WorkerLedger
from pytest_groundeval.model import CaseRef, ErrorInfo

LEDGER = "groundeval_ledger"  # the workerinput key: the folder of the ledgers
_FAULTING = re.compile(r"^Current thread (0x[0-9a-fA-F]+)", re.MULTILINE)


def worker_ledger(config: pytest.Config) -> WorkerLedger | None:
    """This xdist worker's ledger, when its controller asked for one."""
    workerinput = getattr(config, "workerinput", None) or {}
    folder = workerinput.get(LEDGER)
    if not folder or not Path(folder).is_dir():
        return None
    ledger = WorkerLedger(Path(folder), str(workerinput.get("workerid", os.getpid())))
    config.add_cleanup(ledger.close)
    return ledger


class CrashLedgers:
    """The controller's side (registered as a plugin under xdist)."""

    def __init__(self, case_ids: Callable[[], set[str]]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="groundeval-ledgers-"))
        self.case_ids = case_ids  # the item ids of every eval case (the controller's evaluator's)
        self.selected: int | None = None  # eval items a worker collected (every worker collects all)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[LEDGER] = str(self.folder)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.selected is None:
            known = self.case_ids()
            self.selected = sum(1 for nodeid in ids
                                if nodeid.endswith("]") and "[" in nodeid and nodeid.split("[", 1)[1][:-1] in known)

    def _events(self, node: Any) -> tuple[str, list[dict[str, Any]]]:
        """The dead worker's id and its ledger's lines (a line cut by the death is skipped)."""
        worker = str((getattr(node, "workerinput", None) or {}).get("workerid", "?"))
        try:
            lines = (self.folder / f"{worker}.jsonl").read_text().splitlines()
        except OSError:
            lines = []
        events = []
        for raw in lines:
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                events.append(obj)
        return worker, events

    def tools_offered(self, node: Any, ref: CaseRef) -> list[str] | None:
        """The tools the harness gave the agent of ``ref`` on the dead worker (its ledger's
        ``offered`` line), or None."""
        me = list(ref.key)
        for obj in reversed(self._events(node)[1]):
            if obj.get("event") == "offered" and obj.get("key") == me and isinstance(obj.get("tools"), list):
                return [str(t) for t in obj["tools"]] or None
        return None

    def diagnose(self, node: Any, ref: CaseRef, crashitem: str) -> ErrorInfo:
        starts: dict[tuple, int] = {}
        ended: set[tuple] = set()
        timeouts: dict[tuple, str] = {}
        worker, events = self._events(node)
        for obj in events:
            key = tuple(obj.get("key") or ())
            if obj.get("event") in ("start", "thread"):
                starts[key] = obj.get("thread")  # the last thread the agent was called on for it
                ended.discard(key)
            elif obj.get("event") == "end":
                ended.add(key)
            elif obj.get("event") == "timeout":
                timeouts[key] = obj.get("message", "")
        me = tuple(ref.key)
        if me in timeouts:
            return ErrorInfo(kind="timeout", message=timeouts[me])
        dump = self._fault_dump(worker)
        faulting = _FAULTING.search(dump)
        in_flight = {k: t for k, t in starts.items() if k not in ended}
        culprit = next((k for k, t in in_flight.items() if faulting and t == int(faulting.group(1), 16)), None)
        fatal = next((line for line in dump.splitlines() if line.startswith("Fatal Python error")), "")
        what = f" ({fatal})" if fatal else ""
        others = [k for k in in_flight if k != me]
        # no dump (os._exit, SIGKILL): no evidence against another call; the item keeps the crash
        if culprit is not None and culprit != me:
            return ErrorInfo(kind="interrupted", not_run=True, message=(
                f"not run to the end: the pytest-xdist worker {worker} crashed{what} in the agent call for "
                f"{':'.join(map(str, culprit))}, which is run again on its own; --resume runs this case again"))
        beside = f" (the call for {', '.join(':'.join(map(str, k)) for k in others)} was in flight too)" if others else ""
        return ErrorInfo(kind="crash", message=(
            f"the pytest-xdist worker {worker} running it crashed{what}{beside}: worker {worker!r} crashed while "
            f"running {crashitem!r}"))

    def _fault_dump(self, worker: str) -> str:
        path = self.folder / f"{worker}.fault"
        try:
            dump = path.read_text(errors="replace")
            path.write_text("")  # a replacement worker gets another id; this one is read once
        except OSError:
            return ""
        if dump:
            sys.stderr.write(f"[{worker}] {dump}")  # where the worker's own faulthandler would have written
            sys.stderr.flush()
        return dump


def register(config: pytest.Config, evaluator: Any, controller: bool) -> None:
    """An xdist worker writes its ledger (if its controller gave it a folder); an xdist
    controller hands out the folder and reads the ledgers when a worker dies (the reporter
    finds them under the ``CRASHES`` stash key)."""
    if getattr(config, "workerinput", None) is not None:
        ledger = worker_ledger(config)
        if ledger is not None:
            evaluator.observe(ledger=ledger)
        return
    # an xdist controller: xdist sets --dist (load for -n) before configure, registers its
    # session plugin only in its own (maybe later) pytest_configure
    if not controller or getattr(config.option, "dist", "no") == "no" or listing_only(config):
        return

    def case_ids() -> set[str]:
        ids: set[str] = set()
        for task in evaluator.tasks:
            try:
                ids.update(r.item_id for r in evaluator.refs(task))
            except (FileNotFoundError, ValueError):
                continue
        return ids

    ledgers = CrashLedgers(case_ids)
    config.pluginmanager.register(ledgers, "groundeval-crashes")
    config.stash[CRASHES] = ledgers

    def unregister() -> None:
        del config.stash[CRASHES]
        if config.pluginmanager.is_registered(ledgers):
            config.pluginmanager.unregister(ledgers)
        ledgers.close()

    config.add_cleanup(unregister)
