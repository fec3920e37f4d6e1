"""What the harness saw: every call of the tools it handed an agent, in order, per case.

``grounded`` (grounding.py) is judged from this log and from nothing an agent says about
itself. The runner opens one :class:`ToolLog` per attempt (:func:`observe`, around the agent
call); :func:`harness_tools` is where the harness gives an agent a task's tools for one case
(``task.agent_tools(inputs)``), each wrapped in an :class:`ObservedTool` bound to that log.
The LangGraph agent gets its tools there; so can any ``module:Class`` agent (call
``pytest_groundeval.run.toolcalls.harness_tools(task, inputs)`` in its ``run_case``). An agent
that never asks is given no harness tools: its case's grounded is *not applicable*.

Each observed call is one entry (:class:`pytest_groundeval.model.ToolCall`):

* ``seq``: the call's number in the order calls started (1, 2, ...);
* ``started`` / ``ended``: ticks of one clock per log (every start and every end takes
  the next tick), so "received before" is exact even when calls overlap;
* ``step``: the agent framework's step when it says (LangGraph's superstep,
  ``langgraph_step`` in the run config's metadata): calls a model issued together in one
  message share a step and cannot have seen each other's results;
* ``args`` / ``result``: what the tool got and returned (a LangChain ``ToolMessage``'s
  JSON content read back as the value the tool returned);
* ``status``: ``ok``; ``error``: an error value, marked where the result is produced,
  by structure, never by its wording: LangChain's own marker (``ToolMessage.status ==
  "error"``: the tool's argument validation failed, or it raised a handled
  ``ToolException``) or the tools' documented error value (a JSON object with a top-level
  ``"error"`` key, hc_tools' ``{"error": ...}``, or ``"ok": false``, HealthChain
  ``FHIRToolkit``'s); ``raised``: the tool raised; ``unfinished``: no result had come back
  when the attempt ended. Only ``ok`` results are ever evidence.

A log closes when its attempt ends: calls made after that (a graph still running on a
thread the harness stopped waiting for) are not recorded. This module holds no scoring.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import threading
from typing import Any, Iterator

STATUSES = ("ok", "error", "raised", "unfinished")

_CURRENT: contextvars.ContextVar["ToolLog | None"] = contextvars.ContextVar("groundeval_tool_log", default=None)


def is_error_value(result: Any) -> bool:
    """The tools' documented error value: a JSON object with a top-level ``error`` (hc_tools'
    ``{"error": ...}``, also beside other fields as in a failed lookup) or ``"ok": false``
    (HealthChain's FHIRToolkit)."""
    return isinstance(result, dict) and (result.get("error") not in (None, "", False) or result.get("ok") is False)


def jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str))


def result_value(content: Any) -> Any:
    """A tool's output as the value it returned: a ToolMessage's (or a raw) string content
    read back as JSON when it is JSON (LangChain serialises a dict result with json.dumps)."""
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
            and content[0].get("type") == "text":
        return result_value(content[0].get("text", ""))
    return jsonable(content)


class ToolLog:
    """The observed tool calls of one attempt of one case (thread-safe)."""

    def __init__(self, on_offer: Any = None) -> None:
        self._on_offer = on_offer  # told the tools when they are first given (an xdist worker's ledger)
        self._lock = threading.Lock()
        self._tick = 0
        self._calls: list[dict[str, Any]] = []
        self._offered: list[str] = []
        self._refused: list[dict[str, Any]] = []
        self._refused_more = 0
        self.closed = False

    def offer(self, names: list[str]) -> None:
        """The harness gave the agent these tools (it is a tool-using agent from here on)."""
        with self._lock:
            first = not self._offered
            self._offered.extend(n for n in names if n not in self._offered)
            offered = list(self._offered)
        if first and offered and self._on_offer is not None:
            self._on_offer(offered)

    @property
    def offered(self) -> list[str] | None:
        """The tools given to the agent (None: it was given none)."""
        with self._lock:
            return list(self._offered) if self._offered else None

    MAX_REFUSED = 20  # refused connections kept per attempt (a flood is counted, not kept)

    def refuse(self, connection: dict[str, Any]) -> None:
        """A connection to the case's tools refused unanswered (``integrations/mcp/host.py``:
        ``{"pid", "command", "reason"}``, model.RefusedConnection); none after the log closed."""
        with self._lock:
            if self.closed:
                return
            if len(self._refused) < self.MAX_REFUSED:
                self._refused.append(dict(connection))
            else:
                self._refused_more += 1

    @property
    def refused(self) -> list[dict[str, Any]] | None:
        """The refused connections (None: none); past :attr:`MAX_REFUSED`, one entry counts the rest."""
        with self._lock:
            kept = [dict(r) for r in self._refused]
            if self._refused_more:
                kept.append({"pid": None, "command": None,
                             "reason": f"{self._refused_more} more refused connection(s), not kept"})
            return kept or None

    def begin(self, tool: str, args: Any, step: int | None) -> dict[str, Any] | None:
        with self._lock:
            if self.closed:
                return None
            self._tick += 1
            entry = {"seq": len(self._calls) + 1, "tool": tool, "args": jsonable(args), "result": None,
                     "status": "unfinished", "step": step, "started": self._tick, "ended": None}
            self._calls.append(entry)
            return entry

    def end(self, entry: dict[str, Any] | None, result: Any, status: str) -> None:
        with self._lock:
            if entry is None or self.closed:
                return
            self._tick += 1
            entry.update(result=jsonable(result), status=status, ended=self._tick)

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def calls(self) -> list[dict[str, Any]]:
        """The calls so far, in the order they started (copies)."""
        with self._lock:
            return [dict(c) for c in self._calls]

    def transcript(self) -> list[dict[str, Any]] | None:
        """The case's transcript: the observed calls; None when no tool was given (``[]``:
        tools were given and none was called)."""
        return self.calls() if self.offered is not None else None


@contextlib.contextmanager
def observe(on_offer: Any = None) -> Iterator[ToolLog]:
    """A fresh log for one attempt, current in this context (and in contexts copied from
    it: the LangGraph agent's worker thread, LangChain's tool executor); closed at the end.
    ``on_offer(names)``: called once, when the agent is first given tools."""
    log = ToolLog(on_offer)
    token = _CURRENT.set(log)
    try:
        yield log
    finally:
        log.close()
        _CURRENT.reset(token)


def current() -> ToolLog | None:
    return _CURRENT.get()


def _step(config: Any) -> int | None:
    meta = (config or {}).get("metadata") if isinstance(config, dict) else None
    step = meta.get("langgraph_step") if isinstance(meta, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _args(value: Any) -> Any:
    if isinstance(value, dict) and value.get("type") == "tool_call" and "args" in value:
        return value.get("args")
    return value


def _outcome(output: Any) -> tuple[Any, str]:
    from langchain_core.messages import ToolMessage

    if isinstance(output, ToolMessage):
        value = result_value(output.content)
        return value, "error" if output.status == "error" or is_error_value(value) else "ok"
    value = result_value(output)
    return value, "error" if is_error_value(value) else "ok"


@functools.lru_cache(maxsize=4)
def _observed_class(BaseTool: type) -> type:
    """The wrapper class over this ``BaseTool`` (one per import of langchain_core: a process
    that imports it again, as pytester's in-process runs do, gets a class of the new one)."""

    class ObservedTool(BaseTool):  # type: ignore[misc,valid-type]
        """A harness tool: each call and its result go into the case's observed log."""

        inner: Any  # the task's BaseTool (not type-checked: a tool of any LangChain import serves)
        log: Any = None

        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            entry = self.log.begin(self.name, _args(input), _step(config))
            try:
                output = self.inner.invoke(input, config, **kwargs)
            except BaseException as exc:
                self.log.end(entry, {"raised": f"{type(exc).__name__}: {exc}"}, "raised")
                raise
            self.log.end(entry, *_outcome(output))
            return output

        async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            entry = self.log.begin(self.name, _args(input), _step(config))
            try:
                output = await self.inner.ainvoke(input, config, **kwargs)
            except BaseException as exc:
                self.log.end(entry, {"raised": f"{type(exc).__name__}: {exc}"}, "raised")
                raise
            self.log.end(entry, *_outcome(output))
            return output

        def _run(self, *args: Any, **kwargs: Any) -> Any:  # every call goes through invoke
            raise NotImplementedError("ObservedTool is called through invoke / ainvoke")

    return ObservedTool


def observed_tool(tool: Any, log: ToolLog) -> Any:
    """``tool`` (a LangChain ``BaseTool``) as one that records each call into ``log``: the
    same name, description and argument schema (what the model sees does not change), and
    the original tool's own validation, error handling and callbacks run as before."""
    from langchain_core.tools import BaseTool

    return _observed_class(BaseTool)(name=tool.name, description=tool.description, args_schema=tool.args_schema,
                                     return_direct=tool.return_direct, response_format=tool.response_format,
                                     inner=tool, log=log)


def harness_tools(task: Any, inputs: dict[str, Any]) -> list[Any]:
    """The task's tools for one case, as the harness hands them to an agent: each wrapped so
    every call is recorded in the current attempt's log. Outside an attempt (no log: a
    direct call, not a case) the task's tools themselves."""
    tools = list(task.agent_tools(inputs)) if hasattr(task, "agent_tools") else []
    log = current()
    if log is None or not tools:
        return tools
    log.offer([t.name for t in tools])
    return [observed_tool(t, log) for t in tools]


__all__ = ["STATUSES", "ToolLog", "current", "harness_tools", "is_error_value", "observe", "observed_tool",
           "result_value"]
