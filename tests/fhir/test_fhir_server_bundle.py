"""The FHIR server ships as one bundle (``server.bundle.js``) built from the committed lockfile:
its header records the sha256 of the lockfile and of every source it was built from, so a
lockfile or server change without a rebuild (``scripts/build_fhir_server.py``) fails here; the
esbuild it names is the lockfile's; and the bundle runs alone, from a folder holding nothing
else, with the wheel's Node (no node_modules, no npm)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_groundeval.fhir.client import FhirClient
from pytest_groundeval.fhir.server import bundle, manager


def test_the_shipped_bundle_matches_its_lockfile_and_sources():
    header = bundle.read_header()
    assert header is not None, "server.bundle.js has no build header: run scripts/build_fhir_server.py"
    assert bundle.stale() == [], "rebuild with `uv run python scripts/build_fhir_server.py` and commit the bundle"
    assert set(header["sources"]) == set(bundle.SOURCES)


def test_the_bundler_recorded_is_the_lockfiles(tmp_path):
    lock = json.loads((bundle.HERE / bundle.LOCKFILE).read_text())
    assert bundle.read_header()["esbuild"] == lock["packages"]["node_modules/esbuild"]["version"]
    assert "esbuild" in lock["packages"][""]["devDependencies"]


@pytest.mark.parametrize("source", bundle.SOURCES)
def test_a_source_changed_without_a_rebuild_is_stale(tmp_path, source):
    for name in bundle.SOURCES:
        shutil.copy2(bundle.HERE / name, tmp_path / name)
    with (tmp_path / source).open("a") as f:
        f.write("\n")
    assert bundle.stale(folder=tmp_path) == [f"{source} changed since the bundle was built"]


def test_a_bundle_without_its_header_is_stale(tmp_path):
    plain = tmp_path / "server.bundle.js"
    plain.write_text("'use strict';\n")
    assert bundle.stale(plain) == ["server.bundle.js is missing or has no build header"]


def test_the_bundle_runs_alone_with_the_wheels_node(tmp_path, monkeypatch):
    """A copy of the bundle in an empty folder: nothing beside it to require, nothing installed."""
    alone = tmp_path / "alone" / "server.bundle.js"
    alone.parent.mkdir()
    shutil.copy2(bundle.BUNDLE, alone)
    monkeypatch.setattr(manager, "SERVER_JS", alone)
    monkeypatch.delenv("GROUNDEVAL_NODE", raising=False)
    assert not list(bundle.HERE.glob("node_modules")) and not (Path.cwd() / "node_modules").exists()
    server = manager.FhirServer()
    try:
        case = server.open_case({"resourceType": "Bundle", "type": "collection", "entry": [
            {"resource": {"resourceType": "Patient", "id": "p1"}},
            {"resource": {"resourceType": "Observation", "id": "o1", "status": "final",
                          "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
                          "subject": {"reference": "Patient/p1"}}}]}, key="alone")
        found = FhirClient(case.base_url).search("Observation", {"code": "http://loinc.org|4548-4", "patient": "p1"})
        assert [e["resource"]["id"] for e in found.get("entry", [])] == ["o1"]  # definitions and search params inlined
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[:2] == [manager.check_node().encode(), str(alone).encode()]  # the wheel's node, the copy
    finally:
        server.stop()
    assert sorted(p.name for p in alone.parent.iterdir()) == ["server.bundle.js"]  # it wrote nothing beside it
