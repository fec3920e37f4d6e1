"""The command-line agent protocol (``--agent "mcp:COMMAND ARGS"``, agents/command.py) case by
case, in this process: what the command is given, what its exit status means, what its usage
file says. Commands are small Python scripts; the MCP side is tested through ``pytest evals``
in tests/integrations/test_mcp_agent.py."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REFS, SYNTHEA

from pytest_groundeval.agents.base import AgentSpec, build_agent
from pytest_groundeval.agents.command import CommandAgent, parse_command
from pytest_groundeval.run.calls import CallPolicy
from pytest_groundeval.run.runner import run_case
from pytest_groundeval.tasks.extraction import ExtractionTask

TASK = ExtractionTask(SYNTHEA)
REF = next(r for r in TASK.discover() if r.case_id == REFS)


def _agent(tmp_path: Path, body: str) -> CommandAgent:
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(body))
    return CommandAgent(f"mcp:{sys.executable} {script}", timeout=60)


def _run(agent: CommandAgent, attempts: int = 1):
    policy = CallPolicy(timeout=60, max_attempts=attempts, sleep=lambda s: None)
    return run_case(TASK, REF, agent, policy=policy)


def test_the_spec_parses_and_the_registry_builds_it():
    assert parse_command('mcp:python "my agent.py" --fast') == ["python", "my agent.py", "--fast"]
    spec = AgentSpec(f"mcp:{sys.executable} -V")
    assert spec.check() is None and spec.is_live and spec.is_command
    agent = build_agent(spec)
    assert isinstance(agent, CommandAgent) and agent.name == f"mcp:{sys.executable} -V"
    assert "expected mcp:COMMAND" in AgentSpec("mcp:  ").check()
    assert "takes no model" in AgentSpec("mcp:python x.py", model="m").check()
    with pytest.raises(FileNotFoundError, match="'no-such-agent-command' not found"):
        build_agent(AgentSpec("mcp:no-such-agent-command"))


def test_the_command_gets_the_prompt_the_config_the_deadline_and_private_files(tmp_path, monkeypatch):
    monkeypatch.setenv("GROUNDEVAL_HARNESS_ONLY", "not for the agent")
    agent = _agent(tmp_path, """
        import json, os, stat, sys
        prompt = sys.stdin.read()
        config = json.load(open(os.environ["GROUNDEVAL_MCP_CONFIG"]))
        spec_path = config["mcpServers"]["groundeval"]["args"][-1]
        folder = os.path.dirname(os.environ["GROUNDEVAL_MCP_CONFIG"])
        modes = {p: stat.S_IMODE(os.stat(os.path.join(folder, p)).st_mode) for p in os.listdir(folder)}
        print(json.dumps({"stdin": prompt, "file": open(os.environ["GROUNDEVAL_PROMPT_FILE"]).read(),
                          "system": open(os.environ["GROUNDEVAL_SYSTEM_PROMPT_FILE"]).read(),
                          "config": config, "spec": json.load(open(spec_path)),
                          "deadline": float(os.environ["GROUNDEVAL_DEADLINE"]),
                          "dir_mode": stat.S_IMODE(os.stat(folder).st_mode), "modes": modes,
                          "env": sorted(k for k in os.environ if k.startswith("GROUNDEVAL_"))}))
    """)
    before = time.time()
    result = _run(agent)
    after = time.time()
    seen = json.loads(result.raw_output)
    case = TASK.load(REF)
    assert seen["stdin"] == seen["file"] == TASK.agent_prompt(case.prompt, case.inputs)  # the tool prompt
    assert "Bundle" not in seen["stdin"] and seen["system"] == TASK.agent_system_prompt
    entry = seen["config"]["mcpServers"]["groundeval"]
    assert entry["command"] == sys.executable
    assert entry["args"][:2] == ["-m", "pytest_groundeval.integrations.mcp.server"]
    assert set(seen["spec"]) == {"task", "socket", "token"} and seen["spec"]["task"] == "extraction"
    assert before <= seen["deadline"] <= after + 60  # epoch seconds, at most the attempt's timeout ahead
    assert seen["dir_mode"] == 0o700 and all(m == 0o600 for m in seen["modes"].values()), seen["modes"]
    assert seen["env"] == ["GROUNDEVAL_DEADLINE", "GROUNDEVAL_MCP_CONFIG", "GROUNDEVAL_PROMPT_FILE",
                           "GROUNDEVAL_SYSTEM_PROMPT_FILE", "GROUNDEVAL_USAGE_FILE"]  # not the harness's own
    assert not Path(entry["args"][-1]).exists()  # the case's folder is gone with the case
    # it answered no JSON: a scored failure, and with tools offered and none called
    assert result.outcome == "failed" and result.transcript == [] and result.tools_offered
    assert result.usage is None and result.cost_usd is None  # no usage file: unknown, never 0


def test_exit_75_is_transient_and_retried_then_an_agent_error(tmp_path):
    agent = _agent(tmp_path, "import sys; print('rate limited', file=sys.stderr); sys.exit(75)")
    result = _run(agent, attempts=3)
    assert result.outcome == "error" and result.error.kind == "agent"
    assert result.attempts == 3 and result.error.error_class == "TransientAgentError"
    assert "exited 75 (transient)" in result.error.message and "rate limited" in result.error.message


def test_exit_124_is_the_agents_own_timeout(tmp_path):
    agent = _agent(tmp_path, "import sys; sys.exit(124)")
    result = _run(agent)
    assert result.outcome == "error" and result.error.kind == "timeout"


def test_a_signal_is_an_agent_error(tmp_path):
    agent = _agent(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    result = _run(agent, attempts=3)
    assert result.error.kind == "agent" and result.attempts == 1  # permanent: not retried
    assert "killed by signal 11" in result.error.message


def test_the_usage_file_gives_tokens_and_model(tmp_path):
    agent = _agent(tmp_path, """
        import json, os
        print('{"active_medications": []}')
        json.dump({"input_tokens": 1200, "output_tokens": 80, "cost_usd": 0.01, "model": "claude-opus-4-8"},
                  open(os.environ["GROUNDEVAL_USAGE_FILE"], "w"))
    """)
    result = _run(agent)
    assert result.usage.model_dump() == {"input_tokens": 1200, "output_tokens": 80}
    assert result.model == "claude-opus-4-8" and result.cost_usd is not None and result.cost_usd > 0  # priced


@pytest.mark.parametrize("content, why", [
    ("not json", "not JSON"),
    ('{"input_tokens": -5, "output_tokens": 1}', "greater than or equal to 0"),
    ('{"input_tokens": 5, "output_tokens": 1, "cost_usd": "free"}', "cost_usd must be a non-negative number"),
])
def test_a_bad_usage_file_is_dropped_with_a_warning_and_the_answer_still_scored(tmp_path, content, why):
    agent = _agent(tmp_path, f"""
        import os
        print('{{"active_medications": []}}')
        open(os.environ["GROUNDEVAL_USAGE_FILE"], "w").write({content!r})
    """)
    result = _run(agent)
    assert result.outcome == "failed" and result.usage is None and result.cost_usd is None
    assert any("usage dropped" in w and why in w for w in result.warnings), result.warnings


def test_stdout_that_is_not_utf8_is_read_with_replacement(tmp_path):
    agent = _agent(tmp_path, "import sys; sys.stdout.buffer.write(b'\\xff\\xfe not json')")
    result = _run(agent)
    assert result.outcome == "failed" and "\ufffd" in result.raw_output


def test_the_case_folder_is_removed_and_nothing_is_left_running(tmp_path):
    agent = _agent(tmp_path, """
        import json, os, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(json.dumps({"child": child.pid, "dir": os.path.dirname(os.environ["GROUNDEVAL_MCP_CONFIG"])}))
    """)
    result = _run(agent)
    seen = json.loads(result.raw_output)
    assert not Path(seen["dir"]).exists()
    state = Path(f"/proc/{seen['child']}/stat")

    def dead() -> bool:
        try:
            return state.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return True

    # SIGKILL went to the whole group when the case ended; its delivery to a running process is
    # the scheduler's, so wait for the death itself (a live sleeper never dies: the bound is only
    # there to fail instead of hanging)
    deadline = time.monotonic() + 60
    while not dead() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert dead()


@pytest.mark.parametrize("how", ["double-fork", "setsid"])
def test_a_process_that_left_the_commands_group_dies_with_its_case(tmp_path, how):
    """A process that left the command's process group (a setsid child, or a grandchild of a
    double fork into a session of its own) is still the keeper's descendant: dead when the
    case is over, checked by pid."""
    agent = _agent(tmp_path, f"""
        import os, subprocess, sys
        SLEEP = [sys.executable, "-c", "import time; time.sleep(3600)"]
        if {how!r} == "setsid":
            pid = subprocess.Popen(SLEEP, start_new_session=True).pid
        else:
            r, w = os.pipe()
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.write(w, str(os.getpid()).encode())
                    os.execv(sys.executable, SLEEP)
                os._exit(0)
            os.close(w)
            pid = int(os.read(r, 32))  # the grandchild is running, its parent gone
        open(os.path.join({str(tmp_path)!r}, "pid"), "w").write(str(pid))
        print('{{"active_medications": []}}')
    """)
    result = _run(agent)
    assert result.outcome == "failed"  # answered (wrongly): the case itself ran
    pid = int((tmp_path / "pid").read_text())
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False
