"""What the ``chat`` / ``langgraph`` agents send to an OpenAI-compatible server, adjusted at the
wire (an httpx transport under the chat model's OpenAI client) where local servers differ from
OpenAI's API. Each adjustment was met on a real server (llama-cpp-python's):

* **tool_choice**: a request that binds tools and names no ``tool_choice`` gets
  ``"auto"`` (the agent's ``tool_choice``; None sends none): llama-cpp-python leaves the tools
  out of the prompt without it, so the model never learns it has any.
* **max_tokens**: LangChain sends the cap as ``max_completion_tokens`` (OpenAI's current name);
  to a local server (``--model-base-url``) it is also sent as ``max_tokens``, the name
  llama-cpp-python, LM Studio and older servers read (llama-cpp-python ignores the other and
  generates until its context is full).
* **empty assistant content**: LangChain sends an assistant turn that only calls tools with
  ``"content": null``; a server that refuses it (an HTTP 4xx or 500 answer whose error names the
  content) is sent the same request again with ``""`` instead, and every later request of the
  session is sent so: detected once, then remembered (not a blanket change: OpenAI's API is
  sent ``null`` as LangChain writes it).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

TOOL_CHOICES = ("auto", "omit")  # --model-tool-choice: "omit" sends none


def _chat_body(request: Any) -> dict[str, Any] | None:
    """The JSON body of a chat-completions request (None for any other request)."""
    if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
        return None
    try:
        body = json.loads(request.read())
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def _null_turns(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body.get("messages") or []
            if isinstance(m, dict) and m.get("role") == "assistant" and "content" in m and m["content"] is None]


def _refuses_null(status: int, text: str) -> bool:
    """The server's error answer says the content it was sent is not acceptable."""
    return (400 <= status < 500 or status == 500) and "content" in text.lower()


class WireTransport:
    """The adjustments of the module docstring around an ``HTTPTransport`` of ``http`` (the
    httpx the OpenAI SDK uses: ``httpx``, or ``httpx2`` in openai 3). One per agent (and so per
    pytest process): what it learns about the server holds for the session."""

    def __init__(self, *, tool_choice: str | None = "auto", local: bool = False, inner: Any = None,
                 http: Any = None) -> None:
        self.http = http or importlib.import_module("httpx")
        self.tool_choice = tool_choice
        self.local = local
        self.inner = inner or self.http.HTTPTransport()
        self.empty_content = False  # learned: this server refuses "content": null

    def handle_request(self, request: Any) -> Any:
        body = _chat_body(request)
        if body is None:
            return self.inner.handle_request(request)
        changed = self._adjust(body)
        nulls = _null_turns(body)
        if nulls and self.empty_content:
            for m in nulls:
                m["content"] = ""
            nulls, changed = [], True
        response = self.inner.handle_request(self._with_body(request, body) if changed else request)
        if not nulls or response.status_code < 400:
            return response
        raw = b"".join(response.iter_raw())  # an error answer: small, read whole to look at it
        response.close()

        def answer() -> Any:
            return self.http.Response(response.status_code, headers=response.headers, content=raw,
                                  extensions=response.extensions, request=request)

        if not _refuses_null(response.status_code, answer().read().decode("utf-8", "replace")):
            return answer()
        self.empty_content = True  # for the rest of the session
        for m in nulls:
            m["content"] = ""
        return self.inner.handle_request(self._with_body(request, body))

    def _with_body(self, request: Any, body: dict[str, Any]) -> Any:
        """``request`` with ``body`` as its JSON (headers, timeout extensions and all else kept)."""
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        return self.http.Request(request.method, request.url, headers=headers, content=json.dumps(body).encode(),
                                 extensions=request.extensions)

    def _adjust(self, body: dict[str, Any]) -> bool:
        changed = False
        if body.get("tools") and "tool_choice" not in body and self.tool_choice not in (None, "omit"):
            body["tool_choice"] = self.tool_choice
            changed = True
        if self.local and "max_completion_tokens" in body and "max_tokens" not in body:
            body["max_tokens"] = body["max_completion_tokens"]
            changed = True
        return changed

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> "WireTransport":
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.inner.__exit__(*exc)


def sdk_httpx() -> Any:
    """The httpx module the OpenAI SDK builds on (``httpx``; ``httpx2`` in openai 3): the
    transport's requests and responses must be that module's."""
    import openai

    return importlib.import_module(next(c.__module__.split(".")[0] for c in openai.DefaultHttpxClient.__mro__
                                        if c.__module__.split(".")[0] not in ("openai", "builtins")))


def http_client(*, tool_choice: str | None = "auto", local: bool = False) -> Any:
    """The httpx client the OpenAI SDK is handed (its defaults kept: the SDK's own
    ``DefaultHttpxClient`` around a :class:`WireTransport`)."""
    import openai

    return openai.DefaultHttpxClient(transport=WireTransport(tool_choice=tool_choice, local=local, http=sdk_httpx()))


__all__ = ["TOOL_CHOICES", "WireTransport", "http_client", "sdk_httpx"]
