"""The harness's side of a case's MCP server: the case's tools, served to the stdio MCP
server (``server.py``) an agent's MCP client starts, and observed where they run.

:class:`CaseHost` is made inside the runner's attempt (``runner._call_agent`` opens the
attempt's :class:`~pytest_groundeval.run.toolcalls.ToolLog`): it takes the task's tools from
``toolcalls.harness_tools(task, inputs)``, the same call and the same wrappers the LangGraph
agent's tools come from, so every call an MCP client makes is one
:class:`~pytest_groundeval.model.ToolCall` of the case's observed log (``seq``, ``args``,
``result``, ``status``, the log's ``started`` / ``ended`` ticks), recorded here, in the
harness's process, as the call runs. That log is the case's ``transcript`` and
``tools_offered``, what ``grounded`` reads. The agent's processes can reach the tools only
through the socket, so a call is recorded because it ran: nothing an agent's process writes
or says (it runs as the same user, so it could write any file the server could) is evidence.

What one case exposes: exactly ``task.agent_tools(inputs)`` (their names, descriptions and
argument schemas as a LangChain model sees them); none takes a path, each reads only the
case's own data (its patient, the site catalog); the truth is never among the inputs. A
``fhir_server`` task's tools (issue 18) are served the same way: whatever its ``agent_tools``
returns runs here, beside the FHIR server the harness started for the case.

Files, in a private folder (``mkdtemp``: mode 0700; each file 0600) removed when the case
ends: ``spec.json`` (``{"task", "socket", "token"}``, what ``server.py`` is started with),
``mcp.json`` (``{"mcpServers": {"groundeval": {"command": python, "args": ["-m",
"pytest_groundeval.integrations.mcp.server", spec]}}}``), the Unix socket. A connection must
present the spec's token, and, for a host that has an owner (``mcp:COMMAND``: the case's
command, :meth:`CaseHost.own`), come from that process or one it started (the connecting
process's parent chain, read from ``/proc`` when it connects, reaches the owner): the same
user runs every case's command, so under ``--concurrency`` another case's command could read
this folder's spec; it is refused unanswered, so it neither reads this case's patient nor
writes a call into this case's log (its transcript, the only evidence ``grounded`` reads). A
client that detaches its server from itself (a double fork to init) is refused too. The
built-in clients (LangGraph over MCP, the Claude Agent SDK) run in the harness: their hosts
have no owner. :meth:`CaseHost.close` (the case is over) closes every connection,
so each server exits, and kills each server process that connected (by a pidfd taken when
it connected: never another process that reused its pid): MCP clients start servers in a
session of their own, out of reach of the agent's process group.
"""

from __future__ import annotations

import contextvars
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from pytest_groundeval.integrations.mcp.wire import Lines, send

SERVER_MODULE = "pytest_groundeval.integrations.mcp.server"
SERVER_NAME = "groundeval"


def tool_schema(tool: Any) -> dict[str, Any]:
    """A LangChain tool as an MCP tool: its name, description and JSON Schema of arguments,
    as LangChain presents the tool to a model."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    function = convert_to_openai_tool(tool)["function"]
    schema = dict(function.get("parameters") or {"type": "object", "properties": {}})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return {"name": function["name"], "description": function.get("description") or "", "inputSchema": schema}


def _private_dir() -> Path:
    """A 0700 folder whose socket path fits ``sockaddr_un`` (108 bytes)."""
    base = tempfile.gettempdir()
    if len(base) > 60:
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="groundeval-mcp-", dir=base))


def _write_private(path: Path, data: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)


def _descends(pid: int | None, owner: int, limit: int = 64) -> bool:
    """Is ``pid`` the process ``owner`` or one of its descendants (its parent chain, from /proc)?"""
    for _ in range(limit):
        if pid is None or pid <= 1:
            return False
        if pid == owner:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


MAX_COMMAND = 300


def _command_of(pid: int | None) -> str | None:
    """A process's command line (``/proc/PID/cmdline``), bounded; None when it cannot be read."""
    if pid is None:
        return None
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    return text if len(text) <= MAX_COMMAND else text[:MAX_COMMAND] + "..."


def _peer_pid(conn: socket.socket) -> int | None:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (AttributeError, OSError):
        return None
    pid = struct.unpack("3i", creds)[0]
    return pid if pid > 0 else None


class CaseHost:
    """One case's tools, served on a private socket to the MCP servers of one attempt."""

    def __init__(self, task: Any, inputs: dict[str, Any], *, owned: bool = False) -> None:
        """``owned``: only the process given to :meth:`own` (and its descendants) is served;
        connections wait for it."""
        from pytest_groundeval.run.toolcalls import current, harness_tools

        # the attempt's context (its LangSmith trace): each call runs in a copy of it, so a traced
        # case's tool runs nest under the case as the LangGraph agent's do
        self._context = contextvars.copy_context()
        self.task_name = str(getattr(task, "name", type(task).__name__))
        self.tools = {t.name: t for t in harness_tools(task, inputs)}
        self._log = current()  # the attempt's log: where a refused connection is recorded
        self.schemas = [tool_schema(t) for t in self.tools.values()]
        self.dir = _private_dir()
        self.token = secrets.token_hex(16)
        self.socket_path = self.dir / "s"
        self.spec_path = self.dir / "spec.json"
        self.config_path = self.dir / "mcp.json"
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._pidfds: list[int] = []
        self._closed = False
        self._calls = 0
        self._owner: int | None = None
        self._owner_known = threading.Event()
        if not owned:
            self._owner_known.set()
        self.refused: list[int | None] = []  # the pids of connections refused (not the owner's, no token)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket_path))
        os.chmod(self.socket_path, 0o600)
        self._listener.listen(16)
        _write_private(self.spec_path, {"task": self.task_name, "socket": str(self.socket_path), "token": self.token})
        _write_private(self.config_path, {"mcpServers": {SERVER_NAME: self.server_entry()}})
        threading.Thread(target=self._accept, daemon=True, name="groundeval-mcp-host").start()

    def own(self, pid: int) -> None:
        """The case's agent process: only it and its descendants are served from now on."""
        self._owner = pid
        self._owner_known.set()

    def server_entry(self) -> dict[str, Any]:
        """How an MCP client starts this case's server (stdio)."""
        return {"command": sys.executable, "args": ["-m", SERVER_MODULE, str(self.spec_path)]}

    # -- serving --
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed: the case is over
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.append(conn)
                pid = _peer_pid(conn)
                if pid is not None and hasattr(os, "pidfd_open"):
                    try:
                        self._pidfds.append(os.pidfd_open(pid))
                    except OSError:
                        pass
            threading.Thread(target=self._serve, args=(conn, pid), daemon=True, name="groundeval-mcp-conn").start()

    def _refuse(self, conn: socket.socket, pid: int | None, reason: str) -> None:
        """Drop a connection unanswered; record it on the case (its log: the record's
        ``refused_connections``) unless the case is over."""
        command = _command_of(pid)
        with self._lock:
            self.refused.append(pid)
            closed = self._closed
        if not closed and self._log is not None:
            self._log.refuse({"pid": pid, "command": command, "reason": reason})
        self._drop(conn)

    def _serve(self, conn: socket.socket, pid: int | None = None) -> None:
        self._owner_known.wait()
        if self._closed:
            self._drop(conn)
            return
        if self._owner is not None and not _descends(pid, self._owner):
            self._refuse(conn, pid, f"not the case's agent command (pid {self._owner}) nor a process it started")
            return
        lines = Lines(conn)
        hello = lines.next()
        token = hello.get("token") if isinstance(hello, dict) else None
        if not (isinstance(token, str) and hmac.compare_digest(token, self.token)):
            if hello is not None:
                self._refuse(conn, pid, "it did not present the case's token")
            else:
                self._drop(conn)
            return
        out = threading.Lock()
        try:
            with out:
                send(conn, {"tools": self.schemas})
        except OSError:
            return
        while True:
            message = lines.next()
            if message is None:
                return
            if message.get("op") != "call":
                continue
            threading.Thread(target=self._answer, args=(conn, out, message), daemon=True,
                             name="groundeval-mcp-call").start()

    def _answer(self, conn: socket.socket, out: threading.Lock, message: dict[str, Any]) -> None:
        answer = self._context.copy().run(self.call, message.get("name"), message.get("arguments"))
        reply = {"id": message.get("id"), **answer}
        try:
            with out:
                send(conn, reply)
        except OSError:
            pass

    def call(self, name: Any, arguments: Any) -> dict[str, Any]:
        """Run one tool call through its observed wrapper: ``{"text", "error"}`` for the client."""
        problem = check_call(self.tools, name, arguments)
        if problem is not None:
            return problem
        with self._lock:
            if self._closed:
                return _error("the case is over")
            self._calls += 1
            call_id = f"mcp-{self._calls}"
        return invoke_tool(self.tools[name], name, arguments or {}, call_id)

    # -- the end of the case --
    def _drop(self, conn: socket.socket) -> None:
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        conn.close()

    def close(self) -> None:
        """The case is over: no new connection or call, every server's connection closed
        (it exits), every server process that connected killed, the folder removed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns, pidfds = list(self._conns), list(self._pidfds)
        self._owner_known.set()  # a connection waiting for an owner is dropped
        try:
            self._listener.close()
        except OSError:
            pass
        for conn in conns:
            self._drop(conn)
        for fd in pidfds:
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except (OSError, AttributeError):
                pass  # already gone
            finally:
                os.close(fd)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "CaseHost":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def check_call(tools: dict[str, Any], name: Any, arguments: Any) -> dict[str, Any] | None:
    """What is wrong with a call of ``tools`` (an error answer), or None."""
    if not isinstance(name, str) or name not in tools:
        return _error(f"unknown tool {name!r}; this case's tools are {sorted(tools)}")
    if arguments is not None and not isinstance(arguments, dict):
        return _error(f"the arguments of {name} must be a JSON object")
    return None


def invoke_tool(tool: Any, name: str, arguments: dict[str, Any], call_id: str, step: Any = None) -> dict[str, Any]:
    """One call of a harness tool (its observed wrapper: the call is recorded in its case's
    log), answered ``{"text", "error"}``. ``step``: the agent framework's step, when it said."""
    from pytest_groundeval.run.toolcalls import is_error_value, result_value

    config = {"metadata": {"langgraph_step": step}} if isinstance(step, int) else None
    try:
        output = tool.invoke({"type": "tool_call", "name": name, "args": arguments, "id": call_id}, config)
    except Exception as exc:  # recorded as raised by the wrapper; the client gets the message
        return _error(f"{type(exc).__name__}: {exc}")
    content = getattr(output, "content", output)
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
    failed = getattr(output, "status", None) == "error" or is_error_value(result_value(content))
    return {"text": text, "error": bool(failed)}


def _error(message: str) -> dict[str, Any]:
    return {"text": json.dumps({"error": message}), "error": True}


__all__ = ["CaseHost", "SERVER_MODULE", "SERVER_NAME", "check_call", "invoke_tool", "tool_schema"]
