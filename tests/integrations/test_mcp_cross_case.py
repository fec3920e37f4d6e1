"""Cross-case MCP attack (``--concurrency 4``: several cases' servers live at once, their folders
side by side in the temp dir, owned by the same user): the command of one case finds another
case's spec (socket and token) and calls that case's tools. The harness must refuse it: the
other patient's data stays out of reach, and nothing lands in the other case's log, which is
that case's transcript and its only grounding evidence. The case's own command (and any
process it starts: the MCP server its client launches) is served."""

from __future__ import annotations

import json
import os
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
                # on the victim case's own log (its record's refused_connections), not on the caller's
                [refused] = victim_log.refused
                assert refused["reason"].startswith("not the case's agent command") and refused["pid"]
                assert my_log.refused is None
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
    assert [c["tool"] for c in log.calls()] == ["list_medication_requests"] and log.refused is None
    assert json.loads(out.text[4:]) == log.calls()[0]["result"]


# a command whose tool calls all come from a server it detached from itself (a double fork
# to init, out of its process tree): each is refused; it answers anyway
# the command hands its tools' socket and token to a process outside its own tree (started by
# the test: every process the command itself starts, a setsid or double-forked one included, is
# kept under its keeper and dies with its case), which connects with them
DETACHED = r'''
import json, os, sys
spec = json.load(open(json.load(open(os.environ["GROUNDEVAL_MCP_CONFIG"]))["mcpServers"]["groundeval"]["args"][-1]))
with open(os.environ["OUTSIDE_IN"], "w") as fh:
    fh.write(json.dumps({"socket": spec["socket"], "token": spec["token"]}))
with open(os.environ["OUTSIDE_OUT"]) as fh:
    probe = fh.read()
print(json.dumps({"medications": [], "probe": probe}))
'''
OUTSIDER = r'''
import json, os, socket, sys
with open(sys.argv[1]) as fh:
    spec = json.loads(fh.read())
s = socket.socket(socket.AF_UNIX); s.connect(spec["socket"])
f = s.makefile("rb")
try:
    s.sendall((json.dumps({"op": "hello", "token": spec["token"], "pid": os.getpid()}) + "\n").encode())
    line = f.readline()
except OSError:
    line = b""
with open(sys.argv[2], "w") as fh:
    fh.write("SERVED" if line else "REFUSED")
'''


def test_a_refused_connection_is_on_the_case_said_in_grounded_and_the_summary(tmp_path):
    """A connection refused as not the case's agent's is recorded on the case (typed, through
    the store), in grounded's reason (no call ran: not grounded) and in the terminal summary."""
    from types import SimpleNamespace

    from pytest_groundeval.model import CaseResult
    from pytest_groundeval.reporting.terminal import refused_line
    from pytest_groundeval.run.calls import CallPolicy
    from pytest_groundeval.run.runner import run_case
    from pytest_groundeval.store.record import case_json

    task = ExtractionTask(FIXTURES / "synthea")
    ref = next(r for r in task.discover() if r.case_id == REFS)
    script = tmp_path / "detached.py"
    script.write_text(DETACHED)
    (tmp_path / "outsider.py").write_text(OUTSIDER)
    fifo_in, fifo_out = tmp_path / "in.fifo", tmp_path / "out.fifo"
    os.mkfifo(fifo_in)
    os.mkfifo(fifo_out)
    outsider = subprocess.Popen([sys.executable, str(tmp_path / "outsider.py"), str(fifo_in), str(fifo_out)])
    agent = CommandAgent(f"mcp:{sys.executable} {script}", timeout=60)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OUTSIDE_IN", str(fifo_in))
            mp.setenv("OUTSIDE_OUT", str(fifo_out))
            result = run_case(task, ref, agent, policy=CallPolicy(timeout=60, max_attempts=1, sleep=lambda s: None),
                              require_grounded=True)
    finally:
        outsider.kill()
        outsider.wait()
    assert '"probe": "REFUSED"' in result.raw_output, result.raw_output
    assert result.transcript == [] and result.tools_offered
    [refused] = result.refused_connections
    assert refused.pid and refused.pid != os.getpid() and "not the case's agent command" in refused.reason
    assert refused.command and "python" in refused.command
    assert result.score.metrics["grounded"] == 0.0
    reason = result.score.dimensions["grounded"].reason
    assert "1 connection(s) to its tools were refused" in reason and f"pid {refused.pid}" in reason, reason
    again = CaseResult.model_validate(case_json(result)[1])  # the store's form and back
    assert again.refused_connections == result.refused_connections
    line = refused_line(SimpleNamespace(cases=[again]))
    assert line and f"1 MCP connection(s) refused in 1 case(s) (extraction:{REFS}" in line and str(refused.pid) in line
    assert refused_line(SimpleNamespace(cases=[again.model_copy(update={"refused_connections": None})])) is None


# an mcp: command of a labs case on the FHIR server: its own base URL from the prompt (stdin),
# the other open cases' public keys and patients from VICTIMS, then the isolation test's agent
# (tests/fhir/test_fhir_case_isolation.py: /proc, the caches, its environment) as its child
ON_THE_SERVER = r'''
import json, os, re, subprocess, sys
prompt = sys.stdin.read()
job = json.loads(os.environ["VICTIMS"])
job["own"] = re.search(r"http://127\.0\.0\.1:\d+/case/[0-9a-f]+/fhir/R4", prompt).group(0)
out = subprocess.run([sys.executable, os.environ["ATTACK"]], input=json.dumps(job), capture_output=True, text=True)
sys.stdout.write(out.stdout or out.stderr)
'''


def test_a_command_reaches_no_other_open_case_on_the_fhir_server(tmp_path, monkeypatch):
    """The issue's route: an ``mcp:`` command read other open patients' Observations with the
    server's secrets from /proc. Its own case answers it; the others refuse every read and
    write, and their logs and state are untouched."""
    from test_fhir_case_isolation import ATTACK
    from test_fhir_server import NODE

    from pytest_groundeval.fhir.server.manager import SERVER_JS, FhirServer
    from pytest_groundeval.run import fhircase
    from pytest_groundeval.run.calls import CallPolicy
    from pytest_groundeval.run.runner import run_case
    from pytest_groundeval.tasks.labs import LabsTask
    from pytest_groundeval.tasks.resources import data_path

    if NODE is not None:
        pytest.skip(NODE)
    task = LabsTask(data_path("labs"))
    refs = sorted(task.discover(), key=lambda r: r.case_id)
    server = FhirServer()
    try:
        victims = []
        for ref in refs[:4]:
            case, opened, error = fhircase.open_case(server, task, task.load(ref))
            assert error is None, error
            victims.append((case, opened))
        mine = task.load(refs[4])
        (tmp_path / "attack.py").write_text(ATTACK)
        (tmp_path / "command.py").write_text(ON_THE_SERVER)
        monkeypatch.setenv("ATTACK", str(tmp_path / "attack.py"))
        monkeypatch.setenv("VICTIMS", json.dumps({
            "own_patient": f"Patient/{mine.inputs['patient_id']}", "dirs": [str(SERVER_JS.parent)],
            "victims": [{"key": f"labs:{c.ref.case_id}", "patient": f"Patient/{c.inputs['patient_id']}"}
                        for c, _ in victims]}))
        agent = CommandAgent(f"mcp:{sys.executable} {tmp_path / 'command.py'}", timeout=300)
        result = run_case(task, refs[4], agent, policy=CallPolicy(timeout=300, max_attempts=1, sleep=lambda s: None),
                          server=server)
        got = json.loads(result.raw_output)
        assert server.pid in got["read"]["environ"]  # it read the server's environment
        assert got["breaches"] == [] and set(got["got"]) <= {"401", "403", "404"}, got["breaches"][:5]
        assert got["own"] == 200 and result.fhir.requests[-1].status == 200  # its own case, on its log
        for _, opened in victims:
            activity = server.activity(opened.handle, close=True)
            assert activity["requests"] == [] and activity["state"] == opened.handle.before
    finally:
        server.stop()
