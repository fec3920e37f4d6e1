"""The one channel from an xdist worker to the controller (``pytest/workeroutput.py``): what a
worker publishes is plain data under one ``workeroutput`` key, the controller gets the typed
``WorkerOutput`` back (its shard a ``ShardRecord``, LangSmith's experiments typed too), and a
malformed channel is an error that names the worker and the field, never a silent drop; end
to end through real ``-n 2`` sessions."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import SMALL_SET

from pytest_groundeval.model import LangSmithExperiment, ShardRecord
from pytest_groundeval.pytest.workeroutput import (KEY, LangSmithOutput, WorkerOutput, WorkerOutputError, current,
                                                   parse, publish)

FAST = ("-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-p", "no:anyio")
SHARD = ShardRecord(index=1, count=2, selection_size=4, selection_sha256="sha256:abc")
EXPERIMENT = LangSmithExperiment(task="extraction", dataset="groundeval/extraction", dataset_id="d", experiment="e",
                                 experiment_id="x", url=None)


def _config(worker: bool) -> SimpleNamespace:
    config = SimpleNamespace(stash=pytest.Stash())
    if worker:
        config.workeroutput = {}
    return config


def _node(workeroutput: dict, workerid: str = "gw1") -> SimpleNamespace:
    return SimpleNamespace(workeroutput=workeroutput, workerinput={"workerid": workerid})


def test_what_a_worker_publishes_is_plain_data_that_the_controller_gets_back_typed():
    config = _config(worker=True)
    publish(config, selected=4, deselected=2)
    publish(config, shard=SHARD, shard_kept=3)
    publish(config, concurrency=2, stop_reason="stopped after 5 identical errors",
            langsmith=LangSmithOutput(experiments=[EXPERIMENT], n_errors=1, errors=["boom"], counts={"feedback": 7}))
    sent = config.workeroutput
    assert list(sent) == [KEY]  # one key, whatever publishes
    wire = json.loads(json.dumps(sent))  # plain data: what execnet can carry
    assert wire == sent
    back = parse(_node(wire))
    assert isinstance(back, WorkerOutput) and back == current(config)
    assert isinstance(back.shard, ShardRecord) and back.shard == SHARD and back.shard_kept == 3
    assert (back.selected, back.deselected, back.concurrency) == (4, 2, 2)
    assert isinstance(back.langsmith, LangSmithOutput)
    assert back.langsmith.experiments == [EXPERIMENT] and isinstance(back.langsmith.experiments[0], LangSmithExperiment)


def test_the_only_process_keeps_its_output_typed_and_writes_no_channel():
    config = _config(worker=False)
    out = publish(config, selected=3)
    assert current(config) is out and out.selected == 3 and not hasattr(config, "workeroutput")


def test_a_field_of_the_wrong_type_is_refused_where_it_is_set():
    with pytest.raises(ValueError):
        publish(_config(worker=True), concurrency="lots")


@pytest.mark.parametrize("bad, field", [
    ({"concurrency": "lots"}, "concurrency"),
    ({"selected": 1, "selcted": 2}, "selcted"),  # a name the model does not have: not ignored
    ({"shard": {"index": 1}}, "shard.count"),
    ({"langsmith": {"experiments": [{"task": "x"}]}}, "langsmith.experiments.0.dataset"),
    ("not a mapping", "(the whole value)"),
])
def test_a_malformed_channel_is_an_error_naming_the_worker_and_the_field(bad, field):
    with pytest.raises(WorkerOutputError) as info:
        parse(_node({KEY: bad}, "gw3"))
    assert "gw3" in str(info.value) and f": {field}: " in str(info.value), str(info.value)


def test_a_worker_that_sent_nothing_is_none():
    assert parse(_node({})) is None
    assert parse(SimpleNamespace()) is None  # a worker that died has no workeroutput at all


# ---------------------------------------------------------------- end to end under -n 2
PROBE = '''
import json
import pytest

def pytest_sessionfinish(session):
    from pytest_groundeval.pytest.keys import REPORTER
    from pytest_groundeval.pytest.workeroutput import WorkerOutput

    reporter = session.config.stash.get(REPORTER, None)
    if reporter is None:
        return  # a worker
    with open("controller.json", "w") as fh:
        json.dump([[type(o).__name__ == "WorkerOutput" and isinstance(o, WorkerOutput), o.model_dump(mode="json")]
                   for o in reporter.workers], fh)
'''

CORRUPT = '''
import pytest

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    out = getattr(session.config, "workeroutput", None)
    if out is not None and "groundeval" in out:  # a worker, after groundeval published
        out["groundeval"]["concurrency"] = "lots"
'''


def test_under_xdist_the_controller_gets_each_worker_s_output_typed(evalproject):
    evalproject.makeconftest(PROBE)
    result = evalproject.runpytest_subprocess(*FAST, "-n", "2", "--agent=agents_under_test:Correct", "--data-dir",
                                              "data", "--run-record", "record.json", "--groundeval-shard", "1/1")
    assert result.ret == 0, result.stdout.str()
    got = json.loads((evalproject.path / "controller.json").read_text())
    assert len(got) == 2 and all(typed for typed, _ in got)
    for _, out in got:  # every worker collects every item
        assert out["selected"] == len(SMALL_SET) and out["shard"]["selection_size"] == len(SMALL_SET)
    record = json.loads((evalproject.path / "record.json").read_text())
    assert record["completeness"]["selected"] == len(SMALL_SET) and record["completeness"]["shard"]["count"] == 1


def test_under_xdist_a_malformed_worker_output_fails_the_run_and_says_so(evalproject):
    evalproject.makeconftest(CORRUPT)
    result = evalproject.runpytest_subprocess(*FAST, "-n", "2", "--agent=agents_under_test:Correct", "--data-dir",
                                              "data", "--run-record", "record.json")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR, out
    assert "workeroutput['groundeval'] is not a WorkerOutput: concurrency:" in out
    assert "pytest-xdist worker gw0" in out and "pytest-xdist worker gw1" in out
