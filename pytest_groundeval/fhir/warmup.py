"""Cold bundles validated ahead of the items, off the item path.

When the items are collected, the bundle files the selected cases will validate
(``Task.validated_bundles``) are hashed; those with no verdict yet (none in this process,
none shipped with the package, none stored under ``.groundeval/bundles``) are handed out at
once, in run order: to worker processes when there are :data:`POOL_MIN` or more (validation is
CPU-bound: in other processes it runs beside the items instead of holding this process's
GIL), else to one thread here. An item whose bundle is on its way waits for its verdict
(``BundleMemo.expect``), it never validates it again.

Never twice, also across xdist workers (each collects the same items): a bundle is validated
under an exclusive lock on its key in the cache folder, after looking on disk again, and its
verdict is on disk before the lock is released (``BundleMemo.validate_claimed``). A worker
process that finds the lock held moves on; the item that needs that verdict waits for the lock
and reads the entry. Without a cache folder (``GROUNDEVAL_BUNDLE_CACHE=off``) nothing is
validated ahead: every item validates its own bundle, as before.

The verdict is what the item would have found: the same ``bundles.build``, the same entry.
"""

from __future__ import annotations

import os
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from pytest_groundeval.fhir import bundles

# cold bundles from which they are validated in worker processes: a worker costs about a second
# of start-up (importing the models) before its first verdict, which a few hundred validations
# (~5 ms each) repay; fewer go to one thread here
POOL_MIN = 256
# imported once in the fork server, so every worker forked from it starts with the models of a
# Synthea bundle built (a model module missing is skipped)
_PRELOAD = ["pytest_groundeval.fhir.bundles", "fhir.resources.R4B.bundle"] + [
    f"fhir.resources.R4B.{name}" for name in (
        "patient", "medicationrequest", "medication", "condition", "allergyintolerance", "encounter",
        "observation", "procedure", "immunization", "careplan", "careteam", "claim", "explanationofbenefit",
        "diagnosticreport", "documentreference", "organization", "practitioner", "practitionerrole", "location",
        "provenance", "imagingstudy", "device", "supplydelivery", "medicationadministration", "goal", "coverage")]


class Ahead:
    """The validations handed out for one session; :meth:`stop` cancels what has not started
    and waits for the rest (no worker process outlives the session)."""

    def __init__(self, executor: Executor, futures: list[Future], processes: int) -> None:
        self.executor = executor
        self.futures = futures
        self.processes = processes  # worker processes (0: a thread of this process)

    def stop(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        bundles.memo().forget_pending()


def cold(paths: Iterable[Path]) -> list[tuple[Path, str]]:
    """``(path, content hash)`` of the bundles with no verdict anywhere yet, each hash once, in order."""
    from pytest_groundeval.model import CaseError
    from pytest_groundeval.tasks.datasets import content_hash, read_bytes

    memo = bundles.memo()
    out, seen = [], set()
    for path in paths:
        try:
            digest = content_hash(read_bytes(path))
        except CaseError:
            continue  # its item says why
        if digest not in seen and not memo.known(digest):
            seen.add(digest)
            out.append((path, digest))
    return out


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _executor(n_cold: int) -> tuple[Executor, int]:
    if n_cold < POOL_MIN:
        return ThreadPoolExecutor(1, thread_name_prefix="groundeval-validate"), 0
    import multiprocessing

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)  # (xdist's: they share the cores)
    n = max(1, min(_cores() // max(workers, 1), n_cold // POOL_MIN))
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(_PRELOAD)  # the validating modules imported once, not per worker
    return ProcessPoolExecutor(n, mp_context=context), n


def start(paths: Iterable[Path]) -> Ahead | None:
    """Hand the cold bundles among ``paths`` out for validation (None: nothing to do, or no
    cache folder to share verdicts through)."""
    memo = bundles.memo()
    if memo.folder is None:
        return None
    todo = cold(paths)
    if not todo:
        return None
    executor, processes = _executor(len(todo))
    futures = []
    for path, digest in todo:
        future = executor.submit(validate_file, str(path), str(memo.folder), digest) if processes \
            else executor.submit(_validate_here, path, digest)
        memo.expect(digest, future)
        futures.append(future)
    return Ahead(executor, futures, processes)


def _validate_here(path: Path, digest: str) -> tuple[str | None] | None:
    return _validate(bundles.memo(), path, digest)


_CHILD_MEMO: dict[str, bundles.BundleMemo] = {}


def validate_file(path: str, folder: str, digest: str) -> tuple[str | None] | None:
    """In a worker process: the verdict on the bundle at ``path`` (expected to hash to
    ``digest``), validated under its claim and stored under ``folder``; None when another
    process holds the claim or the file changed (the item then validates what it reads)."""
    memo = _CHILD_MEMO.get(folder)
    if memo is None:
        memo = _CHILD_MEMO[folder] = bundles.BundleMemo(Path(folder))
    return _validate(memo, Path(path), digest)


def _validate(memo: bundles.BundleMemo, path: Path, digest: str) -> tuple[str | None] | None:
    from pytest_groundeval.model import CaseError
    from pytest_groundeval.tasks.datasets import content_hash, read_bytes

    try:
        raw = read_bytes(path)
    except CaseError:
        return None
    if content_hash(raw) != digest:
        return None
    try:
        return memo.validate_claimed(raw, digest, wait=False)
    except ValueError:  # not JSON: the item reports it (it reads the file before it asks for a verdict)
        return None
