"""The agent host's server (the keeper's child, ``agents/host_main.py``): the user's
``module:Class`` agent, answering the harness's ``run`` requests on one socket.

It is given, per case, the prompt, the inputs and a stand-in for the task (:class:`TaskView`:
its name, system prompt, answer tool, the prompt worded for tools, and its tools as proxies
whose calls run in the harness, where they are observed); never the case, its truth, the
scorer or anything the harness writes. A request runs on the main thread when it is free,
else on a thread of its own (:class:`Channel`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import threading
import time
import traceback
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from pytest_groundeval.integrations.mcp.wire import MAX_LINE, Lines


class Channel:
    """The server's end of the socket: sends serialised; reads as the harness's side does
    (``AgentHost._await``): whoever waits for something from the harness reads it, one reader
    at a time (the others wait their turn), and hands on what is another's. The main thread,
    idle, waits for a call and runs the one it reads itself (as pytest's main thread runs an
    in-process agent: ``signal.signal`` works); a tool waits for its reply: no thread hand-off
    between a message's arrival and its use. Nobody reads while the main thread runs a call
    and no tool waits: a call the harness sends while another of its calls is unanswered rings
    the doorbell first (a pipe from the harness, one byte a call, the call marked ``rung``); the
    standby thread then reads until as many rung calls were taken, each run on a thread of its own."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.agent: Any = None
        self._lines = Lines(sock)
        self._out = threading.Lock()
        self._waiting: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self._turn = threading.Condition()
        self._leader = False  # a thread reads the socket
        self.closed = False  # the end of the stream (the harness closed the channel)
        self._main_waiting = False
        self._for_main: dict[str, Any] | None = None  # the call the main thread runs next
        self._rings = 0  # doorbell bytes read
        self._rung_taken = 0  # calls marked rung taken off the socket

    def send(self, message: dict[str, Any]) -> None:
        # (ASCII: a lone surrogate in an answer crosses as its escape, as json.dumps writes it; else as text)
        data = _encode(message).encode("ascii") + b"\n"
        if len(data) > MAX_LINE:  # (the harness would read it as the host gone)
            error = {"class": "ValueError", "kind": "permanent", "frames": "",
                     "message": f"the agent's answer is {len(data):,} bytes, beyond the agent host's limit "
                                f"of {MAX_LINE:,}"}
            data = json.dumps({"op": "failed", "id": message.get("id"), "error": error}).encode("utf-8") + b"\n"
        with self._out:
            self.sock.sendall(data)

    def ask(self, message: dict[str, Any]) -> Any:
        """Send a request to the harness and wait for its reply's value."""
        req = next(self._ids)
        future: Future = Future()
        self._waiting[req] = future
        self.send({**message, "req": req})
        self._wait(future.done)
        if not future.done():
            raise ConnectionError("the harness closed the agent host's channel")
        return future.result()

    def next_call(self) -> dict[str, Any] | None:
        """The main thread's next call (None: the harness closed the channel)."""
        with self._turn:
            self._main_waiting = True
        try:
            self._wait(lambda: self._for_main is not None)
        finally:
            with self._turn:
                self._main_waiting = False
                message, self._for_main = self._for_main, None
        return message

    def standby(self, bell: int) -> None:
        """The standby thread: each ring of the doorbell, read until the rung calls were taken."""
        while True:
            try:
                rung = len(os.read(bell, 4096))
            except OSError:
                rung = 0
            if not rung:
                return  # the harness is gone
            with self._turn:
                self._rings += rung
            self._wait(lambda: self._rung_taken >= self._rings)

    def _wait(self, done: Any) -> None:
        """Until ``done()`` (or the end of the stream): read while no other thread does."""
        while True:
            with self._turn:
                while self._leader and not done() and not self.closed:
                    self._turn.wait()
                if done() or self.closed:
                    return
                self._leader = True
            try:
                while not done() and self._read_one():
                    pass
            finally:
                with self._turn:
                    self._leader = False
                    self._turn.notify_all()

    def _read_one(self) -> bool:
        """Take one message off the socket and hand it on; False at the end of the stream."""
        message = self._lines.next()
        if message is not None and message.get("op") == "run":
            blob = self._lines.take(int(message.get("prompt_bytes") or 0))
            message = None if blob is None else {**message, "prompt": blob.decode("utf-8", "surrogatepass")}
        if message is None:
            with self._turn:
                self.closed = True
                self._turn.notify_all()
            return False
        if message.get("op") == "reply":
            future = self._waiting.pop(message.get("req"), None)  # type: ignore[arg-type]
            if future is not None:
                future.set_result(message.get("value"))
        elif message.get("op") == "run":
            self._take(message)
        with self._turn:
            self._turn.notify_all()  # (no other thread waits: nothing to wake)
        return True

    def _take(self, message: dict[str, Any]) -> None:
        """A call: the main thread's if it waits for one, else run on a thread of its own."""
        with self._turn:
            self._rung_taken += bool(message.get("rung"))
            to_main = self._main_waiting and self._for_main is None
            if to_main:
                self._for_main = message
        if not to_main:
            threading.Thread(target=_run, args=(self.agent, self, message), daemon=True,
                             name="groundeval-host-run").start()


class TaskView:
    """What an agent may see of its task in the host (the harness keeps the task itself)."""

    def __init__(self, channel: Channel, run: int, view: dict[str, Any]) -> None:
        self._channel, self._run, self._view = channel, run, view
        self.name = view.get("name")
        self.agent_system_prompt = view.get("agent_system_prompt")
        self.answer_tool = view.get("answer_tool")
        if view.get("agent_prompt") is not None:
            worded = view["agent_prompt"]
            self.agent_prompt = lambda prompt, inputs: worded

    def agent_tools(self, inputs: dict[str, Any]) -> list[Any]:
        """The case's tools: each call runs in the harness (and is observed there)."""
        schemas = self._channel.ask({"op": "tools", "id": self._run}) or []
        return [proxy_tool(self._channel, self._run, schema) for schema in schemas]

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"task.{name} is not available to an agent in the agent host (the harness keeps the "
                             f"task; run with --agent-in-process to give the agent the task object)")


def proxy_tool(channel: Channel, run: int, schema: dict[str, Any]) -> Any:
    """An MCP-shaped tool schema as a LangChain tool whose calls go to the harness."""
    from langchain_core.tools import StructuredTool, ToolException

    from pytest_groundeval.run.toolcalls import _step

    step: dict[str, Any] = {}

    def call(**arguments: Any) -> str:
        answer = channel.ask({"op": "call", "id": run, "name": schema["name"], "arguments": arguments,
                              "step": step.get("value")}) or {}
        if answer.get("error"):
            raise ToolException(answer.get("text", ""))
        return str(answer.get("text", ""))

    tool = StructuredTool(name=schema["name"], description=schema.get("description") or schema["name"],
                          args_schema=schema.get("inputSchema") or {"type": "object", "properties": {}},
                          func=call, handle_tool_error=True)
    invoke = tool.invoke

    def stepped(input: Any, config: Any = None, **kwargs: Any) -> Any:
        step["value"] = _step(config)
        return invoke(input, config, **kwargs)

    object.__setattr__(tool, "invoke", stepped)
    return tool


def _output(value: Any) -> dict[str, Any]:
    """The agent's return value as the harness reads it (what ``AgentOutput.coerce`` refuses
    raises here, as it would in the harness); its fields as they are (``_jsonable`` turns a
    dataclass within them into its fields as it is sent)."""
    from pytest_groundeval.model import AgentOutput

    output = AgentOutput.coerce(value)
    return {f.name: getattr(output, f.name) for f in dataclasses.fields(output)}


def _jsonable(value: Any) -> Any:
    """What JSON does not hold as it is sent: a dataclass as its fields, anything else as its text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


_encode = json.JSONEncoder(default=_jsonable).encode


def _error(exc: BaseException) -> dict[str, Any]:
    from pytest_groundeval.run.calls import _retry_after, _status, is_timeout, is_transient

    kind = ("interrupt" if isinstance(exc, KeyboardInterrupt) else "timeout" if is_timeout(exc)
            else "transient" if is_transient(exc) else "permanent")
    frames = "".join(traceback.format_tb(exc.__traceback__, limit=-12))
    return {"class": type(exc).__name__, "message": str(exc), "kind": kind, "status": _status(exc),
            "retry_after": _retry_after(exc), "usage": getattr(exc, "usage", None),
            "frames": frames}


class Spent(dict):  # type: ignore[type-arg]
    """The call's tally in the host (``calls.attempt_tally``): what the agent reports it has
    spent so far (``calls.report_spent``) goes to the harness as it is reported, where it
    counts as an in-process agent's does (the case's usage if the attempt fails or times out,
    ``--max-cost``)."""

    def __init__(self, channel: Channel, run: int) -> None:
        super().__init__()
        self._channel, self._run = channel, run

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        if key == "usage":
            self._channel.send({"op": "spent", "id": self._run, "usage": value})


def _run(agent: Any, channel: Channel, message: dict[str, Any]) -> None:
    from pytest_groundeval.run import calls, fhircase

    run = message["id"]
    if _FAULT is not None:  # which thread runs which call, beside faulthandler's dump (agents/host.py reads it)
        try:
            os.write(_FAULT.fileno(), f"run {run} thread {threading.get_ident():#x}\n".encode())
        except OSError:
            pass
    try:
        deadline = message.get("deadline")
        token = calls._DEADLINE.set(time.monotonic() + deadline) if deadline is not None else None
        try:
            with calls.repeat_of(message.get("repeat")), fhircase.fhir_base_of(message.get("fhir_base_url")), \
                    calls.spending_into(Spent(channel, run)):
                started = time.perf_counter()
                if callable(getattr(agent, "run_case", None)):
                    value = agent.run_case(TaskView(channel, run, message.get("task") or {}), message["prompt"],
                                           message.get("inputs") or {})
                else:
                    value = agent.run(message["prompt"])
                seconds = time.perf_counter() - started
        finally:
            if token is not None:
                calls._DEADLINE.reset(token)
        channel.send({"op": "done", "id": run, "output": _output(value), "seconds": seconds})
    except BaseException as exc:  # noqa: BLE001 - the harness's to judge
        channel.send({"op": "failed", "id": run, "error": _error(exc)})


_FAULT: Any = None  # the file faulthandler dumps into (GROUNDEVAL_HOST_FAULT)


def _fault_file() -> None:
    global _FAULT
    path = os.environ.pop("GROUNDEVAL_HOST_FAULT", None)
    if not path:
        return
    import faulthandler

    try:
        _FAULT = open(path, "a", buffering=1)  # noqa: SIM115 - held open for the process's life
    except OSError:
        return
    faulthandler.enable(file=_FAULT, all_threads=True)


MOVED = "-"  # the spec of an agent object the harness sends (``agents/host.py``: ``moved``)


def _built(spec: str, rootdir: str | None) -> Any:
    from pytest_groundeval.agents.base import load_custom

    return load_custom(spec, Path(rootdir) if rootdir else None)


def _moved(channel: Channel, rootdir: str | None) -> Any:
    """The agent object a fixture made in the harness: its class imported here by reference
    (as the harness imported it, the same ``sys.path``), its state restored (pickle; sent by
    the harness, which never reads anything back from here but JSON)."""
    import pickle

    for folder in (rootdir, os.getcwd()):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    message = channel._lines.next()
    blob = channel._lines.take(int(message.get("bytes") or 0)) if message and message.get("op") == "agent" else None
    if blob is None:
        raise EOFError("the harness sent no agent")
    agent = pickle.loads(blob)
    if not callable(getattr(agent, "run", None)) and not callable(getattr(agent, "run_case", None)):
        raise TypeError(f"{type(agent).__qualname__} has no run(prompt) method")
    return agent


def serve(spec: str, rootdir: str | None, sock: Any, bell: int | None = None) -> None:
    _fault_file()
    channel = Channel(sock)
    try:
        agent = _moved(channel, rootdir) if spec == MOVED else _built(spec, rootdir)
        if callable(getattr(agent, "prepare", None)):
            agent.prepare()  # (SDK imports, clients) before any attempt's clock
    except BaseException as exc:  # noqa: BLE001 - told to the harness: a usage error there
        channel.send({"op": "hello", "error": f"{type(exc).__name__}: {exc}"})
        return
    concurrency = getattr(agent, "concurrency", None)
    cls = type(agent)
    channel.send({"op": "hello", "pid": os.getpid(), "name": getattr(agent, "name", None),
                  "agent_class": f"{cls.__module__}:{cls.__qualname__}",
                  "model": getattr(agent, "model", None), "default_model": getattr(agent, "default_model", None),
                  "concurrency": concurrency if isinstance(concurrency, int) else None,
                  "per_case": bool(getattr(agent, "per_case_processes", False)),
                  "run_case": callable(getattr(agent, "run_case", None))})
    channel.agent = agent
    if bell is not None:
        threading.Thread(target=channel.standby, args=(bell,), daemon=True, name="groundeval-host-read").start()
    while (message := channel.next_call()) is not None:  # a call runs on the main thread, as in pytest's
        _run(agent, channel, message)


__all__ = ["TaskView", "serve"]
