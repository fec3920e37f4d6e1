"""``--groundeval-shard K/N``: one CI job's share of a run's eval cases.

Each eval case belongs to shard ``int(sha256(task NUL case_id)[:8]) mod N + 1`` (the case id
as the record holds it: namespaced by its suite, ``items.py``): by what the case is, never by where it sits in collection order, so every process that collects (a CI
job on another machine, an xdist worker inside a job) computes the same split, and adding or
removing a case moves no other case to another shard. The other shards' eval items are
deselected through pytest's own ``pytest_deselected`` hook after ``-k`` / ``-m`` have chosen
the run's selection; items that are not eval cases are left alone (they run in every shard).

The record of a shard says so (``completeness.shard``: K, N, how many eval items the whole
selection holds and a digest of their keys), so ``groundeval merge`` can refuse a missing or
duplicated shard and check that the merged cases are exactly what the unsharded run selects.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

import pytest

from pytest_groundeval.model import ShardRecord


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` → ``(K, N)`` with ``1 <= K <= N``; a ``ValueError`` saying what is wrong."""
    k, sep, n = str(text).strip().partition("/")
    try:
        index, count = int(k), int(n)
    except ValueError:
        index = count = 0
    if not sep or count < 1:
        raise ValueError(f"{text!r}: expected K/N, shard K of N (e.g. 1/4)")
    if not 1 <= index <= count:
        raise ValueError(f"{text!r}: K must be between 1 and N ({count})")
    return index, count


def shard_of(task: str, case_id: str, count: int) -> int:
    """The shard (1-based) of the case ``(task, case_id)`` in a split into ``count`` shards."""
    digest = hashlib.sha256(f"{task}\0{case_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def selection_digest(keys: Iterable[tuple[str, str]]) -> str:
    """A digest of a set of ``(task, case_id)`` keys (order and repeats do not matter)."""
    h = hashlib.sha256()
    for task, case_id in sorted(set(keys)):
        h.update(f"{task}\0{case_id}\n".encode("utf-8"))
    return "sha256:" + h.hexdigest()


class Sharder:
    """Registered (``plugin.py``) in every process of a session run with ``--groundeval-shard``.

    Where items are collected (the only process, or each xdist worker) it deselects the
    other shards' eval items and notes the whole selection in this process's ``WorkerOutput``
    (``workeroutput.py``; an xdist worker's reaches the controller), which the reporter puts
    in the record."""

    froze = False  # (plugin.py asks every groundeval plugin whether it froze the collector)

    def __init__(self, index: int, count: int) -> None:
        self.index, self.count = index, count

    @pytest.hookimpl(trylast=True)  # after -k / -m (and any other plugin) chose the run's selection
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        from pytest_groundeval.pytest.items import case_ref, settle_suites
        from pytest_groundeval.pytest.workeroutput import publish

        settle_suites(config, items)  # the ids the record will hold (whichever plugin's hook ran first)
        evals = [(item, ref) for item in items if (ref := case_ref(item)) is not None]
        if not evals:
            return
        info = ShardRecord(index=self.index, count=self.count, selection_size=len(evals),
                           selection_sha256=selection_digest((ref.task, ref.case_id) for _, ref in evals))
        others = {id(item) for item, ref in evals if shard_of(ref.task, ref.case_id, self.count) != self.index}
        publish(config, shard=info, shard_kept=len(evals) - len(others))
        if others:
            config.hook.pytest_deselected(items=[item for item in items if id(item) in others])
            items[:] = [item for item in items if id(item) not in others]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_groundeval.pytest.keys import REPORTER

        reporter = terminalreporter.config.stash.get(REPORTER, None)
        info, kept = reporter.shard() if reporter is not None else (None, 0)  # this process's, or a worker's
        if info is not None:
            terminalreporter.write_line(
                f"groundeval: shard {self.index}/{self.count}: {kept} of the {info.selection_size} selected "
                f"eval cases; `groundeval merge` the {self.count} shard records into the run's record")


def register_sharder(config: pytest.Config, shard: tuple[int, int] | None) -> Sharder | None:
    if shard is None:
        return None
    from pytest_groundeval.pytest.keys import SHARDER

    sharder = config.stash[SHARDER] = Sharder(*shard)
    config.pluginmanager.register(sharder, "groundeval-sharder")
    return sharder
