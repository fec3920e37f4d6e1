"""What the FHIR server needs before it starts, each missing piece one clear reason (never a
traceback): Node.js on PATH, Node >= 20.19, npm, and an ``npm ci`` that works (offline it
fails). Fake ``node``/``npm`` scripts on a PATH of their own stand in for each situation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_groundeval.fhir.server.manager import FhirServer, ServerUnavailable, check_node, ensure_installed


def tool(folder: Path, name: str, script: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def bare_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setenv("GROUNDEVAL_FHIR_SERVER_CACHE", str(tmp_path / "cache"))
    return folder


def test_no_node_on_path_names_what_to_install(bare_path):
    with pytest.raises(ServerUnavailable) as e:
        check_node()
    assert e.value.permanent and "there is no `node` on PATH" in e.value.reason and "install Node.js >= 20.19" in e.value.reason


def test_an_old_node_names_its_version(bare_path):
    tool(bare_path, "node", "echo v18.19.0")
    with pytest.raises(ServerUnavailable) as e:
        check_node()
    assert "needs Node.js >= 20.19" in e.value.reason and "is v18.19.0" in e.value.reason


def test_node_without_npm(bare_path):
    tool(bare_path, "node", "echo v20.19.1")
    with pytest.raises(ServerUnavailable) as e:
        check_node()
    assert "there is no `npm` on PATH" in e.value.reason


def test_npm_failing_offline_is_one_reason_and_installs_nothing(bare_path, tmp_path):
    npm = tool(bare_path, "npm", "echo 'npm error code ENOTFOUND' >&2; echo 'npm error network request failed' >&2; exit 1")
    lines: list[str] = []
    with pytest.raises(ServerUnavailable) as e:
        ensure_installed(str(npm), lines.append, tmp_path / "cache")
    assert e.value.permanent and e.value.reason.startswith("npm ci of the FHIR server's dependencies failed")
    assert "ENOTFOUND" in e.value.reason and len(lines) == 1
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == []  # no half install


def test_an_unavailable_server_gives_every_case_the_same_reason_without_trying_again(bare_path):
    calls = bare_path / "calls"
    tool(bare_path, "node", f"echo x >> {calls}; echo v16.0.0")
    server = FhirServer()
    reasons = set()
    for _ in range(3):
        with pytest.raises(ServerUnavailable) as e:
            server.ensure()
        reasons.add(e.value.reason)
    assert len(reasons) == 1 and calls.read_text().count("x") == 1  # asked once, remembered
    assert not server.running()


def test_a_second_process_finds_the_install_done(bare_path, tmp_path):
    npm = tool(bare_path, "npm", "/bin/mkdir -p node_modules/@medplum/fhir-router && echo ok")
    lines: list[str] = []
    first = ensure_installed(str(npm), lines.append, tmp_path / "cache")
    tool(bare_path, "npm", "exit 7")  # a second install would fail: it must not happen
    second = ensure_installed(str(npm), lines.append, tmp_path / "cache")
    assert first == second and (first / "@medplum" / "fhir-router").is_dir() and len(lines) == 1
    assert os.path.basename(first) == "node_modules"
