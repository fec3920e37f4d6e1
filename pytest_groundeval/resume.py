"""Resume and rescore: reuse what a stored run (record or journal) already produced.

``--resume``: a case that run finished, with the same case content hash, is taken as it
was (no agent call); the rest run. ``--rescore``: every case's stored raw output is parsed
and scored again with the current scorer; no agent is called at all.
"""

from __future__ import annotations

import copy
from typing import Any

from .evaluate import load_case, new_entry, score_output
from .record import StoredRun
from .tasks.base import Task


def is_finished(entry: dict[str, Any]) -> bool:
    """Finished = it has a verdict that another call would not change for infrastructure
    reasons. API failures (``error_kind`` agent) and budget skips are run again."""
    if entry.get("outcome") in ("passed", "failed"):
        return True
    return entry.get("outcome") == "error" and entry.get("error_kind") in ("case", "parse", "internal")


def reuse_stored(task: Task, ref: Any, stored: StoredRun, *, rescore: bool, scorer: Any = None) -> dict[str, Any] | None:
    """The entry for ``ref`` taken from ``stored``; None when the case must run (resume only)."""
    old = stored.cases.get((ref.task, ref.case_id))
    fresh = new_entry(ref)
    case = load_case(task, ref, fresh)
    if rescore:
        if old is None:
            fresh.update(error=f"not in the stored run {stored.path.name}: nothing to re-score", error_kind="case")
            return fresh
        if case is None:
            return fresh
        if old.get("content_hash") != case.content_hash:
            fresh.update(error=f"case content changed since run {stored.run_id} (content hash differs); "
                         "re-run it instead of re-scoring", error_kind="case")
            return fresh
        if old.get("raw_output") is None and old.get("structured_output") is None:
            # the stored case never got an answer (API error, budget): keep it as it was
            return {**copy.deepcopy(old), "rescored_from": stored.run_id}
        entry = {**copy.deepcopy(old), "ground_truth": case.truth, "rescored_from": stored.run_id}
        return score_output(task, case, entry, old.get("raw_output"), old.get("structured_output"), scorer)
    if old is None or not is_finished(old) or case is None or old.get("content_hash") != case.content_hash:
        return None
    return {**copy.deepcopy(old), "resumed_from": stored.run_id}
