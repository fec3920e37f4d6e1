"""The bundled suites' verdicts shipped with the package (``fhir/shipped.py``,
``scripts/make_shipped_verdicts.py``): complete, equal to a fresh validation, used only under
the versions they were computed with, never trusted when the file is not what it says."""

from __future__ import annotations

import json
import sys

import orjson
import pytest
from conftest import REFS, ROOT, SYNTHEA
from test_bundle_cache import _counting, _entry, _task

from pytest_groundeval.fhir import bundles, shipped
from pytest_groundeval.model import CaseError
from pytest_groundeval.tasks.datasets import bundle_files, content_hash, read_bytes

sys.path.insert(0, str(ROOT / "scripts"))
import make_shipped_verdicts  # noqa: E402

FILES = bundle_files(SYNTHEA)


def _doc() -> dict:
    return json.loads(shipped.PATH.read_text(encoding="utf-8"))


def test_every_bundled_fixture_has_a_verdict_under_its_content_hash():
    doc = _doc()
    names = {f"synthea/{p.name}": content_hash(read_bytes(p)) for p in FILES}
    assert doc["files"] == names  # every file, its hash, nothing else
    assert set(doc["verdicts"]) == set(names.values())
    assert shipped.load(shipped.PATH, bundles.verdict_versions()) == doc["verdicts"]  # in force here


def test_the_shipped_verdicts_equal_a_fresh_validation_of_the_committed_fixtures():
    fresh = make_shipped_verdicts.document(make_shipped_verdicts.files())
    assert fresh["versions"] == bundles.verdict_versions()
    assert shipped.dumps(fresh) == shipped.PATH.read_text(encoding="utf-8"), \
        "stale: run `uv run python scripts/make_shipped_verdicts.py`"
    assert make_shipped_verdicts.main(["--check"]) == 0


def _data(tmp_path, names):
    data = tmp_path / "data"
    data.mkdir()
    for path in names:
        (data / path.name).write_bytes(path.read_bytes())
    return data


def _loads(data):
    task = _task(data)
    out = {}
    for ref in task.discover():
        try:
            out[ref.case_id] = ("ok", task.load(ref).truth)
        except CaseError as e:
            out[ref.case_id] = ("error", str(e))
    return out


def test_matching_versions_validate_nothing_and_give_what_validation_gives(tmp_path, monkeypatch):
    data = _data(tmp_path, FILES[:6])
    monkeypatch.setattr(bundles, "_MEMO", bundles.BundleMemo())  # no shipped file: validated
    expected = _loads(data)
    memo = bundles.BundleMemo(tmp_path / "store", shipped=shipped.PATH)
    monkeypatch.setattr(bundles, "_MEMO", memo)
    calls = _counting(monkeypatch)
    assert _loads(data) == expected
    assert calls == {"model_validate": 0, "load_bundle": 0}
    assert memo.builds == 0 and memo.shipped_hits == 6 and not list((tmp_path / "store").rglob("*.bin"))


def _rewritten(tmp_path, edit) -> object:
    doc = _doc()
    edit(doc)
    path = tmp_path / "shipped.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("how", ["recorded_version_differs", "running_version_differs", "checksum_wrong",
                                 "other_format", "missing", "garbled"])
def test_a_verdict_whose_key_does_not_match_is_not_trusted_and_validation_runs(tmp_path, monkeypatch, how):
    data = _data(tmp_path, FILES[:3])

    def other_version(doc):  # pydantic 0.0.0 recorded, the checksum recomputed: only the key differs
        doc["versions"] = doc["versions"].replace("pydantic=", "pydantic=0.0.0+")
        doc["digest"] = shipped._digest(doc["versions"], doc["verdicts"])

    path = {
        "recorded_version_differs": lambda: _rewritten(tmp_path, other_version),
        "running_version_differs": lambda: shipped.PATH,
        "checksum_wrong": lambda: _rewritten(tmp_path, lambda d: d.update(digest="sha256:" + "0" * 64)),
        "other_format": lambda: _rewritten(tmp_path, lambda d: d.update(format=2)),
        "missing": lambda: tmp_path / "nowhere.json",
        "garbled": lambda: (tmp_path / "g.json").write_bytes(shipped.PATH.read_bytes()[:500]) and tmp_path / "g.json",
    }[how]()
    if how == "running_version_differs":  # an install with another fhir.resources than the file was made with
        monkeypatch.setattr(bundles, "_VERDICT_VERSIONS", bundles.verdict_versions().replace(
            "fhir.resources=", "fhir.resources=9.9.9+"))
        monkeypatch.setattr(bundles, "_VERSIONS", None)
    memo = bundles.BundleMemo(tmp_path / "store", shipped=path)
    monkeypatch.setattr(bundles, "_MEMO", memo)
    calls = _counting(monkeypatch)
    assert all(v[0] == "ok" for v in _loads(data).values())
    assert memo.shipped_hits == 0 and memo.builds == 3 and calls["model_validate"] == 3


def test_a_shipped_rejection_is_the_same_case_error_as_validating(tmp_path, monkeypatch):
    bad = orjson.loads((SYNTHEA / f"{REFS}.json").read_bytes())
    _entry(bad, "MedicationRequest")["resource"]["status"] = "finished"
    data = tmp_path / "data"
    data.mkdir()
    (data / "b.json").write_bytes(orjson.dumps(bad))
    monkeypatch.setattr(bundles, "_MEMO", bundles.BundleMemo())
    validated = _loads(data)
    path = tmp_path / "shipped.json"
    path.write_text(shipped.dumps(make_shipped_verdicts.document([("b.json", (data / "b.json").read_bytes())])), encoding="utf-8")
    memo = bundles.BundleMemo(shipped=path)
    monkeypatch.setattr(bundles, "_MEMO", memo)
    assert _loads(data) == validated and validated["b"][0] == "error"  # default deny: still a case error
    assert memo.shipped_hits == 1 and memo.builds == 0


def test_a_bundled_suite_run_on_a_fresh_machine_validates_nothing(evalproject, monkeypatch):
    log = evalproject.path / "validations.log"
    monkeypatch.setenv(bundles.VALIDATION_LOG, str(log))
    result = evalproject.runpytest_subprocess("-p", "no:cacheprovider", "--agent=agents_under_test:Correct",
                                              "--data-dir", "data", "--run-record", "record.json")
    result.assert_outcomes(passed=4)
    assert not log.exists()  # no bundle validated: every verdict was shipped
    assert not list((evalproject.path / ".groundeval").rglob("*.bin"))
    monkeypatch.setenv(bundles.SHIPPED_ENV, "off")  # the same run without them validates each bundle once
    result = evalproject.runpytest_subprocess("-p", "no:cacheprovider", "--agent=agents_under_test:Correct",
                                              "--data-dir", "data", "--run-record", "record2.json")
    result.assert_outcomes(passed=4)
    assert len(log.read_text().splitlines()) == 4
