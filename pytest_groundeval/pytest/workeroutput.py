"""The one channel from a pytest-xdist worker back to the controller: a typed
:class:`WorkerOutput` under ONE ``workeroutput`` key (as xdist's own dsession reads a
worker's ``workeroutput`` when the node goes down).

Where items run, each part of groundeval says what it knows as soon as it knows it
(:func:`publish`: the evaluator its selection, concurrency and stop; the sharder its shard;
LangSmith's worker half its experiments and errors) into this process's one
``WorkerOutput`` (``config.stash``); on an xdist worker it is also written, as plain JSON
data, into ``config.workeroutput[KEY]``, which xdist sends once the session finishes. The
controller reads it back with :func:`parse` into the same typed model; a channel that is
not one is a :class:`WorkerOutputError` naming the worker and the field, never a silent
drop. The process that runs items itself (no xdist) reads its own model, the same value.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_groundeval.model import LangSmithExperiment, ShardRecord
from pytest_groundeval.pytest.keys import WORKER_OUTPUT

KEY = "groundeval"  # the one workeroutput key


class _Channel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LangSmithOutput(_Channel):
    """LangSmith's worker half (``integrations/langsmith/worker.py``): what it made and what failed."""

    experiments: list[LangSmithExperiment] = Field(default_factory=list)  # the suites this process set up
    n_errors: int = 0
    errors: list[str] = Field(default_factory=list)  # the first few messages
    gave_up: bool = False
    counts: dict[str, int] = Field(default_factory=dict)  # examples, root runs, feedback sent


class WorkerOutput(_Channel):
    """What one process that ran items reports of its session."""

    concurrency: int = 1  # agent calls it kept in flight
    selected: int | None = None  # eval items selected in its collection (None: it collected none)
    deselected: int = 0  # eval items deselected there (-k, -m, another shard)
    stop_reason: str | None = None  # why it stopped calling the agent (identical errors), if it did
    shard: ShardRecord | None = None  # --groundeval-shard: the whole selection's note
    shard_kept: int = 0  # --groundeval-shard: the eval items of this shard
    langsmith: LangSmithOutput | None = None  # LangSmith on: its worker half's output


class WorkerOutputError(ValueError):
    """A worker's ``workeroutput[KEY]`` is not a :class:`WorkerOutput` (a groundeval bug, or
    two groundeval versions in one session)."""


def current(config: Any) -> WorkerOutput:
    """This process's own output (made on first use)."""
    out = config.stash.get(WORKER_OUTPUT, None)
    if out is None:
        out = config.stash[WORKER_OUTPUT] = WorkerOutput()
    return out


def publish(config: Any, **fields: Any) -> WorkerOutput:
    """Set fields of this process's output (each checked as it is set); on an xdist worker,
    also the plain data xdist sends the controller."""
    out = current(config)
    for name, value in fields.items():
        setattr(out, name, value)
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[KEY] = out.model_dump(mode="json")
    return out


def parse(node: Any) -> WorkerOutput | None:
    """The controller's side: a finished worker's output, typed; None when it sent none (it
    died, or never set groundeval up); :class:`WorkerOutputError` when it is malformed."""
    data = (getattr(node, "workeroutput", None) or {}).get(KEY)
    if data is None:
        return None
    worker = (getattr(node, "workerinput", None) or {}).get("workerid", "?")
    try:
        return WorkerOutput.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"])) or "(the whole value)"
        raise WorkerOutputError(f"the pytest-xdist worker {worker}'s workeroutput[{KEY!r}] is not a WorkerOutput: "
                                f"{where}: {first['msg']} ({e.error_count()} error(s))") from None
