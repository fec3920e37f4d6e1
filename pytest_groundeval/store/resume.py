"""The one rule for reusing a stored result (``--resume`` / ``--rescore``): does this case
need a call of the agent? Used by the evaluator (which plans and prefetches the calls) and
by ``runner.reuse`` (which takes the stored result), so the two cannot disagree.
"""

from __future__ import annotations

from typing import Literal

from pytest_groundeval.model import CaseResult

Mode = Literal["run", "resume", "rescore"]


def stands(old: CaseResult | None, content_hash: str | None) -> bool:
    """``--resume``: the stored result stands (no call) when the stored run finished the case
    (a verdict: passed, failed, or an error another call would not change) and the case's
    content is what it was then (same content hash); anything else is run again."""
    return (old is not None and old.finished and content_hash is not None
            and old.content_hash == content_hash)


def needs_call(mode: str | None, old: CaseResult | None, content_hash: str | None) -> bool:
    """Does this case need a call of the agent? ``--rescore`` never calls (it re-scores the
    stored answer); ``--resume`` calls unless the stored result :func:`stands`; a fresh run
    always calls."""
    if mode == "rescore":
        return False
    if mode == "resume":
        return not stands(old, content_hash)
    return True
