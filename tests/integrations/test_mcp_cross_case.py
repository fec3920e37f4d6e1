"""Cross-case MCP attack (``--concurrency 4``: several cases' servers live at once, their folders
side by side in the temp dir, owned by the same user): the command of one case finds another
case's spec (socket and token) and calls that case's tools. The harness must refuse it: the
other patient's data stays out of reach, and nothing lands in the other case's log, which is
that case's transcript and its only grounding evidence. The case's own command (and any
process it starts: the MCP server its client launches) is served."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FIXTURES, REFS

pytest.importorskip("mcp")

from pytest_groundeval.agents.command import CommandAgent  # noqa: E402
from pytest_groundeval.integrations.mcp.host import CaseHost  # noqa: E402
from pytest_groundeval.run.toolcalls import observe  # noqa: E402
from pytest_groundeval.tasks.extraction import ExtractionTask  # noqa: E402

# a command that reaches the case whose spec file is named by SPEC (raw, as server.py does),
# and prints what it got; through a child process when CHILD is set (as an MCP client starts
# its server)
REACH = r'''
import json, os, socket, subprocess, sys
if os.environ.get("CHILD") and not os.environ.get("IN_CHILD"):
    out = subprocess.run([sys.executable, __file__], env={**os.environ, "IN_CHILD": "1"}, capture_output=True, text=True)
    sys.stdout.write(out.stdout); sys.exit(out.returncode)
spec = json.load(open(os.environ.get("SPEC") or json.load(open(os.environ["GROUNDEVAL_MCP_CONFIG"]))
                      ["mcpServers"]["groundeval"]["args"][-1]))
s = socket.socket(socket.AF_UNIX); s.connect(spec["socket"])
f = s.makefile("rb")
try:
    s.sendall((json.dumps({"op": "hello", "token": spec["token"], "pid": os.getpid()}) + "\n").encode())
    hello = f.readline()
except (BrokenPipeError, ConnectionResetError):  # closed unanswered (before or after the hello)
    hello = b""
if not hello:
    print("REFUSED"); sys.exit(0)
s.sendall((json.dumps({"op": "call", "id": 1, "name": "list_medication_requests", "arguments": {}}) + "\n").encode())
print("GOT " + json.loads(f.readline())["text"])
'''


@pytest.fixture(scope="module")
def two_cases():
    task = ExtractionTask(FIXTURES / "synthea")
    refs = task.discover()
    mine = task.load(next(r for r in refs if r.case_id == REFS))
    other = task.load(next(r for r in refs if r.case_id != REFS))
    return task, mine, other


def _agent(tmp_path, monkeypatch, spec=None, child=False) -> CommandAgent:
    script = tmp_path / "reach.py"
    script.write_text(REACH)
    if spec is not None:
        monkeypatch.setenv("SPEC", str(spec))
    if child:
        monkeypatch.setenv("CHILD", "1")
    return CommandAgent(f"mcp:{sys.executable} {script}", timeout=60)


def test_a_command_cannot_reach_another_cases_server_nor_write_into_its_log(two_cases, tmp_path, monkeypatch):
    task, mine, other = two_cases
    victim_agent = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with observe() as victim_log:
            victim = CaseHost(task, other.inputs, owned=True)
            victim.own(victim_agent.pid)  # the other case's command is running
            try:
                with observe() as my_log:
                    out = _agent(tmp_path, monkeypatch, spec=victim.spec_path).run_case(task, mine.prompt, mine.inputs)
                assert out.text.strip() == "REFUSED", out.text[:500]
                assert victim_log.calls() == [] and my_log.calls() == []
                assert len(victim.refused) == 1
            finally:
                victim.close()
    finally:
        victim_agent.kill()
        victim_agent.wait()


@pytest.mark.parametrize("child", [False, True], ids=["itself", "its-child"])
def test_the_cases_own_command_and_its_children_are_served(two_cases, tmp_path, monkeypatch, child):
    task, mine, _ = two_cases
    with observe() as log:
        out = _agent(tmp_path, monkeypatch, child=child).run_case(task, mine.prompt, mine.inputs)
    assert out.text.startswith("GOT "), out.text[:500]
    assert [c["tool"] for c in log.calls()] == ["list_medication_requests"]
    assert json.loads(out.text[4:]) == log.calls()[0]["result"]
