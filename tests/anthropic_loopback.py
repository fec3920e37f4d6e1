"""An Anthropic Messages API on 127.0.0.1 that bills what it is sent as the API documents:
the tests' and ``scripts/bench_cost.py``'s stand-in for api.anthropic.com.

Tokens are counted from the request itself, a fixed estimate of one token per
``CHARS_PER_TOKEN`` characters of each part's text (a tool's JSON), so what the harness sends
is what is billed. Prompt caching follows the documented rules:

* the prompt is read in the order tools, system, messages; a ``cache_control`` on a block
  marks a breakpoint: the prefix up to and including that block (at most 4 breakpoints,
  else a 400);
* the longest marked prefix that was written within its TTL (5 minutes, refreshed by each
  read) is read: ``cache_read_input_tokens``;
* every later marked prefix at least the model's minimum cacheable length long is written:
  ``cache_creation_input_tokens`` (from the read point to the last one written); a shorter
  one is neither written nor read;
* ``input_tokens`` is the rest (after the last cache read or write).

Message Batches (``/v1/messages/batches``: create, retrieve, results as JSONL): a batch stays
``in_progress`` until ``release`` is set (set from the start unless ``hold=True``), and ends on
the first retrieve after that, each request then answered (and billed) as above, or given the
result type ``outcome(custom_id, params)`` names (``errored``, ``expired``, ``canceled``).
``batch_creations`` counts the batches created; ``billed`` holds ``(model, usage, batched)`` of
every request answered, the server's own bill.

A cache entry exists from the moment its request is answered: requests that arrive together
for a new prefix all write it.

The answer is :func:`default_answer` unless the server is given another ``answer(request)``;
``latency`` seconds pass before a request is billed and answered (a model's time to answer:
requests that overlap it see the cache as it was when they came).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
import uuid
from typing import Any, Callable

from json_http import JSONHandler, Loopback

CHARS_PER_TOKEN = 4
TTL_S = 300.0
MAX_BREAKPOINTS = 4


def minimum_cacheable(model: str) -> int:
    """The documented minimum cacheable prompt length of ``model`` (tokens)."""
    if any(k in model for k in ("opus-4-5", "opus-4-6", "opus-4-7", "opus-4-8", "opus-5", "haiku-4-5", "haiku-5")):
        return 4096
    if "haiku-3" in model or "3-5-haiku" in model or "3-haiku" in model:
        return 2048
    return 1024


def tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _plain(block: Any) -> Any:
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block


def parts(req: dict[str, Any]) -> list[tuple[str, bool]]:
    """The request's prompt as ``(text, marked)`` parts in the order the cache reads it."""
    out: list[tuple[str, bool]] = []
    for tool in req.get("tools") or []:
        out.append((json.dumps(_plain(tool), sort_keys=True), "cache_control" in tool))
    system = req.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    for b in blocks:
        out.append((b.get("text", ""), "cache_control" in b))
    for m in req.get("messages") or []:
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        out.append((f"<{m.get('role')}>", False))
        for b in blocks:
            text = b.get("text") if b.get("type") == "text" else json.dumps(_plain(b), sort_keys=True)
            out.append((text or "", "cache_control" in b))
    return out


class PromptCache:
    """The server's prompt cache: prefix digest -> expiry (``clock()`` seconds)."""

    def __init__(self, ttl: float = TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self.entries: dict[str, float] = {}
        self.lock = threading.Lock()

    def usage(self, req: dict[str, Any]) -> dict[str, int]:
        """Bill one request answered at once (:meth:`bill`, then :meth:`commit`)."""
        usage, writes = self.bill(req)
        self.commit(writes)
        return usage

    def commit(self, writes: list[str]) -> None:
        """The request that wrote ``writes`` was answered: from now on they can be read."""
        with self.lock:
            for key in writes:
                self.entries[key] = self.clock() + self.ttl

    def bill(self, req: dict[str, Any]) -> tuple[dict[str, int], list[str]]:
        """Bill one request as it arrives: its token counts, what it reads from the cache, and
        the prefixes it writes (readable once it is answered: :meth:`commit`)."""
        ps = parts(req)
        marks = [i for i, (_, marked) in enumerate(ps) if marked]
        if len(marks) > MAX_BREAKPOINTS:
            raise ValueError(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                             f"Found {len(marks)}.")
        sizes = [tokens(t) for t, _ in ps]
        total = sum(sizes)
        digest, running, prefix = hashlib.sha256(str(req.get("model")).encode()), 0, {}
        for i, (text, _) in enumerate(ps):
            digest.update(b"\0" + text.encode())
            running += sizes[i]
            if i in marks:
                prefix[i] = (digest.hexdigest(), running)
        now, minimum = self.clock(), minimum_cacheable(str(req.get("model")))
        with self.lock:
            read = 0
            hit = None
            for i in reversed(marks):
                key, length = prefix[i]
                if self.entries.get(key, -math.inf) > now:
                    hit, read = i, length
                    self.entries[key] = now + self.ttl  # a read refreshes the entry
                    break
        written, writes = read, []
        for i in marks:
            key, length = prefix[i]
            if (hit is None or i > hit) and length >= minimum:
                writes.append(key)
                written = length
        return {"input_tokens": total - written, "cache_creation_input_tokens": written - read,
                "cache_read_input_tokens": read}, writes


def default_answer(req: dict[str, Any]) -> str:
    """The extraction task's right answer when the prompt carries a bundle, else an empty
    reconciliation answer (the cost, not the score, is what these servers are for)."""
    from pytest_groundeval.tasks.extraction import active_medications

    text = "".join(p for p, _ in parts(req))
    if "Bundle:\n" in text and "active_medications" in text:
        bundle = json.JSONDecoder().raw_decode(text.split("Bundle:\n", 1)[1])[0]
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
    return json.dumps({"medications": []})


def message(req: dict[str, Any], cache: PromptCache, answer: Callable[[dict[str, Any]], str],
            latency: float = 0.0) -> dict[str, Any]:
    """The Messages API's answer to one request (its usage billed by ``cache``), ``latency``
    seconds after it came."""
    text = answer(req)
    usage, writes = cache.bill(req)
    time.sleep(latency)  # the model's time to answer
    cache.commit(writes)
    usage["output_tokens"] = tokens(text)
    return {"id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant",
            "model": req.get("model"), "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": None, "usage": usage}


def _batch_json(batch: dict[str, Any], url: str) -> dict[str, Any]:
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    for r in batch["requests"]:
        kind = batch["results"][r["custom_id"]]["type"] if batch["ended"] else "processing"
        counts[kind] += 1
    return {"id": batch["id"], "type": "message_batch", "processing_status": "ended" if batch["ended"] else "in_progress",
            "request_counts": counts, "created_at": "2026-12-07T00:00:00Z", "expires_at": "2026-12-08T00:00:00Z",
            "ended_at": "2026-12-07T00:01:00Z" if batch["ended"] else None, "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": f"{url}/v1/messages/batches/{batch['id']}/results" if batch["ended"] else None}


def _end(server: Any, batch: dict[str, Any]) -> None:
    """Process every request of ``batch`` (its results, billed as direct requests)."""
    for r in batch["requests"]:
        kind = server.outcome(r["custom_id"], r["params"])
        if kind == "succeeded":
            result: dict[str, Any] = {"type": kind, "message": message(r["params"], server.cache, server.answer)}
            server.billed.append((r["params"].get("model"), result["message"]["usage"], True))
        elif kind == "errored":
            result = {"type": kind, "error": {"type": "error", "error": {"type": "invalid_request_error",
                                                                        "message": "max_tokens: too large"}}}
        else:
            result = {"type": kind}
        batch["results"][r["custom_id"]] = result
    batch["ended"] = True


class _Handler(JSONHandler):
    protocol_version = "HTTP/1.1"

    def _body(self) -> dict[str, Any]:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def do_GET(self) -> None:  # noqa: N802
        server: Any = self.server
        path = self.path.split("?", 1)[0].rstrip("/")
        if "/v1/messages/batches/" not in path:
            return self._send({"data": [], "has_more": False})  # a probe of the base URL
        batch_id, _, rest = path.split("/v1/messages/batches/", 1)[1].partition("/")
        with server.lock:
            batch = server.batches.get(batch_id)
            if batch is not None and not batch["ended"] and server.release.is_set():
                _end(server, batch)
        if batch is None:
            return self._send({"type": "error", "error": {"type": "not_found_error", "message": batch_id}}, 404)
        if rest != "results":
            return self._send(_batch_json(batch, server.url))
        data = "".join(json.dumps({"custom_id": cid, "result": res}) + "\n"
                       for cid, res in batch["results"].items()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/binary")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        server: Any = self.server
        req = self._body()
        with server.lock:
            server.requests.append((self.path, req))
        if self.path.rstrip("/").endswith("/v1/messages/batches"):
            batch = {"id": "msgbatch_" + uuid.uuid4().hex[:16], "requests": req["requests"], "results": {},
                     "ended": False}
            with server.lock:
                server.batches[batch["id"]] = batch
                server.batch_creations += 1
            return self._send(_batch_json(batch, server.url))
        if self.path.rstrip("/").endswith("/v1/messages"):
            try:
                answered = message(req, server.cache, server.answer, server.latency)
                with server.lock:
                    server.billed.append((req.get("model"), answered["usage"], False))
                return self._send(answered)
            except ValueError as e:
                return self._send({"type": "error", "error": {"type": "invalid_request_error",
                                                              "message": str(e)}}, 400)
        self._send({"type": "error", "error": {"type": "not_found_error", "message": self.path}}, 404)


class AnthropicLoopback(Loopback):
    """``with AnthropicLoopback() as api:`` a server on 127.0.0.1; ``api.url`` is its base
    URL (``ANTHROPIC_BASE_URL``); ``api.requests`` every ``(path, body)`` it was sent."""

    handler: type = _Handler

    def __init__(self, answer: Callable[[dict[str, Any]], str] = default_answer,
                 clock: Callable[[], float] = time.monotonic, latency: float = 0.0, hold: bool = False,
                 outcome: Callable[[str, dict[str, Any]], str] = lambda cid, params: "succeeded") -> None:
        super().__init__(self.handler)
        self.httpd.requests, self.httpd.lock = [], threading.Lock()  # type: ignore[attr-defined]
        self.httpd.cache, self.httpd.answer = PromptCache(clock=clock), answer  # type: ignore[attr-defined]
        self.httpd.latency = latency  # type: ignore[attr-defined]
        self.httpd.batches, self.httpd.batch_creations = {}, 0  # type: ignore[attr-defined]
        self.httpd.billed = []  # type: ignore[attr-defined]
        self.httpd.release, self.httpd.outcome = threading.Event(), outcome  # type: ignore[attr-defined]
        self.httpd.url = self.url  # type: ignore[attr-defined]
        if not hold:
            self.release.set()

    @property
    def release(self) -> threading.Event:
        """Set: a batch ends at its next retrieve."""
        return self.httpd.release  # type: ignore[attr-defined]

    @property
    def batch_creations(self) -> int:
        return self.httpd.batch_creations  # type: ignore[attr-defined]

    @property
    def billed(self) -> list[tuple[str, dict[str, int], bool]]:
        return self.httpd.billed  # type: ignore[attr-defined]

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        return self.httpd.requests  # type: ignore[attr-defined]
