"""Model-call cache: re-run an eval without paying for the same model call twice.

One JSON file per entry under the cache folder, written atomically (temp file + rename),
so xdist workers never race. The key is a hash over named components: agent, model,
call parameters, the full messages, and the tool schemas. Files store the components'
hashes (not the prompts) and the response; API keys and other secrets are never stored
(parameters whose names look like secrets are dropped before hashing, and the entry goes
through the same redaction step as the record: a key echoed in a response is not stored).

Modes: ``off``; ``read`` (use hits, call on a miss, store nothing); ``write`` (always call,
store); ``readwrite`` (use hits, call and store on a miss); ``strict`` (use hits; a miss is
an error naming the component that differs from the closest stored entry; for CI).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from pytest_groundeval.run.calls import PermanentAgentError, current_repeat
from pytest_groundeval.run.fhircase import masked
from pytest_groundeval.store.redact import redact_json

MODES = ("off", "read", "write", "readwrite", "strict")
COMPONENTS = ("agent", "model", "params", "messages", "tools")
_SECRET = re.compile(r"(api[_-]?key|authorization|token|secret|password|credential)", re.I)


class CacheMiss(PermanentAgentError):
    """A ``strict`` cache miss: the run must not call the model."""


def scrub(value: Any) -> Any:
    """Drop anything whose key looks like a secret, recursively."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not _SECRET.search(str(k))}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    return value


def _digest(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ModelCache:
    def __init__(self, folder: Path, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"--model-cache {mode!r}: expected one of {', '.join(MODES)}")
        self.folder = Path(folder)
        self.mode = mode
        self.hits = 0
        self.calls = 0
        self._lock = threading.Lock()

    def components(self, *, agent: str, model: str | None, params: dict[str, Any] | None,
                   messages: Any, tools: Any = None) -> dict[str, str]:
        # a FHIR server case's base URL (its port) is keyed as {fhir_base_url} (run/fhircase.py)
        raw = {"agent": agent, "model": model, "params": scrub(params or {}), "messages": masked(messages),
               "tools": scrub(tools)}
        components = {name: _digest(raw[name]) for name in COMPONENTS}
        repeat = current_repeat()
        if repeat is not None:  # --repeat: each repeat has its own entries (absent without it)
            components["repeat"] = _digest(repeat)
        return components

    @staticmethod
    def key(components: dict[str, str]) -> str:
        return _digest(components)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, components: dict[str, str]) -> Any:
        path = self._path(self.key(components))
        try:
            return json.loads(path.read_text(encoding="utf-8"))["value"]
        except (OSError, ValueError, KeyError):
            return None

    def put(self, components: dict[str, str], value: Any, meta: dict[str, Any] | None = None) -> None:
        key = self.key(components)
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"key": key, "components": components, "meta": scrub(meta or {}), "value": value}
        # the one redaction step: a key the model echoed into its response is not stored
        blob = redact_json(json.dumps(data, ensure_ascii=False).encode("utf-8"))
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def explain_miss(self, components: dict[str, str]) -> str:
        """Which components differ from the closest stored entry (most components equal)."""
        best: tuple[int, dict[str, str]] | None = None
        for path in self.folder.glob("*/*.json") if self.folder.is_dir() else ():
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))["components"]
            except (OSError, ValueError, KeyError):
                continue
            same = sum(stored.get(n) == components[n] for n in COMPONENTS)
            if best is None or same > best[0]:
                best = (same, stored)
        if best is None:
            return f"the cache at {self.folder} is empty"
        differ = [n for n in COMPONENTS if best[1].get(n) != components[n]]
        return f"closest stored entry differs in: {', '.join(differ)}"

    def call(self, components: dict[str, str], fn: Callable[[], Any], meta: dict[str, Any] | None = None) -> tuple[Any, bool]:
        """(value, hit). Applies the mode; ``fn`` must return a JSON-serialisable value."""
        if self.mode in ("read", "readwrite", "strict"):
            value = self.get(components)
            if value is not None:
                with self._lock:
                    self.hits += 1
                return value, True
            if self.mode == "strict":
                raise CacheMiss(f"--model-cache strict: no cached response for this call; {self.explain_miss(components)}")
        value = fn()
        with self._lock:
            self.calls += 1
        if self.mode in ("write", "readwrite"):
            self.put(components, value, meta)
        return value, False


_VOLATILE_MESSAGE_FIELDS = ("id", "response_metadata", "usage_metadata")


def _message_key(serialized: dict[str, Any]) -> dict[str, Any]:
    """A message as it bears on the answer: without the random ids LangGraph stamps on
    messages and without response metadata (timings, token counts, cache markers)."""
    data = {k: v for k, v in (serialized.get("data") or {}).items() if k not in _VOLATILE_MESSAGE_FIELDS}
    return {"type": serialized.get("type"), "data": data}


def _endpoint(model: Any) -> str | None:
    """Where a chat model sends its calls (part of the cache key: another server, another answer)."""
    for attr in ("openai_api_base", "base_url", "anthropic_api_url", "api_url"):
        value = getattr(model, attr, None)
        if value:
            return str(value)
    return None


def wrap_chat_model(model: Any, cache: ModelCache, agent: str = "langgraph") -> Any:
    """A LangChain chat model that answers each call from ``cache`` (components: the model's
    identifying parameters, the messages, the bound tool schemas) or from ``model``."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import message_to_dict, messages_from_dict
    from langchain_core.outputs import ChatGeneration, ChatResult

    class CachedChatModel(BaseChatModel):
        inner: Any
        model_cache: Any
        agent_name: str = agent

        @property
        def _llm_type(self) -> str:
            return f"cached-{getattr(self.inner, '_llm_type', 'chat')}"

        @property
        def _identifying_params(self) -> dict[str, Any]:
            return dict(getattr(self.inner, "_identifying_params", {}) or {})

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            bound = self.inner.bind_tools(tools, **kwargs)
            return self.bind(**getattr(bound, "kwargs", {}))

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            params = {**self._identifying_params, **{k: v for k, v in kwargs.items() if k != "tools"}, "stop": stop,
                      "endpoint": _endpoint(self.inner)}
            model_name = params.get("model") or params.get("model_name")
            comps = self.model_cache.components(
                agent=self.agent_name, model=model_name, params=params,
                messages=[_message_key(message_to_dict(m)) for m in messages], tools=kwargs.get("tools"))

            def call() -> Any:
                result = self.inner._generate(messages, stop=stop, **kwargs)
                return [{"message": message_to_dict(g.message), "generation_info": g.generation_info}
                        for g in result.generations]

            value, hit = self.model_cache.call(comps, call, meta={"agent": self.agent_name, "model": model_name})
            generations = [
                ChatGeneration(message=messages_from_dict([g["message"]])[0], generation_info=g["generation_info"])
                for g in value
            ]
            if hit:  # a cached answer costs nothing: keep its original usage apart, count 0
                for g in generations:
                    meta = dict(g.message.response_metadata or {})
                    meta["groundeval_cache"] = "hit"
                    meta["groundeval_cached_usage"] = getattr(g.message, "usage_metadata", None)
                    g.message.response_metadata = meta
                    if hasattr(g.message, "usage_metadata"):
                        g.message.usage_metadata = None
            return ChatResult(generations=generations)

    return CachedChatModel(inner=model, model_cache=cache)
