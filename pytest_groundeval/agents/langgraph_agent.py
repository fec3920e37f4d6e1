"""A LangGraph tool-calling agent (``--agent=langgraph``).

The graph is LangChain's current agent loop, ``langchain.agents.create_agent`` (model node
⇄ tool node). The task supplies what the agent needs for a case: its system prompt, the
tools for that case (e.g. HealthChain FHIR tools over the site catalog, or over that
patient's bundle only), and the tool whose last result answers when the agent ends
without one. The model comes from a string through
``langchain.chat_models.init_chat_model`` (``anthropic:claude-opus-4-8``,
``openai:NAME`` with ``--model-base-url`` for an OpenAI-compatible local server: vLLM,
Ollama, llama.cpp), or is passed in already built (any ``BaseChatModel``; the tests use a
scripted one).

This module imports langchain / langgraph; it is itself imported only when
``--agent=langgraph`` is chosen.

Final-answer rule (what the task parses)
----------------------------------------
1. If the agent's final AI message contains a JSON object, that message is the answer:
   ``AgentOutput.text`` is its text and ``structured`` is ``None``, so the task parses the
   text exactly as it would a single-call model's answer (more than one object there is
   the task's parse error). What the agent *says* it answers is what is scored, even
   when it differs from what the tools built: a resource the agent edited after
   validating is judged as edited.
2. Otherwise (the agent ended with prose, or nothing), the answer falls back to the
   ``resource`` of the last successful call of the task's answer tool (if it names one):
   ``structured`` is that dict and ``text`` its JSON.
3. With neither, ``text`` is the final message's text and ``structured`` is ``None``: the
   task records a parse failure (a failed case, not an error).

``AgentOutput.extra["answer_source"]`` says which rule applied (``final_message``,
``last_tool_resource`` or ``none``).

Runaway loops
-------------
* ``recursion_limit`` (LangGraph supersteps: each model call and each tool round is one;
  default 16, i.e. at most 8 model calls) is passed to the graph; a ``GraphRecursionError``
  becomes ``RuntimeError("langgraph agent exceeded the recursion limit of N steps ...")``.
* ``timeout`` bounds each model request (passed to the chat model), and the chat model
  gets ``max_retries=0``: the harness retries (``--agent-retries``), the SDK does not.
* ``run_timeout`` (default ``5 * timeout``) bounds the whole run by the wall clock: the
  graph runs in a worker thread; if it has not finished in time the run raises
  ``TimeoutError`` and the worker stops after its current step (a request in flight
  still ends within ``timeout``).
* The harness's deadline for the attempt (``--agent-timeout``, ``--case-deadline``; read
  with :func:`pytest_groundeval.run.calls.attempt_deadline`) bounds the run the same way, and
  is passed down into the graph: a callback refuses to start any model call once it has
  passed, or once the harness stopped waiting, so a run the harness gave up on stops
  paying (at most the request already in flight completes).

The harness records any exception from an agent as an ``error`` outcome with its message.
The exception carries the partial tool-call transcript as ``exc.transcript``.

Transcripts
-----------
``run_case`` takes the task's tools from :func:`pytest_groundeval.run.toolcalls.harness_tools`, so
the harness itself records every tool call and result of the case (the record's
``transcript``: the evidence ``grounded`` is judged from). ``AgentOutput.transcript`` is this
agent's own account of the conversation (:func:`transcript_of`: model turns and tool
messages), stored as ``agent_reported``: shown in reports and LangSmith, never evidence.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
import time
from typing import Any

from pytest_groundeval.run.calls import CallTimeout, attempt_deadline, attempt_tally, report_spent
from pytest_groundeval.model import AgentOutput
from pytest_groundeval.run.toolcalls import jsonable, result_value
from pytest_groundeval.agents.spec import DEFAULT_MAX_TOKENS, AgentSpec

DEFAULT_MODEL = "anthropic:claude-opus-4-8"
DEFAULT_RECURSION_LIMIT = 16
MAX_CACHED_GRAPHS = 8

# the name of the cap on generated tokens where a provider's chat model does not call it max_tokens
MAX_TOKENS_KEY = {"ollama": "num_predict", "google_genai": "max_output_tokens"}

GENERIC_SYSTEM_PROMPT = """You are a careful clinical-data assistant. Use the tools provided, if \
any, when they help. Answer exactly in the format the user's request asks for."""


def _provider_and_name(model: str, base_url: str | None) -> tuple[str | None, str]:
    """Split ``provider:name``; infer the provider when there is no known prefix."""
    try:
        from langchain.chat_models.base import _BUILTIN_PROVIDERS as known  # type: ignore[attr-defined]
    except Exception:  # private name; fall back to the providers groundeval documents
        known = {"anthropic", "openai", "ollama", "azure_openai", "google_genai", "bedrock"}
    prefix, sep, rest = model.partition(":")
    if sep and prefix in known:
        return prefix, rest
    if base_url:
        return "openai", model  # an OpenAI-compatible server; model names may contain ':'
    if model.startswith("claude"):
        return "anthropic", model
    return None, model  # let init_chat_model infer (gpt-*, o1, ...)


def _text_of(message: Any) -> str:
    """A message's text, whether ``content`` is a string or a list of content blocks."""
    text = getattr(message, "text", None)
    if isinstance(text, str):  # a property in langchain-core 1.x (a callable str subclass)
        return str(text)
    if callable(text):  # langchain-core < 1.0 had .text()
        text = text()
        if isinstance(text, str):
            return text
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def _contains_json_object(text: str) -> bool:
    from pytest_groundeval.tasks.jsontext import UnreadableJson, json_objects

    try:
        return bool(json_objects(text))
    except UnreadableJson:
        return False  # no answer object to take from it


def transcript_of(messages: list[Any]) -> list[dict[str, Any]]:
    """The AI and tool messages of a run as JSON-serialisable dicts (prompts left out)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        kind = getattr(m, "type", None)
        if kind == "ai":
            entry: dict[str, Any] = {
                "type": "ai",
                "content": _text_of(m),
                "tool_calls": [
                    {"name": c.get("name"), "args": jsonable(c.get("args")), "id": c.get("id")}
                    for c in (getattr(m, "tool_calls", None) or [])
                ],
            }
            invalid = getattr(m, "invalid_tool_calls", None) or []
            if invalid:
                entry["invalid_tool_calls"] = [
                    {"name": c.get("name"), "args": c.get("args"), "error": c.get("error")} for c in invalid
                ]
            usage = getattr(m, "usage_metadata", None)
            if usage:
                entry["usage"] = {k: usage.get(k) for k in ("input_tokens", "output_tokens") if k in usage}
            out.append(entry)
        elif kind == "tool":
            entry = {
                "type": "tool",
                "tool": getattr(m, "name", None),
                "tool_call_id": getattr(m, "tool_call_id", None),
                "result": result_value(m.content),
            }
            if getattr(m, "status", "success") != "success":
                entry["status"] = m.status
            out.append(entry)
    return out


def _deadline_guard(at: float, stop: threading.Event) -> Any:
    """A LangChain callback that refuses to start a model call after ``at`` (monotonic) or
    once ``stop`` is set: the deadline, passed down into the graph."""
    from langchain_core.callbacks import BaseCallbackHandler

    class DeadlineGuard(BaseCallbackHandler):
        raise_error = True  # LangChain re-raises a handler's error only when asked to

        def _check(self) -> None:
            if stop.is_set() or time.monotonic() >= at:
                raise CallTimeout("the attempt's deadline has passed: no further model call is started")

        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            self._check()

        def on_llm_start(self, serialized: Any, prompts: Any, **kwargs: Any) -> None:
            self._check()

    return DeadlineGuard()


def _cache_middleware(on: bool) -> list[Any]:
    """langchain-anthropic's prompt caching (``cache_control`` on the system prompt, the last
    tool and the conversation so far), for an Anthropic model with caching on."""
    if not on:
        return []
    from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware

    return [AnthropicPromptCachingMiddleware(unsupported_model_behavior="ignore")]


def _usage(messages: list[Any]) -> dict[str, int] | None:
    """The AI messages' usage summed, in Anthropic's convention: LangChain's ``input_tokens``
    include the prompt cache's reads and writes (``input_token_details``), counted apart here."""
    total = {"input_tokens": 0, "output_tokens": 0}
    seen = False
    for m in messages:
        usage = getattr(m, "usage_metadata", None) if getattr(m, "type", None) == "ai" else None
        if usage:
            seen = True
            details = usage.get("input_token_details") or {}
            read, wrote = _cached(details, "cache_read"), _cached(details, "cache_creation")
            total["input_tokens"] += max(0, int(usage.get("input_tokens") or 0) - read - wrote)
            total["output_tokens"] += int(usage.get("output_tokens") or 0)
            if read or wrote:
                total["cache_read_input_tokens"] = total.get("cache_read_input_tokens", 0) + read
                total["cache_creation_input_tokens"] = total.get("cache_creation_input_tokens", 0) + wrote
    return total if seen else None


def _cached(details: dict[str, Any], kind: str) -> int:
    """``input_token_details``' count of ``kind`` (``cache_read`` / ``cache_creation``), under
    its own name or a service tier's: langchain-openai names a flex or priority response's
    ``flex_cache_read``, ``priority_cache_read``."""
    return sum(int(v or 0) for k, v in details.items() if k == kind or k.endswith(f"_{kind}"))


def _last_tool_resource(messages: list[Any], tool: str | None) -> dict[str, Any] | None:
    """The ``resource`` of the last successful result of ``tool`` (the task's answer tool)."""
    found = None
    if not tool:
        return None
    for m in messages:
        if getattr(m, "type", None) == "tool" and getattr(m, "name", None) == tool:
            result = result_value(m.content)
            if isinstance(result, dict) and isinstance(result.get("resource"), dict):
                found = result["resource"]
    return found


class LangGraphAgent:
    """``LangGraphAgent(model=None, *, base_url=None, timeout=120.0, run_timeout=None,
    recursion_limit=16, max_retries=0, system_prompt=None, tools=None, answer_tool=None,
    model_kwargs=None, cache=None, max_tokens=4096, tool_choice="auto")``

    ``model``: a ``provider:name`` string (default ``anthropic:claude-opus-4-8``) or an
    already-built LangChain chat model. ``base_url``: an OpenAI-compatible endpoint (a
    model string without a known provider prefix is then treated as ``openai:``; without
    ``OPENAI_API_KEY`` a placeholder key is sent, which local servers ignore).
    ``system_prompt`` / ``tools`` / ``answer_tool``: used by ``run(prompt)``; ``run_case``
    takes them from the task. ``max_tokens``: the cap on each model call's output
    (``--model-max-tokens``); ``tool_choice``: sent to an OpenAI-compatible server with bound
    tools (None: none; ``openai_wire.py``). See the module docstring for the final-answer rule
    and the limits.
    """

    name = "langgraph"
    default_model = DEFAULT_MODEL

    def __init__(
        self,
        model: Any = None,
        *,
        base_url: str | None = None,
        timeout: float = 120.0,
        run_timeout: float | None = None,
        recursion_limit: int = DEFAULT_RECURSION_LIMIT,
        max_retries: int = 0,
        system_prompt: str | None = None,
        tools: list[Any] | None = None,
        answer_tool: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        cache: Any = None,
        prompt_cache: bool = False,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        tool_choice: str | None = "auto",
    ) -> None:
        if recursion_limit < 2:
            raise ValueError("recursion_limit must be at least 2 (one model call, one tool round)")
        self.timeout = float(timeout)
        self.run_timeout = float(run_timeout) if run_timeout is not None else 5 * self.timeout
        self.recursion_limit = int(recursion_limit)
        self.base_url = base_url
        self.system_prompt = system_prompt
        self.tools = list(tools or [])
        self.answer_tool = answer_tool
        self.max_tokens = max_tokens
        if model is None or isinstance(model, str):
            self.model = model or DEFAULT_MODEL
            self.chat_model = self._init_model(self.model, base_url, self.timeout, max_retries,
                                               dict(model_kwargs or {}), max_tokens, tool_choice)
        else:
            self.chat_model = model
            self.model = str(getattr(model, "model_name", None) or getattr(model, "model", None)
                             or type(model).__name__)
        if cache is not None:  # every model call inside the graph goes through the cache
            from pytest_groundeval.run.cache import wrap_chat_model

            self.chat_model = wrap_chat_model(self.chat_model, cache, agent=self.name)
        self._graphs: dict[tuple[str, int], tuple[list[Any], Any]] = {}
        self._lock = threading.Lock()
        # Anthropic prompt caching (--no-prompt-cache: off): the system prompt, tools and conversation
        self.prompt_cache = prompt_cache and isinstance(self.model, str) and \
            _provider_and_name(self.model, base_url)[0] == "anthropic"

    @classmethod
    def from_spec(cls, spec: AgentSpec) -> "LangGraphAgent":
        from pytest_groundeval.agents.spec import model_cache

        return cls(model=spec.model or DEFAULT_MODEL, base_url=spec.base_url, timeout=spec.timeout,
                   cache=model_cache(spec), prompt_cache=spec.prompt_cache, **spec.model_settings())

    @staticmethod
    def _init_model(model: str, base_url: str | None, timeout: float, max_retries: int,
                    kwargs: dict[str, Any], max_tokens: int | None = None, tool_choice: str | None = "auto") -> Any:
        from langchain.chat_models import init_chat_model

        provider, name = _provider_and_name(model, base_url)
        # the harness owns retries and time (--agent-retries, --agent-timeout): the SDK client
        # gets the attempt's timeout and no retries of its own, so every request is an attempt
        # the harness counts, and none starts behind it after it gave up
        kwargs.setdefault("timeout", timeout)
        kwargs.setdefault("max_retries", max_retries)
        if base_url:
            kwargs.setdefault("base_url", base_url)
        if provider == "openai" and not os.environ.get("OPENAI_API_KEY") and "api_key" not in kwargs:
            if not base_url:
                raise RuntimeError(
                    f"--model {model} needs OPENAI_API_KEY in the environment, or --model-base-url "
                    "pointing at an OpenAI-compatible server (vLLM, Ollama, llama.cpp)"
                )
            kwargs["api_key"] = "not-needed"  # local OpenAI-compatible servers ignore it
        if max_tokens is not None:
            kwargs.setdefault(MAX_TOKENS_KEY.get(provider or "", "max_tokens"), max_tokens)
        if provider == "openai" and "http_client" not in kwargs:  # what local servers need (openai_wire.py)
            from pytest_groundeval.agents.openai_wire import http_client

            kwargs["http_client"] = http_client(tool_choice=tool_choice, local=bool(base_url))
        return init_chat_model(name, model_provider=provider, **kwargs)

    def prepare(self) -> None:
        """Before the harness's timer starts (runner): import the agent loop, so the first
        attempt's time is the model's and a timeout never interrupts the import."""
        import langchain.agents  # noqa: F401

    # ------------------------------------------------------------------ graph

    def graph(self, system_prompt: str | None = None, tools: list[Any] | None = None) -> Any:
        """The compiled agent graph for a system prompt and a tool list (reused while the
        same list object is asked for again: a task's shared tools; per-case tools make
        a graph per case)."""
        prompt = system_prompt or self.system_prompt or GENERIC_SYSTEM_PROMPT
        tools = self.tools if tools is None else tools
        key = (prompt, id(tools))
        with self._lock:
            hit = self._graphs.get(key)
            if hit is not None and hit[0] is tools:
                return hit[1]
            from langchain.agents import create_agent

            graph = create_agent(self.chat_model, tools, system_prompt=prompt, name="groundeval-langgraph",
                                 middleware=_cache_middleware(self.prompt_cache))
            if len(self._graphs) >= MAX_CACHED_GRAPHS:
                self._graphs.pop(next(iter(self._graphs)))
            self._graphs[key] = (tools, graph)  # the list is kept, so its id is not reused
            return graph

    def _stream(self, graph: Any, prompt: str) -> list[Any]:
        """Run the graph in a worker thread under the wall-clock limit and the harness's
        deadline; return its messages."""
        from langchain_core.messages import HumanMessage
        from langgraph.errors import GraphRecursionError

        box: dict[str, Any] = {"messages": [], "error": None}
        stop = threading.Event()
        started = time.monotonic()
        deadline = attempt_deadline()
        limit = self.run_timeout if deadline is None else min(self.run_timeout, deadline - started)
        guard = _deadline_guard(started + limit, stop)
        tally = attempt_tally()  # what this attempt has spent, kept current for the harness

        def work() -> None:
            try:
                for state in graph.stream(
                    {"messages": [HumanMessage(content=prompt)]},
                    {"recursion_limit": self.recursion_limit, "callbacks": [guard]},
                    stream_mode="values",
                ):
                    if isinstance(state, dict) and "messages" in state:
                        box["messages"] = list(state["messages"])
                        if tally is not None:  # kept current: the harness may stop waiting
                            report_spent(tally, _usage(box["messages"]), transcript_of(box["messages"]))
                    if stop.is_set():
                        return
            except BaseException as exc:  # re-raised in the caller's thread
                box["error"] = exc

        ctx = contextvars.copy_context()  # keep tracing (LangSmith) context in the worker
        worker = threading.Thread(target=ctx.run, args=(work,), name="groundeval-langgraph", daemon=True)
        worker.start()
        try:
            worker.join(max(0.0, limit))
        except BaseException as interrupted:  # the harness's timeout interrupted the wait (SIGALRM)
            stop.set()  # no further model call starts
            interrupted.transcript = transcript_of(box["messages"])  # type: ignore[attr-defined]
            interrupted.usage = _usage(box["messages"])  # type: ignore[attr-defined]
            raise
        if worker.is_alive():
            stop.set()  # no further model call starts
        if worker.is_alive():
            what = ("the wall-clock limit of {:g} s".format(self.run_timeout) if limit >= self.run_timeout
                    else "the harness's deadline ({:g} s)".format(limit))
            # the harness's deadline is the harness's timeout (CallTimeout, a TimeoutError), whichever
            # of this wait and the harness's own ends first
            kind = TimeoutError if limit >= self.run_timeout else CallTimeout
            exc = kind(
                f"langgraph agent exceeded {what} "
                f"after {sum(1 for m in box['messages'] if getattr(m, 'type', None) == 'ai')} model calls"
            )
            exc.transcript = transcript_of(box["messages"])  # type: ignore[attr-defined]
            exc.usage = _usage(box["messages"])  # type: ignore[attr-defined]
            raise exc
        error = box["error"]
        if isinstance(error, GraphRecursionError):
            exc2 = RuntimeError(
                f"langgraph agent exceeded the recursion limit of {self.recursion_limit} steps "
                "(each model call and each tool round is a step) without a final answer"
            )
            exc2.transcript = transcript_of(box["messages"])  # type: ignore[attr-defined]
            exc2.usage = _usage(box["messages"])  # type: ignore[attr-defined]
            raise exc2 from error
        if error is not None:
            if getattr(error, "usage", None) is None:
                try:  # what the run spent before failing counts toward the budget
                    error.usage = _usage(box["messages"])
                except AttributeError:
                    pass
            raise error
        return box["messages"]

    # ------------------------------------------------------------------ runs

    def run_case(self, task: Any, prompt: str, inputs: dict[str, Any]) -> AgentOutput:
        """Run one case with what the task supplies: its system prompt for tool-using agents
        (else this agent's own, else a generic one), its tools for this case's inputs, its
        prompt for tool-using agents (``task.agent_prompt(prompt, inputs)``, if it has one;
        else the case's prompt), and the tool whose last result answers when the agent
        ends without one. The tools come wrapped by the harness (``toolcalls.harness_tools``),
        which records every call."""
        from pytest_groundeval.run.toolcalls import harness_tools

        system = getattr(task, "agent_system_prompt", None) or self.system_prompt
        # the task's tools as the harness hands them out: every call is recorded in the case's
        # observed log (toolcalls.py), the evidence grounded is judged from
        tools = harness_tools(task, inputs) if hasattr(task, "agent_tools") else self.tools
        if hasattr(task, "agent_prompt"):  # a task may word the request for tool use
            prompt = task.agent_prompt(prompt, inputs)
        return self._run(prompt, system, tools, getattr(task, "answer_tool", None))

    def run(self, prompt: str) -> AgentOutput:
        """Prompt only, with this agent's own system prompt and tools."""
        return self._run(prompt, self.system_prompt, self.tools, self.answer_tool)

    def _run(self, prompt: str, system_prompt: str | None, tools: list[Any], answer_tool: str | None) -> AgentOutput:
        messages = self._stream(self.graph(system_prompt, tools), prompt)
        ai = [m for m in messages if getattr(m, "type", None) == "ai"]
        final_text = _text_of(ai[-1]) if ai else ""
        resource = None
        if _contains_json_object(final_text):
            text, source = final_text, "final_message"
        else:
            resource = _last_tool_resource(messages, answer_tool)
            if resource is not None:
                text, source = json.dumps(resource), "last_tool_resource"
            else:
                text, source = final_text, "none"
        transcript = transcript_of(messages)
        served = None
        if ai:
            meta = getattr(ai[-1], "response_metadata", None) or {}
            served = meta.get("model_name") or meta.get("model")
        return AgentOutput(
            text=text,
            usage=_usage(messages),
            structured=resource,
            transcript=transcript,
            steps=len(ai),
            model=served or self.model,
            extra={
                "answer_source": source,
                "tool_calls": sum(len(e["tool_calls"]) for e in transcript if e["type"] == "ai"),
                "recursion_limit": self.recursion_limit,
                "warnings": self._cap_warnings(ai),
            },
        )

    def _cap_warnings(self, ai: list[Any]) -> list[str]:
        """A warning for the case when a model call stopped at the max_tokens cap (OpenAI's
        ``finish_reason: length``, Anthropic's ``stop_reason: max_tokens``, or, as a server may
        report a tool call cut there as a tool call all the same, llama-cpp-python's, a call
        whose output used the whole cap): a looping model."""
        cut = sum(1 for m in ai if self._capped(m))
        if not cut:
            return []
        return [f"{cut} of {len(ai)} model call(s) stopped at the max_tokens cap ({self.max_tokens}, "
                "--model-max-tokens): the answer may be cut"]


    def _capped(self, message: Any) -> bool:
        meta = getattr(message, "response_metadata", None) or {}
        if meta.get("finish_reason") == "length" or meta.get("stop_reason") == "max_tokens":
            return True
        used = (getattr(message, "usage_metadata", None) or {}).get("output_tokens")
        return isinstance(self.max_tokens, int) and isinstance(used, int) and used >= self.max_tokens > 0


class ChatAgent(LangGraphAgent):
    """``--agent=chat``: the single-call twin of ``langgraph``: the same model (any
    ``init_chat_model`` provider, ``--model-base-url`` for an OpenAI-compatible server), one
    call with the task's single-call prompt (for extraction, the bundle in the prompt), no
    tools. Run it beside ``--agent=langgraph`` on the same ``--model`` for a with/without-tools
    comparison (``groundeval compare``)."""

    name = "chat"

    NO_TOOLS: list[Any] = []  # one list: one compiled graph for every case
    batches: Any = None  # --batch on an OpenAI model: the session's batches (run/batch.py)

    def run_case(self, task: Any, prompt: str, inputs: dict[str, Any]) -> AgentOutput:
        if self.batches is not None:
            return self._batched(prompt)
        return self._run(prompt, GENERIC_SYSTEM_PROMPT, self.NO_TOOLS, None)

    # -- --batch: OpenAI's Batch API answers the same request --
    @property
    def batchable(self) -> bool:
        """An OpenAI chat model (``openai:NAME``, or any model at ``--model-base-url``)."""
        return isinstance(self.model, str) and _provider_and_name(self.model, self.base_url)[0] == "openai"

    def request(self, prompt: str) -> dict[str, Any]:
        """The Chat Completions body of one case: the system prompt and the prompt."""
        body: dict[str, Any] = {"model": _provider_and_name(self.model, self.base_url)[1], "messages": [
            {"role": "system", "content": GENERIC_SYSTEM_PROMPT}, {"role": "user", "content": prompt}]}
        limit = getattr(self.chat_model, "max_tokens", None)
        if isinstance(limit, int) and not isinstance(limit, bool):
            body["max_tokens"] = limit
        return body

    def _batched(self, prompt: str) -> AgentOutput:
        from pytest_groundeval.run.batch import batch_call

        body = batch_call(self.batches, self.request(prompt))
        reply = self._reply(body)
        usage = _usage([reply])  # as a direct call's: OpenAI's cached input tokens counted apart
        return AgentOutput(text=_text_of(reply), model=body.get("model") or self.model,
                           usage=None if usage is None else {**usage, "model_calls": 1, "batch_calls": 1})

    def _reply(self, body: dict[str, Any]) -> Any:
        """A batch result's Chat Completions body as the AI message langchain-openai makes of a
        direct call's response (the same conversion: its ``usage_metadata`` reads OpenAI's
        ``prompt_tokens_details.cached_tokens`` as ``cache_read``)."""
        model = getattr(self.chat_model, "inner", self.chat_model)  # under the model-call cache, the model it wraps
        return model._create_chat_result(body).generations[0].message


__all__ = ["DEFAULT_MODEL", "GENERIC_SYSTEM_PROMPT", "ChatAgent", "LangGraphAgent", "transcript_of"]
