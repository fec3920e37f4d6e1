"""The agent host's channel (agents/host.py, agents/host_server.py): who reads the harness's
messages in the host. A call the main thread is free for runs there (``signal.signal`` works);
calls sent at once run at once; a call sent while the main thread is still busy with one the
harness stopped waiting for is answered all the same (the doorbell); a tool's reply reaches
its call on the main thread and beside it. Real host processes, synchronised on events
(a barrier, a FIFO), never on sleeps."""

from __future__ import annotations

import json
import os
import select
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_groundeval.agents.host import AgentHost

AGENTS = '''
import json, os, threading

BARRIER = threading.Barrier(3, timeout=60)
RELEASE = threading.Event()


def _where():
    return "main" if threading.current_thread() is threading.main_thread() else "thread"


class Channel:
    name = "channel"

    def run(self, prompt):
        raise AssertionError("the harness calls run_case")

    def run_case(self, task, prompt, inputs):
        if prompt == "together":  # answers only if three calls run at once
            BARRIER.wait()
        elif prompt == "hang":  # says so on the FIFO, then waits for the call "release"
            with open(os.environ["HOST_FIFO"], "w") as fh:
                fh.write("started\\n")
            RELEASE.wait(60)
        elif prompt == "release":
            RELEASE.set()
        elif prompt.startswith("add"):  # the task's tool, called in the harness, n times
            add = {t.name: t for t in task.agent_tools(inputs)}["add"]
            total = 0
            for i in range(int(prompt.split()[1])):
                total = int(add.invoke({"a": total, "b": i}))
            return json.dumps({"total": total, "where": _where()})
        return json.dumps({"prompt": prompt, "where": _where()})
'''


class AddTask:
    """A task whose one tool adds two numbers (run in the harness)."""

    name = "toy"

    def agent_tools(self, inputs):
        from langchain_core.tools import StructuredTool

        def add(a: int, b: int) -> str:
            return str(a + b)

        return [StructuredTool.from_function(add, name="add", description="a + b")]


@pytest.fixture
def host(tmp_path, monkeypatch):
    (tmp_path / "channel_agents.py").write_text(AGENTS)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv("HOST_FIFO", str(fifo))
    monkeypatch.syspath_prepend(str(tmp_path))
    host = AgentHost("channel_agents:Channel", tmp_path)
    yield host
    host.close()


def _answer(host: AgentHost, prompt: str, task=AddTask()) -> dict:
    """The agent's answer to ``prompt`` (a minute at most: a call nobody reads fails, not hangs)."""
    answer: Future = Future()
    threading.Thread(target=lambda: answer.set_result(host.call(task, prompt, {})), daemon=True).start()
    return json.loads(answer.result(60).text)


def _said(fifo: Path) -> str:
    """What the agent writes on the FIFO (waited for, at most a minute)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, "the agent never said it started"
            data += os.read(fd, 64)
        return data.decode()
    finally:
        os.close(fd)


def test_a_call_runs_on_the_hosts_main_thread(host):
    for n in range(3):
        assert _answer(host, f"plain {n}") == {"prompt": f"plain {n}", "where": "main"}


def test_calls_sent_at_once_run_at_once(host):
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: _answer(host, "together"), range(3)))
    assert sorted(a["where"] for a in answers) == ["main", "thread", "thread"]


def test_a_call_is_answered_while_the_main_thread_is_busy_with_one_no_longer_awaited(host, tmp_path):
    """The harness stopped waiting for a call (a timeout) that keeps the host's main thread: the
    next case's call is read (the doorbell) and runs beside it."""
    hung = threading.Thread(target=lambda: _answer(host, "hang"), daemon=True)
    hung.start()
    assert _said(tmp_path / "fifo") == "started\n"  # the main thread runs it now
    assert _answer(host, "release") == {"prompt": "release", "where": "thread"}
    hung.join(60)
    assert not hung.is_alive()
    assert _answer(host, "after") == {"prompt": "after", "where": "main"}


def test_a_tools_reply_reaches_its_call_on_the_main_thread_and_beside_it(host):
    assert _answer(host, "add 30") == {"total": sum(range(30)), "where": "main"}
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda n: _answer(host, f"add {n}"), (40, 50, 60)))
    assert [a["total"] for a in answers] == [sum(range(n)) for n in (40, 50, 60)]
