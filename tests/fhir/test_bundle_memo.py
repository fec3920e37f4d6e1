"""fhir/bundles.py's memo off the item path: the on-disk entries are written on a background
thread (all on disk once flushed: at the end of a session, when the memo is replaced, at
exit), and a Bundle the validation built is kept by the memo only once a case uses it (a
prompt-only run holds no Bundle beyond its case)."""

from __future__ import annotations

import gc
import threading
import weakref

import orjson
import pytest
from conftest import SYNTHEA

from pytest_groundeval.fhir import bundles
from pytest_groundeval.tasks.datasets import content_hash

FIXTURES = sorted(SYNTHEA.glob("*.json"))
for _path in FIXTURES[:3]:  # imported here, in the outer process (see tests/test_bundle_cache.py)
    bundles.build(orjson.loads(_path.read_bytes()))


def _distinct(n: int) -> list[bytes]:
    """``n`` distinct valid bundles (one fixture, a different Bundle.id each)."""
    data = orjson.loads(FIXTURES[0].read_bytes())
    return [orjson.dumps({**data, "id": f"memo-{i}"}) for i in range(n)]


def _entries(folder) -> list:
    return sorted(folder.rglob("*.bin"))


def _held_memo(tmp_path, monkeypatch) -> tuple[bundles.BundleMemo, threading.Event]:
    """A memo with a background writer that writes nothing until the returned event is set."""
    memo = bundles.BundleMemo(tmp_path / "store", background=True)
    gate = threading.Event()
    real = memo._write_now

    def held(*args):
        gate.wait()
        real(*args)

    monkeypatch.setattr(memo._writer, "_write", held)
    return memo, gate


def test_flush_returns_once_every_entry_handed_to_the_writer_is_on_disk(tmp_path, monkeypatch):
    memo, gate = _held_memo(tmp_path, monkeypatch)
    raws = _distinct(12)
    for raw in raws:
        assert memo.verdict(raw, content_hash(raw)).valid
    assert _entries(tmp_path / "store") == []  # the item path did not wait for the disk
    gate.set()
    memo.flush()
    assert len(_entries(tmp_path / "store")) == 12
    again = bundles.BundleMemo(tmp_path / "store")  # a new process reads them all
    assert all(again.verdict(raw, content_hash(raw)).valid for raw in raws)
    assert again.disk_hits == 12 and again.builds == 0


def test_replacing_the_process_memo_flushes_the_old_one(tmp_path, monkeypatch):
    monkeypatch.delenv("GROUNDEVAL_BUNDLE_CACHE", raising=False)
    monkeypatch.setattr(bundles, "_MEMO", bundles.BundleMemo(None))
    bundles.configure(tmp_path / "a")
    raws = _distinct(5)
    for raw in raws:
        bundles.verdict(raw, content_hash(raw))
    bundles.configure(tmp_path / "b")
    assert len(_entries(tmp_path / "a")) == 5
    bundles.configure(None)


def test_a_bundle_no_case_uses_dies_with_its_verdict_and_a_used_one_is_kept(tmp_path):
    memo = bundles.BundleMemo(None)
    raw_a, raw_b = _distinct(2)
    v = memo.verdict(raw_a, content_hash(raw_a))
    unused = weakref.ref(v._bundle)
    del v
    gc.collect()
    assert unused() is None  # prompt-only: nothing holds the Bundle after its case
    assert memo.builds == 1
    again = memo.verdict(raw_a, content_hash(raw_a))  # known valid: not validated again
    assert again.valid and memo.builds == 1
    built = again.bundle()  # asked for: built then (once), and kept
    assert memo.builds == 2
    v_b = memo.verdict(raw_b, content_hash(raw_b))
    used = v_b.bundle()
    del v_b
    gc.collect()
    assert memo.verdict(raw_b, content_hash(raw_b)).bundle() is used and memo.builds == 3
    assert memo.verdict(raw_a, content_hash(raw_a)).bundle() is built


def test_a_session_leaves_every_verdict_on_disk_and_the_next_reads_them(pytester: pytest.Pytester):
    data = pytester.mkdir("data")
    for i, raw in enumerate(_distinct(3)):
        (data / f"case-{i}.json").write_bytes(raw)
    pytester.makeconftest("""
from pytest_groundeval.fhir import bundles

def pytest_sessionfinish(session):
    m = bundles.memo()
    print(f"MEMO builds={m.builds} disk_hits={m.disk_hits}")
""")
    pytester.makepyfile(test_x="""
import pytest

@pytest.mark.extraction
def test_extraction(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
""")
    args = ["-p", "no:randomly", "-s", f"--data-dir={data}", "--agent=baseline", "--run-record=r.json"]
    first = pytester.runpytest_subprocess(*args)
    first.assert_outcomes(passed=3)
    assert "MEMO builds=3 disk_hits=0" in first.stdout.str()
    assert len(_entries(pytester.path / ".groundeval" / "bundles")) == 3
    second = pytester.runpytest_subprocess(*args)
    second.assert_outcomes(passed=3)
    assert "MEMO builds=0 disk_hits=3" in second.stdout.str()


def test_verdicts_go_to_the_writer_in_batches_and_a_bundle_at_once(tmp_path, monkeypatch):
    """One hand-over (a thread wake-up) per BATCH verdicts, not per entry; an entry holding a
    Bundle is handed over at once (no Bundle waits for a batch); flush hands over the rest."""
    memo, gate = _held_memo(tmp_path, monkeypatch)
    writer = memo._writer
    handed = []
    hand = writer._hand
    monkeypatch.setattr(writer, "_hand", lambda batch: (handed.append(len(batch)), hand(batch)))
    monkeypatch.setattr(bundles._Writer, "BATCH", 4)
    raws = _distinct(10)
    verdicts = [memo.verdict(raw, content_hash(raw)) for raw in raws]
    assert handed == [4, 4]  # two full batches; two verdicts still pending
    verdicts[0].bundle()  # used: its Bundle is stored, handed over at once with the pending two
    assert handed == [4, 4, 3]
    gate.set()
    memo.flush()
    assert len(_entries(tmp_path / "store")) == 10
    again = bundles.BundleMemo(tmp_path / "store")
    assert all(again.verdict(raw, content_hash(raw)).valid for raw in raws) and again.builds == 0
    assert again.verdict(raws[0], content_hash(raws[0]))._blob is not None  # the Bundle itself was stored


def test_the_binding_walk_finds_what_healthchains_finds_set_assigned_or_defaulted():
    """The walk visits the fields a model was given (pydantic's fields set, which assignment
    joins) and those whose default is not None: a bad code in any of them is found, as
    HealthChain's own walk over every field finds it, nested in models and lists."""
    from healthchain.fhir.validation import _check_bindings
    from pydantic import BaseModel, Field

    bound = {"json_schema_extra": {"enum_values": ["a", "b"]}}

    class Leaf(BaseModel):
        status: str | None = Field(None, **bound)
        note: str | None = None

    class Middle(BaseModel):
        leaves: list[Leaf] | None = None
        leaf: Leaf | None = None
        kind: str = Field("a", **bound)  # a default other than None

    class Top(BaseModel):
        middle: Middle | None = None
        codes: list[str] | None = Field(None, **bound)

    class Defaulted(BaseModel):
        kind: str = Field("zz", **bound)  # not in its value set, never given

    assigned = Top(middle=Middle())
    assigned.middle.leaf = Leaf(status="bad")  # after validation: not in the input
    cases = [
        (Top(), False),
        (Top(codes=["a", "b"]), False),
        (Top(codes=["a", "x"]), True),
        (Top(middle=Middle(leaves=[Leaf(status="a"), Leaf(status="c")])), True),
        (Top(middle=Middle(leaves=[Leaf(status="a", note="c")])), False),
        (Top(middle=Middle(kind="q")), True),
        (assigned, True),
        (Top(middle=Middle.model_validate({"leaf": {}})), False),
        (Defaulted(), True),
    ]
    for model, bad in cases:
        assert bool(_check_bindings(model, "x")) is bad, model  # (the table itself is right)
        assert bundles._binding_issues(model) is bad, model


def test_a_writer_behind_holds_at_most_max_bundles_and_a_refused_one_is_stored_by_a_later_use(tmp_path, monkeypatch):
    """Where every case uses its Bundle the writer (pickling under the GIL) falls behind: at
    most MAX_BUNDLES wait in memory, the rest are not stored (verdict only), and a later use
    of a refused one stores it."""
    memo, gate = _held_memo(tmp_path, monkeypatch)
    writer = memo._writer
    monkeypatch.setattr(bundles._Writer, "MAX_BUNDLES", 2)
    raws = _distinct(4)
    for raw in raws:
        memo.verdict(raw, content_hash(raw)).bundle()  # the baseline: every case uses its Bundle
    assert writer._bundles == 2  # two wait; the other two were refused, not queued
    gate.set()
    memo.flush()
    assert writer._bundles == 0

    def stored_bundles():
        again = bundles.BundleMemo(tmp_path / "store")
        return [again.verdict(raw, content_hash(raw))._blob is not None for raw in raws]

    assert stored_bundles() == [True, True, False, False]  # every verdict on disk, two Bundles
    for raw in raws[2:]:
        memo.verdict(raw, content_hash(raw)).bundle()  # used again, the writer idle: stored now
    memo.flush()
    assert stored_bundles() == [True, True, True, True]
