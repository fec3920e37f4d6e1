"""Bundles validated once per content hash (``fhir/bundles.py``).

1. The single pass (``Bundle.model_validate`` once + HealthChain's binding check) accepts
   exactly what HealthChain's ``load_bundle(..., version="R4B")`` accepts, builds the same
   Bundle, and rejects with HealthChain's own words: over every committed fixture and a
   corpus of bad bundles made from them.
2. Validation results are identical with and without the memo (no memo, process memo,
   on-disk memo in a fresh process memo), including a bundle edited in place (new hash:
   validated again).
3. The on-disk entry: keyed by content hash and versions, written atomically, and a corrupt
   one (truncated, garbled, another key, a checksum that does not match) is ignored and
   rebuilt, never trusted.
4. A case validates its bundle once: no ``load_bundle`` at all for a valid bundle, one
   ``Bundle.model_validate`` for load + baseline, none for a prompt-only agent when the
   verdict is on disk.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import orjson
import pytest
from conftest import REFS, SYNTHEA

from pytest_groundeval.fhir import bundles
from pytest_groundeval.model import CaseError
from pytest_groundeval.tasks.datasets import content_hash

FIXTURE_FILES = sorted(SYNTHEA.glob("*.json"))

# fhir.resources imports each resource model's module on first use; one first imported inside
# another test's in-process pytester run is dropped after it (FRICTION.md C), and a Bundle built
# from such a dropped class cannot be pickled. Build every fixture once here, at collection, in
# the outer process, so the models these tests build are imported for good.
for _path in FIXTURE_FILES:
    bundles.build(orjson.loads(_path.read_bytes()))


def _healthchain(data):
    """(accepted, Bundle dump or the rejection text) as HealthChain's load_bundle says it."""
    from healthchain.fhir import FHIRValidationError, load_bundle
    from pydantic import ValidationError

    try:
        return True, load_bundle(copy.deepcopy(data), version="R4B").model_dump()
    except (FHIRValidationError, ValidationError) as e:
        return False, bundles.describe(e)


def _single(data):
    try:
        return True, bundles.build(copy.deepcopy(data)).model_dump()
    except bundles.InvalidBundle as e:
        return False, e.issues


def _entry(data, kind):
    return next(e for e in data["entry"] if e["resource"]["resourceType"] == kind)


def _mutations():
    """(name, mutate) pairs; each breaks (or keeps) a bundle in one way."""
    def status(d):
        _entry(d, "MedicationRequest")["resource"]["status"] = "finished"

    def unknown_field(d):
        _entry(d, "Patient")["resource"]["favouriteColour"] = "blue"

    def missing_required(d):
        del _entry(d, "MedicationRequest")["resource"]["subject"]

    def wrong_type(d):
        _entry(d, "MedicationRequest")["resource"]["authoredOn"] = "yesterday"

    def stu3_field(d):  # MedicationRequest.context is STU3 (R4: encounter)
        r = _entry(d, "MedicationRequest")["resource"]
        r["context"] = r.pop("encounter", {"reference": "Encounter/x"})

    def bundle_type(d):
        d["type"] = "pile"

    def entry_not_object(d):
        d["entry"].append(5)

    def unknown_resource(d):
        d["entry"].append({"fullUrl": "urn:uuid:x", "resource": {"resourceType": "MedicationOrder", "id": "x"}})

    def request_method(d):
        d["entry"][0]["request"] = {"method": "FETCH", "url": "Patient"}

    def two_issues(d):
        status(d)
        bundle_type(d)

    def not_a_bundle(d):
        d["resourceType"] = "Patient"

    def still_valid(d):
        d["id"] = "renamed"

    return [status, unknown_field, missing_required, wrong_type, stu3_field, bundle_type, entry_not_object,
            unknown_resource, request_method, two_issues, not_a_bundle, still_valid]


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem[:24])
def test_the_single_pass_builds_what_load_bundle_builds(path):
    data = orjson.loads(path.read_bytes())
    assert _single(data) == _healthchain(data)


@pytest.mark.parametrize("mutate", _mutations(), ids=lambda f: f.__name__)
def test_the_single_pass_rejects_what_load_bundle_rejects_in_its_words(mutate):
    with_meds = [p for p in FIXTURE_FILES if b'"MedicationRequest"' in p.read_bytes()]
    for path in with_meds[:3]:
        data = orjson.loads(path.read_bytes())
        mutate(data)
        single, hc = _single(data), _healthchain(data)
        assert single == hc, (path.name, single[1] if not single[0] else "accepted", hc[1] if not hc[0] else "accepted")
        assert single[0] is (mutate.__name__ == "still_valid")


# ---------------------------------------------------------------- the memo
def _task(folder: Path):
    from pytest_groundeval.tasks.extraction import ExtractionTask

    return ExtractionTask(folder)


def _outcomes(folder: Path):
    """{case id: truth and the built Bundle's dump, or the case error} for every case of ``folder``."""
    task = _task(folder)
    out = {}
    for ref in task.discover():
        try:
            case = task.load(ref)
            out[ref.case_id] = ("ok", case.truth, case.inputs["bundle"].model_dump())
        except CaseError as e:
            out[ref.case_id] = ("error", str(e))
    return out


@pytest.fixture
def memo_at(tmp_path, monkeypatch):
    """Point the process memo at a fresh folder (a fresh memo each call: a new process)."""
    monkeypatch.delenv("GROUNDEVAL_BUNDLE_CACHE", raising=False)
    saved = bundles._MEMO

    def fresh(folder):
        bundles._MEMO = bundles.BundleMemo(folder)
        return bundles._MEMO

    yield fresh
    bundles._MEMO = saved


def _corpus(folder: Path) -> None:
    """Two good bundles, one bad (a code outside its value set), one the same bad bytes under
    another name (one verdict, two file names)."""
    folder.mkdir()
    good = [p for p in FIXTURE_FILES if b'"MedicationRequest"' in p.read_bytes()][:2]
    for p in good:
        (folder / p.name).write_bytes(p.read_bytes())
    bad = orjson.loads(good[0].read_bytes())
    _entry(bad, "MedicationRequest")["resource"]["status"] = "finished"
    (folder / "bad.json").write_bytes(orjson.dumps(bad))
    (folder / "bad-too.json").write_bytes(orjson.dumps(bad))


def test_results_are_identical_without_the_memo_with_it_and_from_disk(tmp_path, memo_at):
    data = tmp_path / "data"
    _corpus(data)
    memo_at(None)
    without = _outcomes(data)  # process memo only, fresh
    assert without["bad"] == ("error", "bad.json: " + _healthchain(orjson.loads((data / "bad.json").read_bytes()))[1])
    assert without["bad-too"][1].startswith("bad-too.json: not a valid FHIR R4B Bundle (1 issue): ")

    store = tmp_path / "store"
    first = memo_at(store)
    assert _outcomes(data) == without
    assert first.builds == 3 and first.disk_hits == 0  # bad.json and bad-too.json: one verdict
    assert _outcomes(data) == without and first.builds == 3  # the process memo
    second = memo_at(store)  # a new process: the verdicts come from disk
    assert _outcomes(data) == without
    assert second.builds == 0 and second.disk_hits == 3 and second.disk_rejected == 0


def test_a_bundle_edited_in_place_is_validated_again(tmp_path, memo_at):
    data = tmp_path / "data"
    data.mkdir()
    src = next(p for p in FIXTURE_FILES if b'"MedicationRequest"' in p.read_bytes())
    target = data / "b.json"
    target.write_bytes(src.read_bytes())
    memo = memo_at(tmp_path / "store")
    assert _outcomes(data)["b"][0] == "ok"
    bad = orjson.loads(src.read_bytes())
    _entry(bad, "MedicationRequest")["resource"]["status"] = "finished"
    target.write_bytes(orjson.dumps(bad))  # edited in place: same name, new bytes
    got = _outcomes(data)["b"]
    assert got[0] == "error" and "Value 'finished' is not in the required value set" in got[1]
    assert memo.builds == 2
    target.write_bytes(src.read_bytes())  # and back: the first verdict, remembered
    assert _outcomes(data)["b"][0] == "ok" and memo.builds == 2
    fresh = memo_at(tmp_path / "store")  # from disk too: both verdicts stored
    bad_again = _outcomes(data)
    assert bad_again["b"][0] == "ok" and fresh.builds == 0 and fresh.disk_hits == 1


def _stored(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*.bin"))


@pytest.mark.parametrize("damage", ["truncate", "garble_payload", "empty", "other_key", "other_format",
                                    "valid_claim_for_a_bad_bundle"])
def test_a_corrupt_entry_is_ignored_and_rebuilt_never_trusted(tmp_path, memo_at, damage):
    data = tmp_path / "data"
    _corpus(data)
    store = tmp_path / "store"
    memo_at(store)
    expected = _outcomes(data)
    entries = _stored(store)
    assert len(entries) == 3 and not list(store.rglob(".tmp-*"))  # no temp file left behind
    originals = {path: path.read_bytes() for path in entries}
    for path in entries:
        blob = originals[path]
        if damage == "truncate":
            blob = blob[: len(blob) // 2]
        elif damage == "garble_payload":  # the checksum no longer matches
            blob = blob[:-10] + bytes(b ^ 0x5A for b in blob[-10:])
        elif damage == "empty":
            blob = b""
        elif damage == "other_key":  # another bundle's entry under this name
            blob = originals[next(p for p in entries if p != path)]
        elif damage == "other_format":
            blob = json.dumps({"valid": True}).encode()
        elif damage == "valid_claim_for_a_bad_bundle":  # payload says valid, checksum left as it was
            nl1 = blob.index(b"\n", len(bundles.MAGIC))
            at = blob.index(b"\n", nl1 + 1) + 1  # the payload's kind byte: E (issues) or B (a Bundle)
            blob = blob[:at] + (b"B" if blob[at:at + 1] == b"E" else b"E") + blob[at + 1:]
        path.write_bytes(blob)
    memo = memo_at(store)
    assert _outcomes(data) == expected
    assert memo.disk_hits == 0 and memo.disk_rejected == 3 and memo.builds == 3
    fixed = memo_at(store)  # rewritten: the next process reads them
    assert _outcomes(data) == expected and fixed.disk_hits == 3 and fixed.builds == 0


def test_a_stored_bundle_that_does_not_unpickle_is_rebuilt(tmp_path, memo_at):
    """Even a well-formed entry (checksum right) whose Bundle does not load is not trusted."""
    import hashlib

    data = tmp_path / "data"
    data.mkdir()
    src = next(p for p in FIXTURE_FILES if b'"MedicationRequest"' in p.read_bytes())
    (data / "b.json").write_bytes(src.read_bytes())
    store = tmp_path / "store"
    memo_at(store)
    expected = _outcomes(data)
    [path] = _stored(store)
    key = path.stem
    payload = b"B" + b"not a pickle"
    path.write_bytes(bundles.MAGIC + key.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n"
                     + payload)
    memo = memo_at(store)
    assert _outcomes(data) == expected and memo.builds == 1 and memo.disk_rejected == 1
    assert memo_at(store) and _outcomes(data) == expected and bundles.memo().builds == 0


def test_the_key_holds_the_versions(tmp_path, memo_at, monkeypatch):
    data = tmp_path / "data"
    _corpus(data)
    store = tmp_path / "store"
    memo_at(store)
    expected = _outcomes(data)
    monkeypatch.setattr(bundles, "_VERSIONS", bundles.versions().replace("pydantic=", "pydantic=0.0.0+"))
    upgraded = memo_at(store)
    assert _outcomes(data) == expected and upgraded.builds == 3 and upgraded.disk_hits == 0
    assert len(_stored(store)) == 6


def test_the_memo_can_be_switched_off(tmp_path, memo_at, monkeypatch):
    memo_at(None)
    monkeypatch.setenv("GROUNDEVAL_BUNDLE_CACHE", "off")
    bundles.configure(tmp_path / "store")
    assert bundles.memo().folder is None
    monkeypatch.delenv("GROUNDEVAL_BUNDLE_CACHE")
    bundles.configure(tmp_path / "store")
    assert bundles.memo().folder == tmp_path / "store"


# ---------------------------------------------------------------- one build per case
def _counting(monkeypatch):
    import healthchain.fhir
    from fhir.resources.R4B.bundle import Bundle

    calls = {"model_validate": 0, "load_bundle": 0}
    real_validate = Bundle.model_validate.__func__
    real_load = healthchain.fhir.load_bundle

    def validate(cls, *a, **k):
        calls["model_validate"] += 1
        return real_validate(cls, *a, **k)

    def load(*a, **k):
        calls["load_bundle"] += 1
        return real_load(*a, **k)

    monkeypatch.setattr(Bundle, "model_validate", classmethod(validate))
    monkeypatch.setattr(healthchain.fhir, "load_bundle", load)
    return calls


def test_a_case_builds_its_bundle_once_and_a_stored_verdict_builds_none(tmp_path, memo_at, monkeypatch):
    from pytest_groundeval.tasks.extraction import parse_answer

    data = tmp_path / "data"
    data.mkdir()
    (data / "b.json").write_bytes((SYNTHEA / f"{REFS}.json").read_bytes())
    store = tmp_path / "store"
    memo_at(store)
    calls = _counting(monkeypatch)
    task = _task(data)
    [ref] = task.discover()
    case = task.load(ref)
    answer = parse_answer(task.baseline(case.inputs).text)
    assert task.score(answer, case).passed
    assert calls == {"model_validate": 1, "load_bundle": 0}  # validated once, read by the baseline as built
    memo_at(store)  # a new process, the verdict on disk
    case = task.load(ref)
    task.agent_prompt(case.prompt, case.inputs)  # what a prompt-only or tool agent reads first
    assert calls == {"model_validate": 1, "load_bundle": 0} and "bundle" in case.inputs
    assert parse_answer(task.baseline(case.inputs).text) == answer  # the stored Bundle, unpickled
    assert calls == {"model_validate": 1, "load_bundle": 0}


def test_a_bad_bundle_is_a_case_error_naming_the_file_with_and_without_the_store(tmp_path, memo_at):
    data = tmp_path / "data"
    data.mkdir()
    bad = orjson.loads((SYNTHEA / f"{REFS}.json").read_bytes())
    _entry(bad, "MedicationRequest")["resource"]["status"] = "finished"
    raw = orjson.dumps(bad)
    (data / "b.json").write_bytes(raw)
    messages = []
    for folder in (None, tmp_path / "store", tmp_path / "store"):
        memo_at(folder)
        task = _task(data)
        [ref] = task.discover()
        with pytest.raises(CaseError) as e:
            task.load(ref)
        messages.append(str(e.value))
    assert len(set(messages)) == 1
    assert messages[0].startswith("b.json: not a valid FHIR R4B Bundle (1 issue): Bundle.entry[")
    assert bundles.memo().disk_hits == 1
    v = bundles.verdict(raw, content_hash(raw))
    with pytest.raises(bundles.InvalidBundle):
        v.bundle()


def test_a_prompt_only_run_stores_verdicts_and_a_used_bundle_is_stored_with_it(tmp_path, memo_at, monkeypatch):
    """A case no one asks the Bundle of stores only its verdict (no pickling on the item path);
    the first case that uses the Bundle stores it, so the next process unpickles it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "b.json").write_bytes((SYNTHEA / f"{REFS}.json").read_bytes())
    store = tmp_path / "store"
    memo_at(store)
    task = _task(data)
    [ref] = task.discover()
    task.load(ref)  # a prompt-only agent reads the prompt, never inputs["bundle"]
    [entry] = _stored(store)
    assert entry.read_bytes().endswith(b"\nV")  # the verdict only
    memo = memo_at(store)
    calls = _counting(monkeypatch)
    case = task.load(ref)
    assert memo.disk_hits == 1 and calls["model_validate"] == 0  # valid, from disk, nothing built
    expected = case.inputs["bundle"].model_dump()  # now built (once) and stored with the verdict
    assert calls["model_validate"] == 1 and memo.builds == 1 and b"\nB" in entry.read_bytes()
    memo_at(store)
    assert task.load(ref).inputs["bundle"].model_dump() == expected and calls["model_validate"] == 1
