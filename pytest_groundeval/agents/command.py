"""A command-line agent: ``--agent "mcp:COMMAND ARGS"``, any language, any MCP client.

For each case (each attempt) the harness runs COMMAND (split like a shell command line, run
without a shell) in a new session, with:

* the prompt on stdin, and in the file named by ``GROUNDEVAL_PROMPT_FILE`` (the task's
  prompt for a tool-using agent: the case reached through the tools, not pasted in);
  the task's system prompt for tool-using agents in ``GROUNDEVAL_SYSTEM_PROMPT_FILE``;
* ``GROUNDEVAL_MCP_CONFIG``: an MCP client config file, ``{"mcpServers": {"groundeval":
  {"command": ..., "args": [...]}}}``: the case's stdio MCP server
  (``integrations/mcp/server.py``), serving exactly the task's tools for this case;
* ``GROUNDEVAL_DEADLINE``: when the attempt ends, in seconds since the epoch (a float,
  ``time.time()``'s clock); at that moment the process group is killed;
* ``GROUNDEVAL_USAGE_FILE``: where the agent may write what it spent, one JSON object
  ``{"input_tokens": int, "output_tokens": int, "cost_usd": float, "model": str}`` (any key
  may be left out); no file: usage unknown (``null``, never 0). The cost of the record is
  groundeval's price table's for ``model`` (one price source for the record and
  ``--max-cost``); ``cost_usd`` is checked to be a non-negative number, else the usage is
  dropped with a warning.

The answer is its stdout (UTF-8). Exit status:

=================  ========================================================
exit status        the case
=================  ========================================================
0                  answered: stdout is scored
75 (EX_TEMPFAIL)   transient failure: retried (``--agent-retries``), then ``agent``
124                the agent's own timeout: ``timeout`` (retried like one)
killed at deadline ``timeout`` (the harness killed the process group)
other, or signal   ``agent``, with the end of its stderr in the message
=================  ========================================================

Nothing of it outlives the case: it runs under a keeper (``agents/host_main.py``, a Linux
child subreaper: what it starts stays the keeper's descendant, a ``setsid`` or double-forked
process included), and at the end of the attempt (answered, failed, timed out, or the harness
interrupted) the keeper kills every process the command started, then its process group is
killed (SIGKILL), and the case's MCP servers
(which MCP clients start in sessions of their own) are closed and killed by the harness
(``integrations/mcp/host.py``). The case's server serves the command's own processes only
(the command and what it starts; a server started by another case's command is refused). The
tool calls the harness observed are the case's
transcript; what the command prints about its own calls is not evidence.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pytest_groundeval.model import AgentOutput
from pytest_groundeval.run.calls import CallTimeout, PermanentAgentError, TransientAgentError, attempt_deadline

PREFIX = "mcp:"
EX_TEMPFAIL = 75
EX_TIMEOUT = 124
STDERR_TAIL = 1500
KEEPER = "pytest_groundeval.agents.host_main"  # the command runs under a keeper (a child subreaper)
KEEPER_GRACE = 30.0  # seconds for the keeper to kill the command's processes
MAX_OUTPUT = 8 * 1024 * 1024  # more stdout than this is cut (the harness's bounds then make it an agent error)


def parse_command(spec_name: str) -> list[str]:
    """``mcp:COMMAND ARGS`` as an argv (shell-like splitting, no shell)."""
    text = spec_name[len(PREFIX):] if spec_name.startswith(PREFIX) else spec_name
    argv = shlex.split(text)
    if not argv:
        raise ValueError(f"--agent={spec_name}: no command after {PREFIX!r}")
    return argv


class _Reader(threading.Thread):
    """Drains one pipe (so a chatty agent never blocks on a full pipe), keeping at most ``limit``."""

    def __init__(self, pipe: Any, limit: int) -> None:
        super().__init__(daemon=True, name="groundeval-command-pipe")
        self.pipe, self.limit, self.chunks, self.size = pipe, limit, [], 0

    def run(self) -> None:
        try:
            while True:
                chunk = self.pipe.read1(1 << 16) if hasattr(self.pipe, "read1") else self.pipe.read(1 << 16)
                if not chunk:
                    return
                if self.size < self.limit:
                    self.chunks.append(chunk[: self.limit - self.size])
                self.size += len(chunk)
        except (OSError, ValueError):
            return

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _end(proc: subprocess.Popen) -> None:
    """The command's keeper kills every process the command started (a ``setsid`` or
    double-forked one included) and exits; then its process group, in case the keeper could not."""
    try:
        os.kill(proc.pid, signal.SIGTERM)  # (a zombie until reaped below: never another process)
    except ProcessLookupError:
        pass
    try:
        proc.wait(KEEPER_GRACE)
    except subprocess.TimeoutExpired:
        pass
    _killpg(proc.pid)
    proc.wait()


def _exited(proc: subprocess.Popen, done: threading.Event) -> None:
    """Wait for the command to exit without reaping it: while it is a zombie its pid, which is
    its process group's id, cannot be reused, so the group can be killed safely afterwards."""
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        pass
    done.set()


class CommandAgent:
    """``--agent "mcp:COMMAND ARGS"`` (see the module docstring for the protocol)."""

    model: str | None = None

    def __init__(self, command: str | list[str], *, timeout: float = 120.0) -> None:
        self.argv = parse_command(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("no command")
        found = shutil.which(self.argv[0])
        if found is None:  # the start-up preflight makes this one usage error naming it
            raise FileNotFoundError(f"command {self.argv[0]!r} not found (not an executable file, nor on PATH)")
        self.executable = found
        self.timeout = float(timeout)
        text = command if isinstance(command, str) else shlex.join(self.argv)
        self.name = text if text.startswith(PREFIX) else PREFIX + text

    def prepare(self) -> None:
        """Before the attempt's clock: the tool wrappers' import."""
        import langchain_core.tools  # noqa: F401

    def run(self, prompt: str) -> AgentOutput:
        raise TypeError(f"--agent={self.name} runs eval cases only (it needs a case's MCP server)")

    def run_case(self, task: Any, prompt: str, inputs: dict[str, Any]) -> AgentOutput:
        from pytest_groundeval.integrations.mcp.host import CaseHost

        if hasattr(task, "agent_prompt"):  # a task may word the request for tool use
            prompt = task.agent_prompt(prompt, inputs)
        system = getattr(task, "agent_system_prompt", None)
        with CaseHost(task, inputs, owned=True) as host:  # served to this command's processes only
            return self._run(host, prompt, system)

    def _run(self, host: Any, prompt: str, system: str | None) -> AgentOutput:
        folder: Path = host.dir
        prompt_file, usage_file = folder / "prompt.txt", folder / "usage.json"
        _private_text(prompt_file, prompt)
        env = dict(os.environ)
        for key in [k for k in env if k.startswith("GROUNDEVAL_")]:
            env.pop(key)  # the harness's own settings are not the agent's
        env.update(GROUNDEVAL_PROMPT_FILE=str(prompt_file), GROUNDEVAL_MCP_CONFIG=str(host.config_path),
                   GROUNDEVAL_USAGE_FILE=str(usage_file))
        if system:
            _private_text(folder / "system.txt", system)
            env["GROUNDEVAL_SYSTEM_PROMPT_FILE"] = str(folder / "system.txt")
        deadline = attempt_deadline()
        budget = self.timeout if deadline is None else max(0.0, deadline - time.monotonic())
        env["GROUNDEVAL_DEADLINE"] = f"{time.time() + budget:.3f}"
        proc = subprocess.Popen([sys.executable, "-m", KEEPER, "--command", self.executable, *self.argv[1:]],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True, close_fds=True)
        host.own(proc.pid)
        out, err = _Reader(proc.stdout, MAX_OUTPUT), _Reader(proc.stderr, 64 * 1024)
        out.start()
        err.start()
        done = threading.Event()
        threading.Thread(target=_exited, args=(proc, done), daemon=True, name="groundeval-command-wait").start()
        try:
            try:
                proc.stdin.write(prompt.encode("utf-8"))  # type: ignore[union-attr]
                proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass  # it does not read stdin (it has the prompt file)
            finished = done.wait(budget)
        finally:
            _end(proc)  # every process the command started, whatever happened
            usage = _read_usage(usage_file)  # before the case's folder goes
            host.close()  # the case's MCP servers: their connections closed, their processes killed
            for reader in (out, err):
                reader.join(2.0)  # a process that left the group may hold a pipe: not waited for
        if not finished:
            raise CallTimeout(f"{self.name}: no answer by the deadline ({budget:.3g} s); its process group was killed")
        return self._output(proc.returncode, out.text(), err.text(), usage)

    def _output(self, code: int, stdout: str, stderr: str, usage: tuple[Any, str | None]) -> AgentOutput:
        tail = stderr[-STDERR_TAIL:].strip()
        said = f"; stderr: {tail}" if tail else ""
        if code == EX_TEMPFAIL:
            raise TransientAgentError(f"{self.name} exited {code} (transient){said}")
        if code == EX_TIMEOUT:
            raise TimeoutError(f"{self.name} exited {code} (its own timeout){said}")
        if code < 0:
            raise PermanentAgentError(f"{self.name} was killed by signal {-code}{said}")
        if code != 0:
            raise PermanentAgentError(f"{self.name} exited {code}{said}")
        return AgentOutput(text=stdout, usage=usage[0], model=usage[1])


def _private_text(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _read_usage(path: Path) -> tuple[Any, str | None]:
    """The usage file: (token counts, or what the runner drops with a warning; model)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return f"unreadable usage file: {exc}", None
    try:
        data = json.loads(raw)
    except ValueError:
        return f"usage file is not JSON: {raw[:200]!r}", None
    if not isinstance(data, dict):
        return data, None
    data = dict(data)
    model = data.pop("model", None)
    cost = data.pop("cost_usd", None)
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0):
        return f"cost_usd must be a non-negative number, not {cost!r}", None
    return data, model if isinstance(model, str) and model else None


__all__ = ["CommandAgent", "EX_TEMPFAIL", "EX_TIMEOUT", "PREFIX", "parse_command"]
