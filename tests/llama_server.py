"""A scripted OpenAI-compatible server on 127.0.0.1 that behaves as llama-cpp-python's server
(0.3.x, ``python -m llama_cpp.server``) did when groundeval first ran a real model on it
(issue 31; the bodies below are the real server's, with the model's text scripted):

* it reads the cap as ``max_tokens`` and ignores ``max_completion_tokens`` (a request without
  ``max_tokens`` generates until the context is full: a looping model fills ``n_ctx``);
* it puts the tools into the prompt only when the request names a ``tool_choice``: without one
  the model never sees them (the script is handed ``tools=None``);
* it refuses an assistant turn whose ``content`` is ``null`` with an HTTP 500 whose error
  message is FastAPI's multi-line validation error, quoting the turn (its tool call ids);
* every other error is a 500 ``{"error": {"message": ..., "type": "internal_server_error"}}``;
* a tool call cut at the cap keeps ``finish_reason: "tool_calls"`` (its function-calling
  format reports every tool call so): only the completion tokens, the whole cap, say it was cut.

The model is ``reply(req, tools) -> message | None`` (None: the request hangs until the
server is closed, as a long generation does), or the string ``"loop"``: a model that repeats
itself until the cap or the context's end, or ``"loop-tool-call"``: one whose tool call's
arguments run on until the cap (they do not parse).
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import ThreadingHTTPServer
from typing import Any, Callable

from json_http import JSONHandler

N_CTX = 32768  # what a looping model fills without a cap


def validation_error(req: dict[str, Any]) -> str:
    """The message of the real server's HTTP 500 for an assistant turn with ``"content": null``
    (FastAPI's validation error, as llama-cpp-python 0.3.36 sent it: the turn quoted twice, with
    its tool call ids, and a frame of the server's own code)."""
    i, turn = next((i, m) for i, m in enumerate(req["messages"])
                   if m.get("role") == "assistant" and m.get("content", "") is None)
    loc = f"'loc': ('body', 'messages', {i}, "

    def role(kind: str, want: str) -> str:
        return (f"  {{'type': 'literal_error', {loc}'ChatCompletionRequest{kind}Message', 'role'), 'msg': \"Input "
                f"should be '{want}'\", 'input': 'assistant', 'ctx': {{'expected': \"'{want}'\"}}}}\n")

    def missing(kind: str, field: str) -> str:
        return (f"  {{'type': 'missing', {loc}'ChatCompletionRequest{kind}Message', '{field}'), 'msg': 'Field "
                f"required', 'input': {turn!r}}}\n")

    return ("7 validation errors:\n" + role("System", "system") + role("User", "user")
            + f"  {{'type': 'string_type', {loc}'ChatCompletionRequestAssistantMessage', 'content'), 'msg': "
              "'Input should be a valid string', 'input': None}\n"
            + role("Tool", "tool") + missing("Tool", "tool_call_id") + role("Function", "function")
            + missing("Function", "name")
            + "\n  File \"/root/.cache/groundeval/smoke-env/lib/python3.11/site-packages/llama_cpp/server/app.py\", "
              "line 376, in create_chat_completion\n    POST /v1/chat/completions")


def completion(message: dict[str, Any], prompt: int, completion_tokens: int, finish: str) -> dict[str, Any]:
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:8], "object": "chat.completion", "created": 0, "model": "smollm2",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                      "total_tokens": prompt + completion_tokens}}


def tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call__0_" + name + "_cmpl-" + uuid.uuid4().hex[:12], "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)}}]}


def server_error(message: str) -> tuple[int, dict[str, Any]]:
    """The real server's answer to an unexpected exception: a 500 with the exception's text."""
    return 500, {"error": {"message": message, "type": "internal_server_error", "param": None, "code": None}}


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


class LlamaCppHandler(JSONHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the preflight probe of --model-base-url
        self._send({"object": "list", "data": [{"id": "smollm2", "object": "model", "owned_by": "me",
                                                "permissions": []}]})

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server: Any = self.server
        with server.lock:
            server.requests.append(req)
        if server.refuses_null and any(m.get("role") == "assistant" and m.get("content", "") is None
                                       for m in req["messages"]):
            with server.lock:
                server.refused += 1
            status, body = server_error(validation_error(req))
            return self._send(body, status)
        prompt = len(json.dumps(req["messages"])) // 4
        if server.model == "loop":  # repeats itself until the cap (max_tokens only) or the context's end
            cap = req.get("max_tokens") or N_CTX
            return self._send(completion(say("I will now answer. " * (cap // 5)), prompt, cap, "length"))
        tools = req.get("tools") if req.get("tool_choice") else None  # no tool_choice: not in the prompt
        if server.model == "loop-tool-call" and tools:  # cut at the cap, reported as a tool call all the same
            cap = req.get("max_tokens") or N_CTX
            cut = tool_call(tools[0]["function"]["name"], {})
            cut["tool_calls"][0]["function"]["arguments"] = '{"status": "' + "active, " * (cap // 2)
            return self._send(completion(cut, prompt, cap, "tool_calls"))
        message = server.model(req, tools)
        if message is None:
            server.release.wait(120)  # a generation that outlasts the client's patience
            self.close_connection = True
            return
        if isinstance(message, tuple):  # (status, body): an error answer
            return self._send(message[1], message[0])
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        self._send(completion(message, prompt, 20, finish))


class LlamaCppServer:
    """``with LlamaCppServer(model) as server:`` ``server.url`` (``.../v1``), ``server.requests``
    (every chat request, as sent), ``server.refused`` (requests refused for a null content)."""

    def __init__(self, model: "Callable[[dict[str, Any], Any], Any] | str", *, refuses_null: bool = True) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), LlamaCppHandler)
        self.httpd.refuses_null = refuses_null  # type: ignore[attr-defined]  # False: as OpenAI's API
        self.httpd.model = model  # type: ignore[attr-defined]
        self.httpd.requests = []  # type: ignore[attr-defined]
        self.httpd.refused = 0  # type: ignore[attr-defined]
        self.httpd.lock = threading.Lock()  # type: ignore[attr-defined]
        self.httpd.release = threading.Event()  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return list(self.httpd.requests)  # type: ignore[attr-defined]

    @property
    def refused(self) -> int:
        return self.httpd.refused  # type: ignore[attr-defined]

    def __enter__(self) -> "LlamaCppServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.release.set()  # type: ignore[attr-defined]
        self.httpd.shutdown()
        self.httpd.server_close()
