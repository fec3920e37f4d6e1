"""Cold user bundles validated ahead of the items, off the item path (``fhir/warmup.py``):
each exactly once in a session, also across xdist workers, in worker processes when many are
cold, and the verdicts (an invalid bundle's case error too) identical to validating in-line.

The observable: ``$GROUNDEVAL_VALIDATION_LOG``, one line ``<pid> <key>`` per validation, from
whichever process validated."""

from __future__ import annotations

import json
from collections import Counter

import orjson
import pytest
from conftest import EVAL_FILE, AGENTS, REFS, SYNTHEA
from test_bundle_cache import _entry

from pytest_groundeval.fhir import bundles, warmup
from pytest_groundeval.tasks.datasets import content_hash

ARGS = ("-p", "no:cacheprovider", "--agent=agents_under_test:Correct", "--data-dir", "data")


def _project(pytester: pytest.Pytester, n: int, bad: bool = True) -> dict[str, str]:
    """``n`` distinct valid bundles (a different Bundle.id each) and, with ``bad``, an invalid
    one (a status outside its value set); {case id: content hash}."""
    pytester.makepyfile(test_evals=EVAL_FILE)
    pytester.makepyfile(agents_under_test=AGENTS)
    data = pytester.mkdir("data")
    source = orjson.loads((SYNTHEA / f"{REFS}.json").read_bytes())
    raws = {f"case-{i:02d}": orjson.dumps({**source, "id": f"warm-{i}"}) for i in range(n)}
    if bad:
        broken = orjson.loads((SYNTHEA / f"{REFS}.json").read_bytes())
        _entry(broken, "MedicationRequest")["resource"]["status"] = "finished"
        raws["bad"] = orjson.dumps(broken)
    for name, raw in raws.items():
        (data / f"{name}.json").write_bytes(raw)
    return {name: content_hash(raw) for name, raw in raws.items()}


def _validations(log) -> Counter:
    return Counter(line.split()[1] for line in log.read_text().splitlines()) if log.exists() else Counter()


def _cases(pytester: pytest.Pytester, record: str) -> dict[str, tuple]:
    data = json.loads((pytester.path / record).read_text())
    return {c["case_id"]: (c["outcome"], (c.get("error") or {}).get("message")) for c in data["cases"]}


POOL_MIN = 6  # (the tests' threshold for worker processes: a conftest sets it in every pytest process)


@pytest.mark.parametrize("n, workers", [(3, None), (POOL_MIN + 2, "2")],
                         ids=["few-cold-a-thread", "many-cold-worker-processes-n2"])
def test_a_cold_bundle_is_validated_exactly_once_and_as_in_line(pytester, monkeypatch, n, workers):
    hashes = _project(pytester, n)
    pytester.makeconftest(f"""
import os
from pytest_groundeval.fhir import warmup
warmup.POOL_MIN = {POOL_MIN}

def pytest_configure(config):  # the pytest processes (controller, workers): pids
    with open("pytest-pids.txt", "a") as fh:
        fh.write(f"{{os.getpid()}}\\n")
""")
    log = pytester.path / "validations.log"
    monkeypatch.setenv(bundles.VALIDATION_LOG, str(log))
    xdist = ("-n", workers) if workers else ()
    result = pytester.runpytest_subprocess(*ARGS, *xdist, "--run-record", "ahead.json")
    result.assert_outcomes(passed=n, errors=1)  # the invalid bundle: a case error (pytest E)
    keys = {bundles.BundleMemo.key(h): name for name, h in hashes.items()}
    counted = _validations(log)
    assert set(counted) == set(keys) and set(counted.values()) == {1}, counted  # each once, in one process
    validators = {line.split()[0] for line in log.read_text().splitlines()}
    pytest_pids = set((pytester.path / "pytest-pids.txt").read_text().split())
    if workers:  # in worker processes, none in a pytest process
        assert validators and not validators & pytest_pids
    else:  # a thread of the one pytest process
        assert validators == pytest_pids
    # the same data validated in-line (no cache folder: nothing ahead, every item validates its own)
    monkeypatch.setenv("GROUNDEVAL_BUNDLE_CACHE", "off")
    log.unlink()
    inline = pytester.runpytest_subprocess(*ARGS, "--run-record", "inline.json")
    inline.assert_outcomes(passed=n, errors=1)
    assert _cases(pytester, "ahead.json") == _cases(pytester, "inline.json")
    outcome, message = _cases(pytester, "ahead.json")["bad"]
    assert outcome == "error" and message.startswith("bad.json: not a valid FHIR R4B Bundle (1 issue): ")


def test_many_cold_go_to_worker_processes_and_the_items_wait_for_their_verdicts(tmp_path, monkeypatch):
    """In one process: the cold bundles handed to worker processes, the item path validates none."""
    from pytest_groundeval.tasks.extraction import ExtractionTask

    data = tmp_path / "data"
    data.mkdir()
    source = orjson.loads((SYNTHEA / f"{REFS}.json").read_bytes())
    monkeypatch.setattr(warmup, "POOL_MIN", POOL_MIN)
    for i in range(POOL_MIN):
        (data / f"c{i:02d}.json").write_bytes(orjson.dumps({**source, "id": f"pool-{i}"}))
    log = tmp_path / "validations.log"
    monkeypatch.setenv(bundles.VALIDATION_LOG, str(log))
    memo = bundles.BundleMemo(tmp_path / "store")
    monkeypatch.setattr(bundles, "_MEMO", memo)
    task = ExtractionTask(data)
    refs = task.discover()
    ahead = warmup.start(path for ref in refs for path in task.validated_bundles(ref))
    try:
        assert ahead is not None and ahead.processes >= 1
        assert all(task.load(ref).truth for ref in refs)
    finally:
        ahead.stop()
    assert memo.builds == 0  # none on the item path (nor in this process)
    counted = _validations(log)
    assert len(counted) == POOL_MIN and set(counted.values()) == {1}
    assert str(__import__("os").getpid()) not in {line.split()[0] for line in log.read_text().splitlines()}
    assert warmup.start(path for ref in refs for path in task.validated_bundles(ref)) is None  # all known now
