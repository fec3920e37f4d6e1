"""Extraction through the LangGraph agent with tools: the bundle is not in the prompt; the
agent gets the patient id and HealthChain-backed read tools over that case's bundle only.

A scripted chat model (a real LangGraph graph, the real tools) works every committed case;
it reports input tokens proportional to the characters it received (``len(text) // 4``,
tool schemas included), so the tool path and the single-call path (the same kind of model
reading the bundle out of the prompt) can be compared. The last test drives the agent
against a scripted OpenAI-compatible HTTP server through ``pytest evals``."""

from __future__ import annotations

import json
import subprocess
import os
import re
import shutil
import threading
import uuid
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from json_http import JSONHandler
from conftest import REFS, ROOT, SYNTHEA

pytest.importorskip("langgraph")
pytest.importorskip("langchain")

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from pydantic import Field  # noqa: E402

from pytest_groundeval.agents.langgraph_agent import LangGraphAgent  # noqa: E402
from pytest_groundeval.fhir.hc_tools import langchain_record_tools, list_medication_requests, read_resource  # noqa: E402
from pytest_groundeval.store.record import validate_record  # noqa: E402
from pytest_groundeval.run.runner import run_case  # noqa: E402
from pytest_groundeval.tasks.extraction import SYSTEM_PROMPT, ExtractionTask, active_medications  # noqa: E402
from pytest_groundeval.fhir.medications import patient_reference  # noqa: E402

TASK = ExtractionTask(SYNTHEA)
REFS_ALL = TASK.discover()
TOOL_NAMES = ["list_medication_requests", "read_resource"]


def _text(m: BaseMessage) -> str:
    content = m.content if isinstance(m.content, str) else json.dumps(m.content)
    calls = getattr(m, "tool_calls", None) or []
    return content + (json.dumps(calls) if calls else "")


def _answer(codes: list[dict[str, Any]]) -> str:
    return json.dumps({"active_medications": [{"code": c["code"], "display": c["display"]} for c in codes]})


class ReadingModel(BaseChatModel):
    """Works an extraction case as a capable model would. With tools: lists the active
    MedicationRequests (first reading ``bad_reference`` when set, to see the error value),
    then answers with the codes it read. Without tools (single call): reads the bundle out
    of the prompt. Input tokens: characters received (messages and tool schemas) // 4."""

    bad_reference: str | None = None
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    schema_chars: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted-reader"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ReadingModel":
        from langchain_core.utils.function_calling import convert_to_openai_tool

        self.schema_chars = sum(len(json.dumps(convert_to_openai_tool(t))) for t in tools)
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        human = next(m.content for m in messages if m.type == "human")
        done = {m.name: json.loads(m.content) for m in messages if m.type == "tool"}
        if "Bundle:\n" in human:  # single call: the bundle is in the prompt
            listed = list_medication_requests(
                human.split("Bundle:\n", 1)[1].split("\n(End of the bundle.)\n", 1)[0], "active")
            msg = AIMessage(content=_answer(listed["medication_requests"]))
        elif self.bad_reference and "read_resource" not in done:
            msg = AIMessage(content="", tool_calls=[{"name": "read_resource", "args": {"reference": self.bad_reference},
                                                     "id": f"call-{uuid.uuid4().hex[:8]}"}])
        elif "list_medication_requests" not in done:
            msg = AIMessage(content="", tool_calls=[{"name": "list_medication_requests", "args": {"status": "active"},
                                                     "id": f"call-{uuid.uuid4().hex[:8]}"}])
        else:
            msg = AIMessage(content=_answer(done["list_medication_requests"]["medication_requests"]))
        chars = sum(len(_text(m)) for m in messages) + self.schema_chars
        msg.usage_metadata = {"input_tokens": chars // 4, "output_tokens": len(_text(msg)) // 4,
                              "total_tokens": chars // 4 + len(_text(msg)) // 4}
        return ChatResult(generations=[ChatGeneration(message=msg)])


def _patient_ids() -> dict[str, str]:
    return {ref.case_id: patient_reference(json.loads(ref.path.read_text())).split("/", 1)[1] for ref in REFS_ALL}


PATIENTS = _patient_ids()


@pytest.fixture(scope="module")
def tool_runs() -> dict[str, tuple[Any, list[list[BaseMessage]]]]:
    """Every committed extraction case through the LangGraph agent with tools."""
    model = ReadingModel()
    agent = LangGraphAgent(model=model)
    out = {}
    for ref in REFS_ALL:
        model.seen = []
        out[ref.case_id] = (run_case(TASK, ref, agent).model_dump(mode="json"), list(model.seen))
    return out


def test_the_whole_extraction_suite_passes_through_the_tools(tool_runs):
    assert len(tool_runs) == len(REFS_ALL) == 45
    for case_id, (entry, _) in tool_runs.items():
        assert entry["outcome"] == "passed", (case_id, entry.get("error"), entry.get("score"))
        assert entry["steps"] == 2
        tools = [t["tool"] for t in entry["transcript"]]  # what the harness observed
        assert tools == ["list_medication_requests"] and entry["tools_offered"] == TOOL_NAMES
        assert entry["transcript"][0]["args"] == {"status": "active"} and entry["transcript"][0]["status"] == "ok"
        assert entry["agent_reported"][0]["tool_calls"][0]["args"] == {"status": "active"}
        assert entry["usage"]["input_tokens"] > 0


def test_each_transcript_holds_only_its_own_patient_and_no_truth(tool_runs):
    for case_id, (entry, seen) in tool_runs.items():
        own = PATIENTS[case_id]
        human = [m.content for m in seen[0] if m.type == "human"]
        assert len(human) == 1 and f"Patient/{own}" in human[0]
        assert "Bundle:" not in human[0] and '"resourceType"' not in human[0] and "urn:uuid:" not in human[0]
        assert seen[0][0].type == "system" and seen[0][0].content == SYSTEM_PROMPT
        everything = json.dumps([entry["transcript"], entry["agent_reported"]]) + "".join(
            _text(m) for call in seen for m in call)
        assert "ground_truth" not in everything and "truth" not in json.dumps(entry["transcript"])
        for other, pid in PATIENTS.items():
            if other != case_id:
                assert pid not in everything, (case_id, other)


def test_the_tools_are_this_cases_bundle_only_and_fresh_per_case():
    a, b = (TASK.load(r) for r in REFS_ALL[:2])
    ta, tb = TASK.agent_tools(a.inputs), TASK.agent_tools(b.inputs)
    assert [t.name for t in ta] == [t.name for t in tb] == TOOL_NAMES
    assert ta[0] is not tb[0]
    pid_b = patient_reference(b.inputs["bundle"])
    assert "error" in ta[1].invoke({"reference": pid_b})  # the other case's patient is not reachable
    assert ta[1].invoke({"reference": patient_reference(a.inputs["bundle"])})["resource"]["resourceType"] == "Patient"


def test_errors_come_back_as_values():
    case = TASK.load(next(r for r in REFS_ALL if r.case_id == REFS))
    lister, reader = TASK.agent_tools(case.inputs)
    assert "not found" in reader.invoke({"reference": "Medication/does-not-exist"})["error"]
    assert "error" in reader.invoke({"reference": ""})
    assert "error" in json.loads(reader.run({"reference": 5}))
    assert "status must be one of" in lister.invoke({"status": "paused"})["error"]
    assert "error" in read_resource("{not json", "Medication/x")
    assert set(langchain_record_tools('{"resourceType": "Bundle"')[1].invoke({"reference": "Patient/x"})) == {"error"}
    # a real medicationReference resolves to its Medication with the RxNorm coding
    bundle = json.loads((SYNTHEA / f"{REFS}.json").read_text())
    ref = next(e["resource"]["medicationReference"]["reference"] for e in bundle["entry"]
               if e["resource"]["resourceType"] == "MedicationRequest" and e["resource"].get("medicationReference"))
    med = reader.invoke({"reference": ref})["resource"]
    assert med["resourceType"] == "Medication" and med["code"]["coding"][0]["code"]
    assert "text" not in med and "meta" not in med


def test_a_bad_reference_is_an_error_value_in_the_transcript_and_the_case_still_passes():
    ref = next(r for r in REFS_ALL if r.case_id == REFS)
    entry = run_case(TASK, ref, LangGraphAgent(model=ReadingModel(bad_reference="Medication/nope"))).model_dump(mode="json")
    assert entry["outcome"] == "passed" and entry["steps"] == 3
    first = entry["transcript"][0]
    assert first["tool"] == "read_resource" and "not found" in first["result"]["error"]
    assert first["status"] == "error"  # marked where the result was produced: never evidence


def test_single_call_agents_keep_the_bundle_in_the_prompt():
    case = TASK.load(REFS_ALL[0])
    assert "Bundle:\n" in case.prompt and case.inputs["bundle_json"] in case.prompt
    assert case.inputs["bundle_json"] not in TASK.agent_prompt(case.prompt, case.inputs)


def test_the_tool_path_costs_far_fewer_input_tokens_on_large_bundles(tool_runs, capsys):
    largest = sorted(REFS_ALL, key=lambda r: r.path.stat().st_size, reverse=True)[:3]
    rows = []
    for ref in largest:
        case = TASK.load(ref)
        single = LangGraphAgent(model=ReadingModel()).run(case.prompt)  # one call, no tools
        assert TASK.score(TASK.parse(single), case).passed
        tool_in = tool_runs[ref.case_id][0]["usage"]["input_tokens"]
        single_in = single.usage["input_tokens"]
        rows.append((ref.case_id, ref.path.stat().st_size, tool_in, single_in))
        assert tool_in * 10 < single_in, rows[-1]
    with capsys.disabled():
        for case_id, size, tool_in, single_in in rows:
            print(f"\n{case_id[:40]:40} {size:>7} B  tools {tool_in:>6} in-tokens  single-call {single_in:>6}"
                  f"  ({single_in / tool_in:.0f}x)")


# --------------------------------------------------------------------------- OpenAI-compatible server


class _Server(JSONHandler):
    """POST /v1/chat/completions: a tool call to list active MedicationRequests, then the
    answer with the codes the tool returned. GET /v1/models for the preflight probe."""


    def do_GET(self) -> None:  # noqa: N802
        self._send({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "test"}]})

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(req)  # type: ignore[attr-defined]
        tool = [m for m in req["messages"] if m["role"] == "tool"]
        if not req.get("tools"):  # --agent=chat: one call, the bundle in the prompt
            user = next(m["content"] for m in req["messages"] if m["role"] == "user")
            bundle = json.JSONDecoder().raw_decode(user.split("Bundle:\n", 1)[1])[0]
            message = {"role": "assistant", "content": _answer(active_medications(bundle, "prompt"))}
            finish = "stop"
        elif not tool:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_" + uuid.uuid4().hex[:8], "type": "function",
                "function": {"name": "list_medication_requests", "arguments": json.dumps({"status": "active"})}}]}
            finish = "tool_calls"
        else:
            listed = json.loads(tool[-1]["content"])
            message = {"role": "assistant", "content": _answer(listed["medication_requests"])}
            finish = "stop"
        prompt = len(json.dumps(req)) // 4
        self._send({"id": "chatcmpl-" + uuid.uuid4().hex[:8], "object": "chat.completion", "created": 0,
                    "model": "scripted", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}})


@pytest.fixture
def openai_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_pytest_evals_against_an_openai_compatible_server(pytester, openai_server, monkeypatch):
    pytest.importorskip("langchain_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = pytester.mkdir("data")
    stems = [REFS, "Devin_Bailey_17dc1d1b-060d-4069-b7f9-640463bf12a7"]
    for stem in stems:
        shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
    url = f"http://127.0.0.1:{openai_server.server_address[1]}/v1"
    result = pytester.runpytest_subprocess(
        str(ROOT / "evals"), "-m", "extraction", "--data-dir", str(data), "--agent=langgraph",
        "--model", "openai:scripted", "--model-base-url", url, "--run-record", str(pytester.path / "record.json"),
        "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(pytester.path))
    result.assert_outcomes(passed=2)
    rec = json.loads((pytester.path / "record.json").read_text())
    assert validate_record(rec) == []
    assert rec["summary"]["extraction"]["n_cases"] == 2 and rec["summary"]["extraction"]["micro_f1"] == 1.0
    for c in rec["cases"]:
        assert c["outcome"] == "passed" and c["steps"] == 2
        assert [t["tool"] for t in c["transcript"]] == ["list_medication_requests"]
        assert c["usage"]["input_tokens"] > 0
        # the codes it answered came from list_medication_requests: grounded
        assert c["score"]["dimensions"]["grounded"]["passed"] and c["score"]["metrics"]["grounded"] == 1.0
    assert rec["summary"]["extraction"]["grounded"] == 1.0 and rec["summary"]["extraction"]["grounded_n"] == 2
    reqs = openai_server.requests
    assert len(reqs) == 4 and all(r["model"] == "scripted" for r in reqs)
    assert {t["function"]["name"] for t in reqs[0]["tools"]} == set(TOOL_NAMES)
    humans = [m["content"] for r in reqs for m in r["messages"] if m["role"] == "user"]
    assert humans and all("Bundle:" not in h and re.search(r"Patient/[0-9a-f-]{36}", h) for h in humans)


def _readme_block(marker: str) -> str:
    text = (ROOT / "docs" / "your-agent" / "real-models.md").read_text(encoding="utf-8")
    start = text.index(marker)
    begin = text.index("```bash\n", start) + len("```bash\n")
    return text[begin:text.index("```", begin)]


def test_the_readme_with_and_without_tools_commands_run_as_written(tmp_path, openai_server, monkeypatch):
    """The docs' command pair and compare (docs/your-agent/real-models.md), line by line: the same (scripted) model as one
    call with the bundle in the prompt (--agent=chat) and through the tools (--agent=langgraph).
    Only the server's address and the records' folder differ from what the page says."""
    pytest.importorskip("langchain_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = f"http://127.0.0.1:{openai_server.server_address[1]}/v1"
    script = (_readme_block("<!-- tools-comparison")
              .replace("http://127.0.0.1:8000/v1", url).replace("runs/", f"{tmp_path}/"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    single = json.loads((tmp_path / "single.json").read_text())
    tools = json.loads((tmp_path / "tools.json").read_text())
    for rec in (single, tools):
        assert rec["summary"]["extraction"]["n_cases"] == 45 and rec["summary"]["extraction"]["micro_f1"] == 1.0
    assert single["agent"] == "chat" and tools["agent"] == "langgraph"
    assert all(c["steps"] == 1 and c["transcript"] is None and c["tools_offered"] is None for c in single["cases"])
    assert tools["usage"]["input_tokens"] * 3 < single["usage"]["input_tokens"]
    assert tools["summary"]["extraction"]["grounded"] == 1.0 and "grounded_n" not in single["summary"]["extraction"] \
        or not single["summary"]["extraction"].get("grounded_n")
    out = proc.stdout
    assert "extraction: 45 cases paired" in out and "no regression significant" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("tokens: base"))
    assert f"{single['usage']['input_tokens']:,} in" in line and f"{tools['usage']['input_tokens']:,} in" in line
