"""The agent host (the harness's side): a ``module:Class`` agent run in a process of its own.

The harness process alone holds the case, its truth, the scorer, the journal and the record.
:class:`HostedAgent` stands in for the user's agent there: each ``run_case(task, prompt,
inputs)`` sends the agent host the prompt, the inputs and what the agent may see of the task
(its name, system prompt, answer tool, the prompt worded for tools: ``host_server.TaskView``)
and waits for the answer. The agent's tools are the task's harness tools, run here, in the
attempt's context (``run/toolcalls.py``: each call observed in the case's log, as for the
built-in agents); the host holds proxies that send each call over the channel.

One host per pytest process (the controller of a serial run, each xdist worker), started once
(the first call, or the start-up preflight) and kept for the session: ``python -m
pytest_groundeval.agents.host_main``, a keeper (Linux child subreaper) and its child, the server
that imports the agent. The channel is one Unix socket pair, one JSON object per line
(``integrations/mcp/wire.py``, the MCP host's wire):

==========  =====================================================================
harness →   ``{"op": "run", "id", "prompt_bytes", "inputs", "task", "deadline", "repeat",
            "fhir_base_url", "rung"}`` followed by the prompt's ``prompt_bytes`` raw UTF-8
            bytes (``rung``: sent while another call was unanswered, after a byte on the
            doorbell pipe: ``host_server.Channel``); ``{"op": "reply", "req", "value"}``
← host      ``{"op": "hello", "name", "model", "concurrency", "per_case", ...}`` (or
            ``{"op": "hello", "error"}``: the agent cannot be built);
            ``{"op": "done", "id", "output"}``; ``{"op": "failed", "id", "error"}``;
            ``{"op": "spent", "id", "usage"}`` (the agent's ``calls.report_spent``);
            ``{"op": "tools", "id", "req"}``; ``{"op": "call", "id", "req", "name",
            "arguments", "step"}``
==========  =====================================================================

Nothing the host says is executed or unpickled here: its answer is JSON, coerced to an
:class:`~pytest_groundeval.model.AgentOutput` as an in-process agent's return value is.

The host dying (``os._exit``, a signal, out of memory) ends each call in flight with
:class:`~pytest_groundeval.run.calls.AgentCrash` (the case's ``crash`` error, not retried); the
next case starts a new host. Every process the agent starts dies with the host (the keeper
kills its descendants, a ``setsid`` or double-forked one included), at the end of the session
always, and at the end of each case when the agent declares ``per_case_processes = True``.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import os
import signal
import socket
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pytest_groundeval.integrations.mcp.wire import Lines, send
from pytest_groundeval.run.calls import (AgentCrash, PermanentAgentError, TransientAgentError, attempt_deadline,
                                         attempt_tally, current_repeat, report_agent_time, report_spent)

_encode = json.JSONEncoder(default=str).encode  # (ASCII, as json.dumps writes it)
HELLO_TIMEOUT = 120.0
ANSWER_SPIN = 200e-6 if hasattr(socket, "MSG_DONTWAIT") and hasattr(os, "sched_yield") else 0.0  # an instant agent's answer is back within this (wire.Lines: no sleep, no wake-up wait)
MOVED = "-"  # host_server.MOVED: the agent object follows on the channel  # importing the agent's module (an SDK) may take a while on a busy machine


class HostedError(Exception):
    """An exception the agent raised in the host, as the harness classifies it."""


class HostedTimeout(TimeoutError):
    """The agent (or its SDK) raised a timeout in the host."""


_BASES = {"timeout": HostedTimeout, "transient": TransientAgentError, "permanent": PermanentAgentError}
_CLASSES: dict[tuple[str, str], type] = {}


def _remote_error(error: dict[str, Any]) -> BaseException:
    """The agent's exception as a harness exception of the same name (never its class)."""
    if error.get("kind") == "interrupt":  # a Ctrl-C raised by the agent interrupts the session, as in-process
        return KeyboardInterrupt(str(error.get("message", "")))
    kind = error.get("kind") if error.get("kind") in _BASES else "permanent"
    name = str(error.get("class") or "Exception")
    if not name.isidentifier():
        name = "AgentError"
    cls = _CLASSES.setdefault((name, kind), type(name, (_BASES[kind],), {"__module__": "agent_host"}))
    exc = cls(str(error.get("message", "")))
    if isinstance(error.get("retry_after"), (int, float)):
        exc.retry_after = float(error["retry_after"])
    elif kind == "transient":
        exc.retry_after = None
    if isinstance(error.get("status"), int):
        exc.status_code = error["status"]
    if error.get("usage") is not None:
        exc.usage = error["usage"]
    exc.remote_frames = str(error.get("frames") or "")
    return exc


def _output(value: Any) -> Any:
    """The host's answer (an ``AgentOutput``'s fields) as an :class:`AgentOutput`."""
    from pytest_groundeval.model import AgentOutput

    if not isinstance(value, dict) or not isinstance(value.get("text"), str):
        raise TypeError("the agent host sent no answer text")
    fields = {k: value.get(k) for k in ("usage", "structured", "transcript", "steps", "model")}
    extra = value.get("extra") if isinstance(value.get("extra"), dict) else {}
    return AgentOutput(text=value["text"], extra=extra, **fields)


class _Answer:
    """A call's answer or failure: the first one set stands (a call waits for it on
    ``AgentHost._reading``, notified as it is set)."""

    __slots__ = ("value", "error", "is_set")

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.is_set = False

    def done(self) -> bool:
        return self.is_set

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        if not self.is_set:
            self.value, self.error, self.is_set = value, error, True

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class _Run:
    """One call in flight: its task and inputs (for its tools), the attempt's context, the answer."""

    def __init__(self, task: Any, inputs: dict[str, Any]) -> None:
        self.task, self.inputs = task, inputs
        self.context = contextvars.copy_context()  # the attempt's: its tool log, its trace
        self.tally = attempt_tally()  # the attempt's spend so far (the host's "spent" messages)
        self.tools: dict[str, Any] | None = None
        self.calls = 0
        self.answer = _Answer()
        self.over = False


class AgentHost:
    """One agent host process (its keeper and server) and the channel to it."""

    def __init__(self, spec: str, rootdir: Path | None, moved: bytes | None = None) -> None:
        self.spec = spec
        ours, theirs = socket.socketpair()
        ctl, ctl_theirs = socket.socketpair()
        bell_theirs, self._bell = os.pipe()  # the doorbell: a call sent while another is unanswered
        # which call's thread a fatal signal hit (faulthandler's dump) and which call ran on which
        # thread, written by the server: read when it dies with several calls in flight
        fd, fault = tempfile.mkstemp(prefix="groundeval-host-fault-")
        os.close(fd)
        self.fault = Path(fault)
        env = dict(os.environ, GROUNDEVAL_HOST_FD=str(theirs.fileno()), GROUNDEVAL_HOST_CTL=str(ctl_theirs.fileno()),
                   GROUNDEVAL_HOST_BELL=str(bell_theirs), GROUNDEVAL_HOST_FAULT=fault,
                   GROUNDEVAL_HOST_PATH=json.dumps(sys.path),  # the agent is imported as it would be here
                   # its own LangSmith traces would leave unredacted from there (nested under the case: in-process)
                   LANGSMITH_TRACING="false", LANGCHAIN_TRACING_V2="false", LANGCHAIN_TRACING="false")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_groundeval.agents.host_main", MOVED if moved is not None else spec,
             str(rootdir or "")],
            pass_fds=(theirs.fileno(), ctl_theirs.fileno(), bell_theirs), env=env, start_new_session=True, close_fds=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for pipe, fd in ((self.proc.stdout, 1), (self.proc.stderr, 2)):
            threading.Thread(target=_relay, args=(pipe, fd), daemon=True, name="groundeval-agent-host-output").start()
        theirs.close()
        ctl_theirs.close()
        os.close(bell_theirs)
        self.sock, self.ctl = ours, ctl
        self._lines = Lines(ours, spin=ANSWER_SPIN)
        self._out = threading.Lock()
        self._ctl_lock = threading.Lock()
        self._runs: dict[int, _Run] = {}
        self._open: set[int] = set()  # calls sent that the host has not answered (awaited or not)
        self._ids = itertools.count(1)
        self.dead: str | None = None  # why the host is gone
        self._reading = threading.Condition()
        self._leader = False  # a call is reading the channel (AgentHost._await)
        if moved is not None:  # the agent object itself (pickled: its class by reference, its state)
            try:
                ours.sendall(json.dumps({"op": "agent", "bytes": len(moved)}).encode() + b"\n" + moved)
            except OSError:
                pass  # (it did not start: _hello says why)
        self.hello = self._hello()

    def _hello(self) -> dict[str, Any]:
        self.sock.settimeout(HELLO_TIMEOUT)
        try:
            hello = self._lines.next()
        finally:
            self.sock.settimeout(None)
        if not isinstance(hello, dict) or hello.get("op") != "hello":
            why = self._ended()
            self.close()
            raise RuntimeError(f"the agent host for {self.spec} did not start ({why})")
        if hello.get("error"):
            self.close()
            raise ImportError(str(hello["error"]))
        return hello

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- calls --
    def call(self, task: Any, prompt: str, inputs: dict[str, Any]) -> Any:
        """One ``run_case`` in the host; the answer (as ``AgentOutput.coerce`` reads it)."""
        run = _Run(task, inputs)
        rid = next(self._ids)
        self._runs[rid] = run
        deadline = attempt_deadline()
        whole = self.hello.get("run_case", True)  # an agent with run(prompt) alone is sent the prompt alone
        blob = prompt.encode("utf-8", "surrogatepass")  # sent raw after the line: not escaped into JSON
        message = {"op": "run", "id": rid, "prompt_bytes": len(blob), "inputs": inputs if whole else {},
                   "task": _view(task, prompt, inputs) if whole else {},
                   "deadline": None if deadline is None else max(0.0, deadline - time.monotonic()),
                   "repeat": current_repeat(), "fhir_base_url": inputs.get("fhir_base_url")}
        try:
            self._send_call(message, blob)
            if self.dead is not None:  # it died before the call was sent (or as it was): never answered
                _fail(run, self.dead)
            return self._await(run)
        finally:
            run.over = True
            self._runs.pop(rid, None)

    def _await(self, run: _Run) -> Any:
        """Wait for ``run``'s answer, reading the channel while no other call does (one reader at
        a time, whoever is waiting: no thread hand-off on an answer's way in)."""
        while not run.answer.done():
            with self._reading:
                while self._leader and not run.answer.done():
                    self._reading.wait()
                if run.answer.done():
                    break
                self._leader = True
            try:
                while not run.answer.done() and self._read_one():
                    pass
            finally:
                with self._reading:
                    self._leader = False
                    self._reading.notify_all()
        return run.answer.result()

    def _send_call(self, message: dict[str, Any], blob: bytes) -> None:
        """Send a call; while another is unanswered, ring the doorbell first (the host's main
        thread may be busy with it: its standby thread then reads this one, ``host_server.Channel``)."""
        try:
            with self._out:
                message["rung"] = bool(self._open)
                self._open.add(message["id"])
                if message["rung"]:
                    os.write(self._bell, b"r")
                self.sock.sendall(_encode(message).encode("ascii") + b"\n" + blob)
        except OSError:
            raise AgentCrash(self._died()) from None

    def _read_one(self) -> bool:
        """Read and handle one message; False at the end of the stream (every call in flight failed)."""
        message = self._lines.next()
        if message is None:
            why = self._died()  # (set before the calls in flight are failed: a call sent from now on sees it)
            culprit = self._culprit() if len(self._runs) > 1 else None
            for rid, run in list(self._runs.items()):
                if culprit is None or rid == culprit:
                    _fail(run, why)
                else:  # beside the call that crashed it: not this case's doing; another attempt runs it
                    _interrupt(run, f"{why}, crashed by another case's call while this one was in flight")
            return False
        op, run = message.get("op"), self._runs.get(message.get("id"))  # type: ignore[arg-type]
        if op in ("done", "failed"):
            self._open.discard(message.get("id"))  # type: ignore[arg-type]
        if run is None or run.answer.done():
            return True  # a call the harness stopped waiting for
        if op == "spent":  # the agent's calls.report_spent, as in-process
            report_spent(run.tally, message.get("usage") if isinstance(message.get("usage"), dict) else None)
            return True
        if op in ("tools", "call"):
            threading.Thread(target=self._tool, args=(run, message), daemon=True,
                             name="groundeval-agent-host-tool").start()
            return True
        if op == "done":
            report_agent_time(run.tally, message.get("seconds"))  # (the host's own measure of the call)
            try:
                run.answer.set(_output(message.get("output")))
            except Exception as exc:  # noqa: BLE001 - a malformed answer fails its call
                run.answer.set(error=exc)
        elif op == "failed":
            run.answer.set(error=_remote_error(message.get("error") or {}))
        with self._reading:
            self._reading.notify_all()  # its caller, if it waits behind this reader
        return True

    def _tool(self, run: _Run, message: dict[str, Any]) -> None:
        value = run.context.copy().run(self._tool_value, run, message)
        try:
            with self._out:
                send(self.sock, {"op": "reply", "req": message.get("req"), "value": value})
        except OSError:
            pass

    def _tool_value(self, run: _Run, message: dict[str, Any]) -> Any:
        from pytest_groundeval.integrations.mcp.host import _error, check_call, invoke_tool, tool_schema
        from pytest_groundeval.run.toolcalls import harness_tools

        if run.over:
            return _error("the case is over") if message.get("op") == "call" else []
        if message.get("op") == "tools":
            run.tools = {t.name: t for t in harness_tools(run.task, run.inputs)}  # offered: observed from here on
            return [tool_schema(t) for t in run.tools.values()]
        name, arguments = message.get("name"), message.get("arguments")
        problem = check_call(run.tools or {}, name, arguments)
        if problem is not None:
            return problem
        run.calls += 1
        return invoke_tool(run.tools[name], name, arguments or {}, f"host-{run.calls}",  # type: ignore[index]
                           message.get("step"))

    # -- the end --
    def _died(self) -> str:
        with self._ctl_lock:  # (the reader and a sender may both find it gone: the keeper's word is read once)
            if self.dead is None:
                self.dead = f"the agent host (pid {self.pid}) died: {self._ended()}"
        return self.dead

    def _culprit(self) -> int | None:
        """The call whose thread received the fatal signal (faulthandler's dump, matched to the
        server's ``run <id> thread <ident>`` lines); None when there is no dump (``os._exit``, a
        kill: no evidence against one call) or its thread ran no call."""
        try:
            text = self.fault.read_text(errors="replace")
        except OSError:
            return None
        faulting = _FAULTING.search(text)
        if faulting is None:
            return None
        ident = int(faulting.group(1), 16)
        runs = [int(rid) for rid, thread in _RUN_THREAD.findall(text) if int(thread, 16) == ident]
        return runs[-1] if runs else None

    def _ended(self) -> str:
        """How the server ended, as its keeper reports it (once it killed its descendants)."""
        try:
            self.ctl.settimeout(10.0)
            status = Lines(self.ctl).next()
        except OSError:  # (closed: the harness is done with it)
            status = None
        if not isinstance(status, dict):
            return "its keeper is gone"
        if "signal" in status:
            try:
                name = signal.Signals(status["signal"]).name
            except ValueError:
                name = str(status["signal"])
            hint = " (out of memory, or killed)" if name == "SIGKILL" else ""
            return f"killed by {name}{hint}"
        return f"it exited with status {status.get('exit')} while answering (os._exit or sys.exit in the agent)"

    def reset(self) -> None:
        """The end of a case whose agent declares per-case processes: every process the agent
        started is killed (the agent's own process is kept)."""
        with self._ctl_lock:
            try:
                self.ctl.sendall(b"r")
                self.ctl.settimeout(30.0)
                self.ctl.recv(1)
            except OSError:
                pass

    def close(self) -> None:
        """The host and every process it started are killed (its keeper kills them when its
        control socket closes); returns once the keeper is gone."""
        for sock in (self.sock, self.ctl):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.ctl.close()
        if self._bell >= 0:
            os.close(self._bell)
            self._bell = -1
        try:
            self.proc.wait(30.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()
        self.fault.unlink(missing_ok=True)


def _relay(pipe: Any, fd: int) -> None:
    """What the agent's processes print, line by line, through the redaction step, to this
    process's stdout or stderr (pytest's capture of the running test, as an in-process agent's)."""
    from pytest_groundeval.store.redact import redact_text

    with pipe:
        for line in pipe:
            try:
                os.write(fd, redact_text(line.decode("utf-8", "replace")).encode("utf-8"))
            except OSError:
                pass


_FAULTING = re.compile(r"^Current thread (0x[0-9a-fA-F]+)", re.MULTILINE)
_RUN_THREAD = re.compile(r"^run (\d+) thread (0x[0-9a-fA-F]+)$", re.MULTILINE)


def _fail(run: _Run, why: str, error: type[BaseException] = AgentCrash) -> None:
    run.answer.set(error=error(why))  # (answered or failed already: that stands)


def _interrupt(run: _Run, why: str) -> None:
    """A call in flight when another call crashed the host: transient, so the call policy runs it
    again (on a new host), as the case it is, not as a crash of its own."""
    _fail(run, why, TransientAgentError)


def _view(task: Any, prompt: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """What the agent may see of its task (``host_server.TaskView``)."""
    worded = task.agent_prompt(prompt, inputs) if hasattr(task, "agent_prompt") else None
    return {"name": getattr(task, "name", None), "agent_system_prompt": getattr(task, "agent_system_prompt", None),
            "answer_tool": getattr(task, "answer_tool", None), "agent_prompt": worded}


class HostedAgent:
    """A ``module:Class`` agent in its agent host (see the module docstring); ``moved``: an
    agent object a fixture made, pickled (:func:`moved`), rebuilt in each host it gets."""

    hosted = True

    def __init__(self, spec: str, rootdir: Path | None = None, moved: bytes | None = None) -> None:
        self.spec, self.rootdir, self.moved = spec, rootdir, moved
        self._lock = threading.Lock()
        self._host: AgentHost | None = None
        hello = self._current().hello
        self.name = hello.get("name") if isinstance(hello.get("name"), str) and hello.get("name") else spec
        for key in ("model", "default_model", "agent_class"):
            if isinstance(hello.get(key), str):
                setattr(self, key, hello[key])
        if isinstance(hello.get("concurrency"), int):
            self.concurrency = hello["concurrency"]
        self.per_case = bool(hello.get("per_case"))

    def _current(self) -> AgentHost:
        with self._lock:
            if self._host is None or self._host.dead is not None or self._host.proc.poll() is not None:
                if self._host is not None:
                    self._host.close()
                self._host = AgentHost(self.spec, self.rootdir, self.moved)
            return self._host

    @property
    def host_pid(self) -> int | None:
        return self._host.pid if self._host is not None else None

    def run(self, prompt: str) -> Any:
        raise TypeError(f"--agent={self.spec} runs in the agent host: the harness calls run_case")

    def run_case(self, task: Any, prompt: str, inputs: dict[str, Any]) -> Any:
        host = self._current()
        try:
            return host.call(task, prompt, inputs)
        finally:
            if self.per_case and host.dead is None:
                host.reset()

    def close(self) -> None:
        with self._lock:
            host, self._host = self._host, None
        if host is not None:
            host.close()


class NotMovable(Exception):
    """An agent a fixture made that cannot run in the agent host (the message says what to do)."""


def moved(agent: Any, rootdir: Path | None, hosts: dict[Any, HostedAgent], fixture: str = "agent") -> HostedAgent:
    """The agent a fixture (a conftest's ``agent``) returned, run in an agent host of its own:
    a ``"module:Class"`` string is built there; an object is moved there by reference (pickled:
    its class imported there by its module and name, its state restored), so its code runs out
    of pytest's process like ``--agent=module:Class``. ``hosts``: those already started, by spec
    or by class and state (a function-scoped fixture's equal objects share one). Raises
    :class:`NotMovable` when it cannot be."""
    import pickle

    if isinstance(agent, str) and agent in hosts:
        return hosts[agent]

    todo = (f"make its class importable (defined at the top level of a module on sys.path, its state "
            f"picklable), return its spec ('module:Class') from the fixture, or run with --agent-in-process "
            f"to trust it in pytest's process")
    if isinstance(agent, str):
        try:
            return hosts.setdefault(agent, HostedAgent(agent, rootdir))
        except Exception as exc:  # noqa: BLE001 - said once per case, with what to do
            raise NotMovable(f"the {fixture!r} fixture's agent {agent!r} cannot be built in the agent host "
                             f"({type(exc).__name__}: {exc})") from None
    what = f"the {fixture!r} fixture's agent ({type(agent).__module__}.{type(agent).__qualname__})"
    try:
        blob = pickle.dumps(agent, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickle raises many kinds
        raise NotMovable(f"{what} cannot be moved to the agent host ({type(exc).__name__}: {exc}): {todo}") from None
    spec = f"{type(agent).__module__}:{type(agent).__qualname__}"
    if (spec, blob) in hosts:
        return hosts[(spec, blob)]
    try:
        return hosts.setdefault((spec, blob), HostedAgent(spec, rootdir, moved=blob))
    except Exception as exc:  # noqa: BLE001
        raise NotMovable(f"{what} cannot be rebuilt in the agent host ({type(exc).__name__}: {exc}): {todo}") from None


__all__ = ["AgentHost", "HostedAgent", "NotMovable", "moved"]
