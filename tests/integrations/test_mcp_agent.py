"""``--agent "mcp:COMMAND ARGS"`` and the per-case MCP server (issue 19), through ``pytest
evals`` over the committed suites in subprocesses: a real ``mcp`` SDK stdio client
(``mcp_client.py``, ``mcp_extraction_client.py``) starting the real server the harness wrote
the config of, on extraction, write and reconciliation.

``grounded`` is scored from the harness's own log of the calls (the server only forwards them
to the harness, which runs and records each), never from anything the command says.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, REFS, ROOT, STOPPED_ACTIVE
from test_fhir_hook import toyproject  # noqa: F401  (the toy fhir_server task, issue 18)

pytest.importorskip("mcp")

from pytest_groundeval.fhir import hc_tools  # noqa: E402
from pytest_groundeval.store.record import validate_record  # noqa: E402
from pytest_groundeval.tasks.extraction import ExtractionTask  # noqa: E402
from pytest_groundeval.tasks.reconciliation import ReconciliationTask  # noqa: E402
from pytest_groundeval.tasks.write import WriteTask  # noqa: E402

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "mcp_client.py"
EXTRACTION_CLIENT = HERE / "mcp_extraction_client.py"
WRITE_IDS = ["ibuprofen-two-tablets", "zyrtec-two-5mg-tablets"]
EXTRACTION_IDS = [REFS, STOPPED_ACTIVE]
TOOLS = {"extraction": ["list_medication_requests", "read_resource"],
         "write": ["lookup_medication_code", "build_medication_statement", "validate_medication_statement"],
         "reconciliation": ["lookup_medication_code", "list_medication_requests"]}


def _recon_ids(task: ReconciliationTask) -> list[str]:
    """Two cases, one with a medication the record lacks (the client looks that one up)."""
    refs = task.discover()
    unrecorded = next(r for r in refs if any(t["verdict"] == "unrecorded" for t in task.load(r).truth))
    return [refs[0].case_id, unrecorded.case_id]


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> tuple[Path, list[str]]:
    """The test double's knowledge: each selected case's facts, keyed by a text of its prompt."""
    from write_args import build_args

    entries, selection = [], []
    extraction = ExtractionTask(FIXTURES / "synthea")
    for ref in extraction.discover():
        if ref.case_id in EXTRACTION_IDS:
            case = extraction.load(ref)
            entries.append({"task": "extraction", "key": extraction.agent_prompt(case.prompt, case.inputs)
                            .split("\n", 1)[0], "facts": case.truth})
    write = WriteTask(FIXTURES / "write_cases")
    for ref in write.discover():
        if ref.case_id in WRITE_IDS:
            case = write.load(ref)
            resource = hc_tools.build_medication_statement(**build_args(case.truth))["resource"]
            entries.append({"task": "write", "key": case.inputs["note"], "facts": case.truth, "answer": resource})
    recon = ReconciliationTask(FIXTURES / "reconciliation")
    ids = _recon_ids(recon)
    for ref in recon.discover():
        if ref.case_id in ids:
            case = recon.load(ref)
            entries.append({"task": "reconciliation", "key": case.inputs["patient_report"], "facts": case.truth})
    selection = EXTRACTION_IDS + WRITE_IDS + ids
    assert len(entries) == len(selection)
    path = tmp_path_factory.mktemp("plans") / "plans.json"
    path.write_text(json.dumps(entries))
    return path, selection


def _evals(pytester, monkeypatch, plans, mode, *args, selection=None, record="record.json", client=CLIENT):
    path, chosen = plans
    monkeypatch.setenv("MCP_PLANS", str(path))
    monkeypatch.setenv("MCP_MODE", mode)
    out = pytester.path / record
    result = pytester.runpytest_subprocess(
        # the three tool-using tasks (the letter task reuses reconciliation's case ids)
        str(ROOT / "evals"), f"--agent=mcp:{sys.executable} {client}", "-k", " or ".join(selection or chosen),
        "-m", "extraction or write or reconciliation",
        "--write-cases", str(FIXTURES / "write_cases"), "--data-dir", str(FIXTURES / "synthea"),
        "--reconciliation-cases", str(FIXTURES / "reconciliation"), "--run-record", str(out),
        "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(pytester.path), *args)
    rec = json.loads(out.read_text()) if out.exists() else None
    if rec is not None:
        assert validate_record(rec) == []
    return result, rec


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed process its parent has not reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_an_honest_mcp_client_passes_every_task_grounded_from_the_servers_log(pytester, monkeypatch, plans):
    calls = pytester.path / "calls.txt"
    monkeypatch.setenv("MCP_CALLS", str(calls))
    result, rec = _evals(pytester, monkeypatch, plans, "honest", "--require-grounded", "--concurrency", "8")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    assert sorted(c["case_id"] for c in rec["cases"]) == sorted(plans[1])
    assert rec["agent"] == f"mcp:{sys.executable} {CLIENT}"
    for c in rec["cases"]:
        assert c["outcome"] == "passed" and c["score"]["metrics"]["grounded"] == 1.0, (c["case_id"], c["score"])
        assert c["tools_offered"] == TOOLS[c["task"]]  # exactly the task's tools, nothing else
        assert c["transcript"] and all(t["status"] == "ok" for t in c["transcript"])
        assert [t["seq"] for t in c["transcript"]] == list(range(1, len(c["transcript"]) + 1))
        assert c["agent_reported"] is None  # the command's account is never asked for
        assert c["usage"]["input_tokens"] > 0 and c["model"] == "scripted-mcp" and c["cost_usd"] is None
    write = [c for c in rec["cases"] if c["task"] == "write"]
    assert all([t["tool"] for t in c["transcript"]] == TOOLS["write"] for c in write)
    assert any(t["tool"] == "lookup_medication_code" for c in rec["cases"] if c["task"] == "reconciliation"
               for t in c["transcript"])  # the record lacked one: it looked that one up
    for task in TOOLS:
        assert rec["summary"][task]["grounded"] == 1.0 and rec["summary"][task]["grounded_n"] == 2
    assert len(calls.read_text().split()) == 6

    # --resume: every case stands, the command is not started again
    again, rec2 = _evals(pytester, monkeypatch, plans, "honest", "--require-grounded", "--resume",
                         str(pytester.path / "record.json"), record="resumed.json")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()[-3000:]
    assert len(calls.read_text().split()) == 6
    assert all(c["resumed_from"] == rec["run_id"] for c in rec2["cases"])
    assert {c["case_id"]: c["transcript"] for c in rec2["cases"]} == {c["case_id"]: c["transcript"] for c in rec["cases"]}


def test_under_xdist_each_case_gets_its_own_server_and_the_record_is_the_serial_ones(pytester, monkeypatch, plans):
    serial, rec1 = _evals(pytester, monkeypatch, plans, "honest", "--require-grounded", "--concurrency", "1",
                          record="serial.json")
    spread, rec2 = _evals(pytester, monkeypatch, plans, "honest", "--require-grounded", "-n", "2",
                          record="xdist.json")
    assert serial.ret == spread.ret == pytest.ExitCode.OK, spread.stdout.str()[-3000:]

    def cases(rec):
        return {c["case_id"]: (c["outcome"], c["predicted"], c["transcript"], c["tools_offered"]) for c in rec["cases"]}

    assert cases(rec1) == cases(rec2)
    assert rec1["summary"] == rec2["summary"]


def test_an_mcp_client_that_calls_no_tool_is_right_but_not_grounded(pytester, monkeypatch, plans):
    result, rec = _evals(pytester, monkeypatch, plans, "nocall", "--require-grounded")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for c in rec["cases"]:
        assert c["outcome"] == "failed" and c["transcript"] == [] and c["tools_offered"] == TOOLS[c["task"]]
        assert c["score"]["metrics"]["grounded"] == 0.0
        assert c["score"]["reason"].startswith("ungrounded (--require-grounded)") and "called none" in c["score"]["reason"]
        right = c["score"]["metrics"]["pass" if c["task"] == "write" else "exact_match"]
        assert right == 1.0  # the answer itself was right: only grounded fails it


def test_a_client_can_reach_nothing_beyond_its_case(pytester, monkeypatch, plans, tmp_path):
    snooped = tmp_path / "snoop"
    snooped.mkdir()
    other = "Alena861_Alina705_Bayer639_a41e603d-0d7c-c89f-3be7-74117adc6390"  # a patient of no selected case
    monkeypatch.setenv("MCP_SNOOP_DIR", str(snooped))
    monkeypatch.setenv("MCP_OTHER_PATIENT", other.rsplit("_", 1)[1])
    monkeypatch.setenv("MCP_OTHER_BUNDLE", str(FIXTURES / "synthea" / f"{other}.json"))
    chosen = [REFS, WRITE_IDS[0], plans[1][-1]]
    result, rec = _evals(pytester, monkeypatch, plans, "snoop", selection=chosen)
    reports = [json.loads(p.read_text()) for p in snooped.glob("*.json")]
    assert len(reports) == 3, result.stdout.str()[-3000:]
    secrets = ["Alena861", "Bayer639", "ground_truth", '"expected"', '"verdict"']  # the other patient, truth
    for r in reports:
        task = next(t for t, names in TOOLS.items() if sorted(r["tools"]) == sorted(names))
        assert r["tools"] == TOOLS[task]  # the tool list holds the task's tools and nothing else
        for attempt, got in r["tries"].items():
            name, args = json.loads(attempt)
            assert not any(s in got["text"] for s in secrets), (attempt, got)
            if name not in r["tools"]:
                assert got["error"] and "unknown tool" in got["text"], (attempt, got)
            elif name == "read_resource":  # another patient, a path: not in this case's record
                assert got["error"], (attempt, got)
        assert set(r["spec"]) == {"task", "socket", "token"}  # no path to any data, no case content
        assert r["wrong_token_reply"] == ""  # the harness closed the connection unanswered
        assert not any(s in r["prompt"] for s in secrets[:2])  # (the answer format names a "verdict")
    for c in rec["cases"]:  # the calls that ran are in the harness's log; unknown tools never ran
        assert c["transcript"] and {t["tool"] for t in c["transcript"]} <= set(TOOLS[c["task"]])
        assert all(t["status"] == "error" for t in c["transcript"] if t["tool"] == "read_resource")


@pytest.mark.parametrize("concurrency", ["1", "8"])  # 1: the call runs on the main thread, under SIGALRM
def test_a_hanging_agent_is_killed_at_the_deadline_with_its_children_and_server(pytester, monkeypatch, plans, tmp_path,
                                                                               concurrency):
    monkeypatch.setenv("MCP_PIDS_DIR", str(tmp_path))
    result, rec = _evals(pytester, monkeypatch, plans, "hang", "--agent-timeout", "15", "--agent-retries", "0",
                         "--concurrency", concurrency, selection=[REFS])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [case] = rec["cases"]
    assert case["outcome"] == "error" and case["error"]["kind"] == "timeout", case["error"]
    pids = json.loads((tmp_path / "pids.json").read_text())
    assert not any(_alive(pid) for pid in pids.values()), {k: _alive(v) for k, v in pids.items()}


def test_a_crashing_agent_is_an_agent_error_with_its_stderr(pytester, monkeypatch, plans):
    result, rec = _evals(pytester, monkeypatch, plans, "crash", selection=[REFS, WRITE_IDS[0]])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for c in rec["cases"]:
        assert c["outcome"] == "error" and c["error"]["kind"] == "agent"
        assert "exited 3" in c["error"]["message"] and "boom: the agent fell over" in c["error"]["message"]
        assert c["attempts"] == 1  # a permanent failure: not retried


def test_a_command_that_does_not_exist_is_one_usage_error_at_start(pytester):
    result = pytester.runpytest_subprocess(str(ROOT / "evals"), "--agent=mcp:no-such-agent-command --flag",
                                           "-p", "no:randomly", "--rootdir", str(pytester.path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agent=mcp:no-such-agent-command --flag cannot be built*"
                                 "'no-such-agent-command' not found*"])
    assert "passed" not in result.stdout.str()


def test_the_30_line_client_passes_the_extraction_suite(pytester, monkeypatch):
    """The issue's 'done when': a 30-line MCP client passes the whole extraction suite, grounded."""
    assert len(EXTRACTION_CLIENT.read_text().splitlines()) <= 30
    readme = (ROOT / "docs" / "your-agent" / "mcp.md").read_text(encoding="utf-8")
    block = readme.split("<!-- mcp-example-client", 1)[1].split("```python\n", 1)[1]
    assert block.split("```", 1)[0] == EXTRACTION_CLIENT.read_text()  # the docs' example is this client
    client = pytester.path / "my_client.py"
    shutil.copy(EXTRACTION_CLIENT, client)
    out = pytester.path / "record.json"
    result = pytester.runpytest_subprocess(
        str(ROOT / "evals"), "-m", "extraction", f"--agent=mcp:{sys.executable} my_client.py", "--require-grounded",
        "--data-dir", str(FIXTURES / "synthea"), "--run-record", str(out), "-p", "no:randomly",
        "--rootdir", str(pytester.path))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    rec = json.loads(out.read_text())
    assert rec["summary"]["extraction"]["n_passed"] == rec["summary"]["extraction"]["n_cases"] == 45
    assert rec["summary"]["extraction"]["grounded"] == 1.0
    assert all(c["transcript"][0]["tool"] == "list_medication_requests" for c in rec["cases"])


def test_under_langsmith_each_mcp_call_is_a_tool_run_nested_under_its_case(pytester, monkeypatch):
    from test_langsmith_experiments import FakeLangSmith, _children, _env, _roots

    server = FakeLangSmith()
    try:
        _env(monkeypatch, server.url)
        data = pytester.mkdir("data")
        for stem in EXTRACTION_IDS:
            shutil.copy(FIXTURES / "synthea" / f"{stem}.json", data / f"{stem}.json")
        result = pytester.runpytest_subprocess(
            str(ROOT / "evals"), "-m", "extraction", f"--agent=mcp:{sys.executable} {EXTRACTION_CLIENT}",
            "--data-dir", str(data), "--run-record", str(pytester.path / "record.json"), "-p", "no:cacheprovider",
            "-p", "no:randomly", "--rootdir", str(pytester.path))
        result.assert_outcomes(passed=2)
        runs, _ = server.decoded()
        roots = _roots(runs)
        assert len(roots) == 2
        for root in roots.values():
            tools = [k for k in _children(runs, root) if k["run_type"] == "tool"]
            assert [k["name"] for k in tools] == ["list_medication_requests"], [k["name"] for k in tools]
            assert all(k["dotted_order"].startswith(root["dotted_order"] + ".") for k in tools)
    finally:
        server.close()


FHIR_CLIENT = '''
import asyncio, json, os, re, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from ordertoy import order


async def main():
    prompt = sys.stdin.read()
    pid = re.search(r"Patient/([0-9a-f-]+)", prompt).group(1)
    server = json.load(open(os.environ["GROUNDEVAL_MCP_CONFIG"]))["mcpServers"]["groundeval"]
    params = StdioServerParameters(command=server["command"], args=server["args"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("fhir_search", {"resource_type": "ServiceRequest", "params": {"patient": pid}})
        made = await session.call_tool("fhir_create", {"resource": order(pid)})
    print("ordered " + json.loads(made.content[0].text)["id"])


asyncio.run(main())
'''


def test_a_fhir_server_tasks_tools_are_served_over_mcp(toyproject):
    """Issue 18's ``fhir_server`` tasks: their FHIR tools (built on the case's base URL) run in the
    harness beside the case's server; the MCP client's calls are in the transcript and its writes
    in the server's log and state diff."""
    (toyproject.path / "fhir_client.py").write_text(FHIR_CLIENT)
    result = toyproject.runpytest_subprocess("-p", "no:cacheprovider", "--run-record", "record.json",
                                             f"--agent=mcp:{sys.executable} fhir_client.py", "--require-grounded")
    result.assert_outcomes(passed=3)
    rec = json.loads((toyproject.path / "record.json").read_text())
    for case in rec["cases"]:
        assert [t["tool"] for t in case["transcript"]] == ["fhir_search", "fhir_create"]  # the harness saw them
        assert [(r["method"], r["status"]) for r in case["fhir"]["requests"]] == [("GET", 200), ("POST", 201)]
        assert case["raw_output"].strip() == "ordered " + case["fhir"]["changes"][0]["id"]
    assert len({c["fhir"]["base_url"] for c in rec["cases"]}) == 3  # one repository, one MCP server per case
