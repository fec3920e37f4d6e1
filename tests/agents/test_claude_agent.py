"""``--agent claude-agent`` (issue 19 item 4): the Claude Agent SDK (its bundled Claude Code CLI)
on the case's MCP server, fully offline against a scripted Anthropic-compatible Messages server
on 127.0.0.1 (streaming, as the CLI asks). Skipped when the optional extra is not installed
(``uv sync --extra claude-agent``)."""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from json_http import JSONHandler
from conftest import REFS, ROOT, SYNTHEA

pytest.importorskip("claude_agent_sdk", reason="the claude-agent extra is not installed "
                                               "(uv sync --extra claude-agent)")

from pytest_groundeval.store.record import validate_record  # noqa: E402

TOOL = "mcp__groundeval__list_medication_requests"


def _results(req: dict[str, Any]) -> list[str]:
    """The texts of every tool result in the conversation so far."""
    found = []
    for m in req.get("messages") or []:
        for b in m.get("content") if isinstance(m.get("content"), list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                c = b.get("content")
                found.append(c if isinstance(c, str) else "".join(x.get("text", "") for x in c or []))
    return found


def script(req: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """List the active MedicationRequests through the MCP tool, then answer with what it returned."""
    names = [t.get("name") for t in req.get("tools") or []]
    if TOOL not in names:  # any side request of the CLI
        return [{"type": "text", "text": "ok"}], "end_turn"
    results = _results(req)
    if not results:
        return [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:10], "name": TOOL,
                 "input": {"status": "active"}}], "tool_use"
    listed = json.loads(results[-1])["medication_requests"]
    meds = [{"code": m["code"], "display": m["display"]} for m in listed if not m.get("do_not_perform")]
    return [{"type": "text", "text": json.dumps({"active_medications": meds})}], "end_turn"


def _events(blocks: list[dict[str, Any]], stop: str, tokens_in: int):
    yield "message_start", {"type": "message_start", "message": {
        "id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant", "model": "claude-opus-4-8",
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": tokens_in, "output_tokens": 1}}}
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "text_delta", "text": b["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(b["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 20}}
    yield "message_stop", {"type": "message_stop"}


class _Anthropic(JSONHandler):

    def do_GET(self) -> None:  # noqa: N802  (the preflight's probe)
        self._send({"data": [], "has_more": False})

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.requests.append((self.path, req))  # type: ignore[attr-defined]
        if "count_tokens" in self.path:
            return self._send({"input_tokens": 10})
        blocks, stop = script(req)
        tokens_in = len(json.dumps(req)) // 4
        if not req.get("stream"):
            return self._send({"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-opus-4-8",
                               "content": blocks, "stop_reason": stop, "stop_sequence": None,
                               "usage": {"input_tokens": tokens_in, "output_tokens": 20}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for name, data in _events(blocks, stop, tokens_in):
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def anthropic_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Anthropic)
    server.requests = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_pytest_evals_with_the_claude_agent_sdk_on_the_cases_mcp_server(pytester, anthropic_server, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    data = pytester.mkdir("data")
    for stem in (REFS, "Devin_Bailey_17dc1d1b-060d-4069-b7f9-640463bf12a7"):
        shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
    url = f"http://127.0.0.1:{anthropic_server.server_address[1]}"
    result = pytester.runpytest_subprocess(
        str(ROOT / "evals"), "-m", "extraction", "--data-dir", str(data), "--agent=claude-agent",
        "--model", "claude-opus-4-8", "--model-base-url", url, "--require-grounded",
        "--run-record", str(pytester.path / "record.json"), "-p", "no:cacheprovider", "-p", "no:randomly",
        "--rootdir", str(pytester.path))
    result.assert_outcomes(passed=2)
    rec = json.loads((pytester.path / "record.json").read_text())
    assert validate_record(rec) == []
    assert rec["agent"] == "claude-agent" and rec["model"] == "claude-opus-4-8"
    for c in rec["cases"]:
        assert c["outcome"] == "passed" and c["score"]["metrics"]["grounded"] == 1.0
        assert [t["tool"] for t in c["transcript"]] == ["list_medication_requests"]  # observed by the harness
        assert c["tools_offered"] == ["list_medication_requests", "read_resource"]
        assert c["usage"]["input_tokens"] > 0 and c["cost_usd"] > 0  # priced from the table by --model
        assert any(s["type"] == "ai" and s["tool_calls"] for s in c["agent_reported"])  # its account, kept apart
    main = [r for _, r in anthropic_server.requests if any(t.get("name") == TOOL for t in r.get("tools") or [])]
    assert main, [p for p, _ in anthropic_server.requests]
    for r in main:  # every built-in tool off: the model is shown the case's MCP tools and nothing else
        assert sorted(t["name"] for t in r["tools"]) == ["mcp__groundeval__list_medication_requests",
                                                         "mcp__groundeval__read_resource"]
        assert r["model"] == "claude-opus-4-8"
