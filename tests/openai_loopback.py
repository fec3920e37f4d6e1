"""OpenAI's Batch API on 127.0.0.1 (``/v1/files`` upload and content, ``/v1/batches`` create and
retrieve) with Chat Completions behind it: the stand-in for api.openai.com in the ``--batch``
tests of ``--agent=chat``.

A batch stays ``in_progress`` until ``release`` is set (from the start unless ``hold=True``),
and is ``completed`` on the first retrieve after that: each request of its input file is
answered (``answer(body)``, by default the extraction task's right answer, as the Anthropic
stand-in gives it) into the output file, or, as ``outcome(custom_id, body)`` says, fails with
an HTTP 400 (``errored``, in the output file) or is left unprocessed (``expired``: the error
file's ``batch_expired`` line). Usage counts one token per 4 characters of the messages.

Prompt caching as OpenAI documents it (https://platform.openai.com/docs/guides/prompt-caching),
automatic, for direct calls and batch results alike: a prompt's longest exact prefix shared
with a prompt answered before is read from the cache, in steps of ``CACHE_STEP`` tokens and
only from ``CACHE_MIN`` on; ``usage.prompt_tokens`` counts all of the prompt, cached tokens
included, and ``usage.prompt_tokens_details.cached_tokens`` the part read from the cache (no
cache write is reported: OpenAI bills it as input). Entries never expire here.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from email import policy
from email.parser import BytesParser
from typing import Any, Callable

from anthropic_loopback import default_answer, tokens
from json_http import JSONHandler, Loopback

CACHE_MIN, CACHE_STEP = 1024, 128  # OpenAI: prompts of 1,024 tokens or more; hits in 128-token steps


def prompt_text(body: dict[str, Any]) -> str:
    """What the server counts (and caches) of a Chat Completions request: its messages' text."""
    return "".join(str(m.get("content") or "") for m in body.get("messages") or [])


def cached_tokens(seen: list[str], text: str) -> int:
    """The tokens of ``text`` read from the cache: its longest prefix shared with a prompt in
    ``seen``, rounded down to ``CACHE_STEP`` tokens, 0 under ``CACHE_MIN``."""
    shared = max((len(os.path.commonprefix([text, old])) for old in seen), default=0)
    cached = tokens(text[:shared]) // CACHE_STEP * CACHE_STEP
    return cached if cached >= CACHE_MIN else 0


def _completion(body: dict[str, Any], server: Any) -> dict[str, Any]:
    """Answer and bill one request (the caller holds ``server.lock``); its prompt is cached from now on."""
    text = prompt_text(body)
    reply = server.answer({"messages": [{"role": "user", "content": text}]})
    cached = cached_tokens(server.prompts, text)
    server.prompts.append(text)
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:10], "object": "chat.completion", "created": 0,
            "model": body.get("model"), "choices": [{"index": 0, "finish_reason": "stop",
                                                     "message": {"role": "assistant", "content": reply}}],
            "usage": {"prompt_tokens": tokens(text), "completion_tokens": tokens(reply),
                      "total_tokens": tokens(text) + tokens(reply),
                      "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0}}}


def _upload(headers: Any, raw: bytes) -> tuple[str, bytes]:
    """The multipart form's file part: (file name, bytes)."""
    message = BytesParser(policy=policy.default).parsebytes(b"Content-Type: " + headers["Content-Type"].encode() + b"\r\n\r\n" + raw)
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "file":
            return part.get_filename() or "upload", part.get_payload(decode=True)
    raise ValueError("no file part")


class _Handler(JSONHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        server: Any = self.server
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0].rstrip("/")
        with server.lock:
            server.requests.append(path)
        if path.endswith("/v1/files"):
            name, data = _upload(self.headers, raw)
            fid = "file-" + uuid.uuid4().hex[:12]
            with server.lock:
                server.files[fid] = data
                server.uploads.append([json.loads(x) for x in data.decode().splitlines() if x.strip()])
            return self._send({"id": fid, "object": "file", "bytes": len(data), "created_at": 0, "filename": name,
                               "purpose": "batch", "status": "processed"})
        if path.endswith("/v1/batches"):
            req = json.loads(raw)
            batch = {"id": "batch_" + uuid.uuid4().hex[:12], "object": "batch", "endpoint": req["endpoint"],
                     "input_file_id": req["input_file_id"], "completion_window": req["completion_window"],
                     "status": "in_progress", "created_at": 0, "output_file_id": None, "error_file_id": None,
                     "request_counts": {"total": 0, "completed": 0, "failed": 0}}
            with server.lock:
                server.batches[batch["id"]] = batch
                server.batch_creations += 1
            return self._send(batch)
        if path.endswith("/v1/chat/completions"):
            with server.lock:
                answered = _completion(json.loads(raw), server)
            return self._send(answered)
        self._send({"error": {"message": path, "type": "invalid_request_error"}}, 404)

    def do_GET(self) -> None:  # noqa: N802
        server: Any = self.server
        path = self.path.split("?", 1)[0].rstrip("/")
        if "/v1/files/" in path and path.endswith("/content"):
            data = server.files[path.split("/v1/files/", 1)[1][:-len("/content")]]
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if "/v1/batches/" in path:
            with server.lock:
                batch = server.batches[path.split("/v1/batches/", 1)[1]]
                if batch["status"] == "in_progress" and server.release.is_set():
                    _end(server, batch)
            return self._send(batch)
        self._send({"object": "list", "data": []})


def _end(server: Any, batch: dict[str, Any]) -> None:
    out, err = [], []
    lines = [json.loads(x) for x in server.files[batch["input_file_id"]].decode().splitlines() if x.strip()]
    for line in lines:
        cid, body = line["custom_id"], line["body"]
        kind = server.outcome(cid, body)
        if kind == "succeeded":
            out.append({"id": "resp", "custom_id": cid, "error": None,
                        "response": {"status_code": 200, "request_id": "r", "body": _completion(body, server)}})
        elif kind == "errored":
            out.append({"id": "resp", "custom_id": cid, "error": None, "response": {
                "status_code": 400, "request_id": "r",
                "body": {"error": {"type": "invalid_request_error", "message": "max_tokens is too large"}}}})
        else:
            err.append({"id": "resp", "custom_id": cid, "response": None,
                        "error": {"code": "batch_expired", "message": "This request could not be executed "
                                  "before the completion window expired."}})
    for key, rows in (("output_file_id", out), ("error_file_id", err)):
        if rows:
            fid = "file-" + uuid.uuid4().hex[:12]
            server.files[fid] = "".join(json.dumps(r) + "\n" for r in rows).encode()
            batch[key] = fid
    batch["status"] = "completed"
    batch["request_counts"] = {"total": len(lines), "completed": sum(r["response"]["status_code"] == 200 for r in out),
                               "failed": len(lines) - sum(r["response"]["status_code"] == 200 for r in out)}


class OpenAILoopback(Loopback):
    """``with OpenAILoopback() as api:`` ``api.url`` is its ``/v1`` base URL."""

    base_path = "/v1"

    def __init__(self, answer: Callable[[dict[str, Any]], str] = default_answer, hold: bool = False,
                 outcome: Callable[[str, dict[str, Any]], str] = lambda cid, body: "succeeded") -> None:
        super().__init__(_Handler)
        h: Any = self.httpd
        h.requests, h.lock, h.files, h.batches, h.batch_creations = [], threading.Lock(), {}, {}, 0
        h.uploads = []  # each uploaded batch input file, as its JSONL lines
        h.prompts = []  # the prompts answered so far, in order: the prompt cache
        h.answer, h.outcome, h.release = answer, outcome, threading.Event()
        if not hold:
            h.release.set()

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests  # type: ignore[attr-defined]

    @property
    def release(self) -> threading.Event:
        """Set: a batch completes at its next retrieve."""
        return self.httpd.release  # type: ignore[attr-defined]

    @property
    def uploads(self) -> list[list[dict[str, Any]]]:
        """The uploaded batch input files, each as its lines (``custom_id``, ``body``...)."""
        return self.httpd.uploads  # type: ignore[attr-defined]

    @property
    def batch_creations(self) -> int:
        return self.httpd.batch_creations  # type: ignore[attr-defined]
