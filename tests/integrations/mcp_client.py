"""An MCP client agent for the tests of ``--agent "mcp:python mcp_client.py"`` (issue 19): a
real ``mcp`` SDK stdio client of the case's server, on every task. A test double: it knows the
facts of its case from a plans file the test wrote (``MCP_PLANS``: task, a text of the prompt
that identifies the case, the case's facts), as the scripted LangGraph models of the other
tests do. What it does is ``MCP_MODE``:

* ``honest``: reads what it answers through the tools first;
* ``nocall``: answers right without calling a tool;
* ``snoop``: tries to reach beyond its case (other patients, paths, truth, hidden tools, the
  socket without the token) and writes what it got to ``MCP_SNOOP_DIR``; answers nothing useful;
* ``hang``: starts the case's server, forks a grandchild, writes both pids to ``MCP_PIDS_DIR``,
  and sleeps (so does the grandchild): only the harness's deadline ends it;
* ``crash``: says why on stderr and exits 3.

Each run appends a line to ``MCP_CALLS`` (if set): how many times the agent was started.
"""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the one build_args helper
from write_args import build_args  # noqa: E402

MODE = os.environ.get("MCP_MODE", "honest")


def plan_for(prompt):
    plans = json.loads(Path(os.environ["MCP_PLANS"]).read_text())
    found = [p for p in plans if p["key"] in prompt]
    return max(found, key=lambda p: len(p["key"])) if found else None


def answer(task, facts):
    if task == "write":
        raise AssertionError("write answers the built resource")
    return json.dumps({("active_medications" if task == "extraction" else "medications"): facts})


async def honest(session, task, facts):
    async def call(name, args):
        result = await session.call_tool(name, args)
        return json.loads(result.content[0].text)

    if task == "extraction":
        listed = (await call("list_medication_requests", {"status": "active"}))["medication_requests"]
        return answer(task, [{"code": m["code"], "display": m["display"]} for m in listed
                             if not m.get("do_not_perform")])
    if task == "write":
        top = (await call("lookup_medication_code", {"query": facts["expected"]["display"]}))["matches"][0]
        built = await call("build_medication_statement", build_args(facts, rxnorm_code=top["code"],
                                                                    display=top["display"]))
        checked = await call("validate_medication_statement", {"resource": built["resource"]})
        assert checked.get("valid") is True, checked
        return json.dumps(built["resource"])
    recorded = {m["code"] for m in (await call("list_medication_requests", {}))["medication_requests"]}
    for f in facts:
        if f["code"] not in recorded:
            await call("lookup_medication_code", {"query": f["display"]})
    return answer(task, facts)


async def snoop(session, server, prompt):
    out = Path(os.environ["MCP_SNOOP_DIR"])
    names = [t.name for t in (await session.list_tools()).tools]
    tries = {}
    attempts = [("read_resource", {"reference": f"Patient/{os.environ['MCP_OTHER_PATIENT']}"}),
                ("read_resource", {"reference": "../../fixtures/synthea/x.json"}),
                ("read_resource", {"reference": "/etc/passwd"}),
                ("list_medication_requests", {"status": "active", "patient": os.environ["MCP_OTHER_PATIENT"]}),
                ("lookup_medication_code", {"query": "../../fixtures/terminology/rxnorm.json"}),
                ("load_bundle", {"path": os.environ["MCP_OTHER_BUNDLE"]}),
                ("read_truth", {}),
                ("list_medication_requests", {"bundle": os.environ["MCP_OTHER_BUNDLE"]})]
    for name, args in attempts:
        try:
            result = await session.call_tool(name, args)
            tries[json.dumps([name, args])] = {"error": result.isError, "text": result.content[0].text}
        except Exception as exc:  # a protocol error is also nothing reached
            tries[json.dumps([name, args])] = {"error": True, "text": f"{type(exc).__name__}: {exc}"}
    spec_path = Path(server["args"][-1])
    spec = json.loads(spec_path.read_text())
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # the harness's socket, without the token
    sock.connect(spec["socket"])
    sock.sendall(json.dumps({"op": "hello", "token": "0" * 32, "pid": os.getpid()}).encode() + b"\n")
    refused = sock.recv(1 << 16)
    (out / f"{os.getpid()}.json").write_text(json.dumps({
        "tools": names, "tries": tries, "spec": spec, "config": server, "wrong_token_reply": refused.decode(),
        "prompt": prompt}))
    return "{}"


def hang(server):
    pids = Path(os.environ["MCP_PIDS_DIR"])
    srv = subprocess.Popen([server["command"], *server["args"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           start_new_session=True)  # as MCP SDK clients start servers: a session of its own
    child = os.fork()
    if child == 0:  # the grandchild: sleeps for an hour
        time.sleep(3600)
        os._exit(0)
    (pids / "pids.json").write_text(json.dumps({"agent": os.getpid(), "grandchild": child, "server": srv.pid}))
    time.sleep(3600)


async def main():
    prompt = sys.stdin.read()
    if os.environ.get("MCP_CALLS"):
        with open(os.environ["MCP_CALLS"], "a") as fh:
            fh.write(f"{os.getpid()}\n")
    if MODE == "crash":
        print("boom: the agent fell over", file=sys.stderr)
        sys.exit(3)
    assert Path(os.environ["GROUNDEVAL_PROMPT_FILE"]).read_text() == prompt
    assert float(os.environ["GROUNDEVAL_DEADLINE"]) > time.time()
    server = json.loads(Path(os.environ["GROUNDEVAL_MCP_CONFIG"]).read_text())["mcpServers"]["groundeval"]
    if MODE == "hang":
        hang(server)
    plan = plan_for(prompt)
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=server["command"], args=server["args"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        if MODE == "snoop":
            text = await snoop(session, server, prompt)
        elif MODE == "nocall":
            text = json.dumps(plan["answer"]) if plan["task"] == "write" else answer(plan["task"], plan["facts"])
        else:
            text = await honest(session, plan["task"], plan["facts"])
    print(text)
    Path(os.environ["GROUNDEVAL_USAGE_FILE"]).write_text(json.dumps(
        {"input_tokens": len(prompt) // 4, "output_tokens": len(text) // 4, "model": "scripted-mcp", "cost_usd": 0}))


asyncio.run(main())
