"""One Anthropic Messages call per case."""

from __future__ import annotations

import os
import threading
from typing import Any

from pytest_groundeval.model import AgentOutput
from pytest_groundeval.run.batch import batch_call
from pytest_groundeval.run.calls import attempt_deadline
from pytest_groundeval.run.fhircase import masked
from pytest_groundeval.run.prompt_cache import PrefixGate, prefix_key, user_content


class ClaudeAgent:
    """``--agent=claude``: the prompt as one user message; all text blocks joined.

    Retries and the per-call timeout are applied by the harness (``--retries``,
    ``--agent-timeout``) so each attempt is recorded; the SDK client gets the same timeout
    and ``max_retries=0`` unless you pass your own client.

    ``prompt_cache`` (default on; ``--no-groundeval-cache`` turns it off): the message is sent
    as text blocks with ``cache_control`` breakpoints after the patient's record and at its
    end (``run/prompt_cache.py``), and the first request of a record goes before the others
    of the same record, so they read it from the prompt cache. The text is the same.
    """

    default_model = "claude-opus-4-8"

    def __init__(self, model: str = default_model, *, timeout: float = 120.0, max_retries: int = 0,
                 max_tokens: int = 4096, client: Any = None, cache: Any = None,
                 traced: bool = False, prompt_cache: bool = True) -> None:
        self.name = "claude"
        self.prompt_cache = prompt_cache
        self.batches: Any = None  # --batch: the session's Message Batches (run/batch.py), set at collection
        self._gate = PrefixGate()
        self.model = model
        self.max_tokens = max_tokens
        self.cache = cache
        self.traced = traced  # LangSmith on: the SDK client is wrapped (build_agent)
        self._client = client
        self._client_args = {"timeout": timeout, "max_retries": max_retries}
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The SDK client, made on first use: a run served from the cache never imports it."""
        with self._lock:
            if self._client is None:
                import anthropic

                self._client = anthropic.Anthropic(**self._client_args)
                if self.traced:  # LangSmith on: each Messages call a run nested under its case
                    try:
                        from langsmith.wrappers import wrap_anthropic

                        self._client = wrap_anthropic(self._client)
                    except Exception:  # noqa: BLE001 - tracing never stops the agent: untraced instead
                        pass
        return self._client

    def prepare(self) -> None:
        """Made before the harness's timer starts (runner): the SDK import and the client
        (with the cache on, only a miss needs them, and they are made then)."""
        if self.cache is None:
            self.client  # noqa: B018 - made now, not inside the attempt's time

    def request(self, prompt: str) -> dict[str, Any]:
        """The Messages request's body for ``prompt`` (also what a batch submits)."""
        return {"model": self.model, "max_tokens": self.max_tokens,
                "messages": [{"role": "user", "content": user_content(prompt, self.prompt_cache)}]}

    def _call(self, prompt: str) -> dict[str, Any]:
        def send() -> Any:
            return self.client.messages.create(**self.request(prompt))

        if self.batches is not None and masked(prompt) == prompt:  # (a case's FHIR server: called directly)
            value = self.answer(batch_call(self.batches, self.request(prompt)))
            if value["usage"] is not None:
                value["usage"]["batch_calls"] = 1  # billed at the batch price (usage.cost_usd)
            return value
        if self.prompt_cache:
            response = self._gate.run(prefix_key(self.model, prompt), send, attempt_deadline())
        else:
            response = send()
        return self.answer(response)

    def answer(self, response: Any) -> dict[str, Any]:
        """A Messages response (an SDK ``Message``) as the agent's text, model and usage."""
        text = "".join(block.text for block in response.content if getattr(block, "type", None) == "text")
        usage = getattr(response, "usage", None)
        return {
            "text": text,
            "model": getattr(response, "model", None) or self.model,
            "usage": _usage(usage) if usage is not None else None,
        }

    def run(self, prompt: str) -> AgentOutput:
        if self.cache is None:
            value = self._call(prompt)
        else:
            components = self.cache.components(
                agent=self.name, model=self.model,
                params={"max_tokens": self.max_tokens, "endpoint": os.environ.get("ANTHROPIC_BASE_URL")},
                messages=[{"role": "user", "content": prompt}], tools=None)
            value, hit = self.cache.call(components, lambda: self._call(prompt),
                                         meta={"agent": self.name, "model": self.model})
            if hit:  # served from the cache: no tokens spent by this run
                value = {**value, "usage": {"input_tokens": 0, "output_tokens": 0, "model_calls": 0,
                                            "cache_hits": 1, "cached_usage": value.get("usage")}}
        return AgentOutput(text=value["text"], model=value["model"], usage=value["usage"])


def _usage(usage: Any) -> dict[str, Any]:
    """The Messages API's usage as token counts. Prompt-cache tokens are counted apart from
    ``input_tokens`` (and priced apart): written (``cache_creation_input_tokens``, the 1-hour
    TTL share from ``cache_creation.ephemeral_1h_input_tokens``) and read."""
    counts: dict[str, Any] = {
        "input_tokens": getattr(usage, "input_tokens", None),
        "output_tokens": getattr(usage, "output_tokens", None),
        "model_calls": 1,
    }
    for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        value = getattr(usage, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            counts[key] = value
    one_hour = getattr(getattr(usage, "cache_creation", None), "ephemeral_1h_input_tokens", None)
    if isinstance(one_hour, int) and not isinstance(one_hour, bool) and one_hour > 0:
        counts["cache_creation_1h_input_tokens"] = one_hour
    return counts
