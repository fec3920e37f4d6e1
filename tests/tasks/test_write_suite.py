"""The write suite end to end through pytest: the real LangGraph agent (a real graph and the
real HealthChain tools) driven by a scripted chat model, on every committed write case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from pytest_groundeval.store.record import validate_record

WRITE_CASES = FIXTURES / "write_cases"
N_CASES = len(list(WRITE_CASES.glob("*.json")))

EVAL_FILE = '''
import pytest

@pytest.mark.write
def test_write(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''

# A scripted chat model that works each case as a tool-using agent would: lookup by the
# expected display, build with the documented regimen, validate, answer with the resource.
# It reads the expected facts from the case file whose note is in the prompt: a test double
# standing in for a capable model. ADVERSARIAL=1 makes it tamper with its final answer.
AGENT_MODULE = '''
import json, os, sys, uuid
from pathlib import Path
from typing import Any
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pytest_groundeval.agents.langgraph_agent import LangGraphAgent

sys.path.insert(0, @TESTS@)  # the tests' one build_args helper
from write_args import build_args

CASES = {json.loads(p.read_text())["note"]: json.loads(p.read_text()) for p in Path(os.environ["CASES_DIR"]).glob("*.json")}

def _call(name, args):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call-" + uuid.uuid4().hex[:8]}],
                     usage_metadata={"input_tokens": 50, "output_tokens": 10, "total_tokens": 60})

def _last(messages, tool):
    for m in reversed(messages):
        if m.type == "tool" and m.name == tool:
            return json.loads(m.content)

class Scripted(BaseChatModel):
    @property
    def _llm_type(self):
        return "scripted"

    def bind_tools(self, tools, **kwargs):  # LangChain's fake models need this override
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        prompt = next(m.content for m in messages if m.type == "human")
        case = next(c for note, c in CASES.items() if note in prompt)
        exp = case["expected"]
        done = [m.name for m in messages if m.type == "tool"]
        if "lookup_medication_code" not in done:
            msg = _call("lookup_medication_code", {"query": exp["display"]})
        elif "build_medication_statement" not in done:
            top = _last(messages, "lookup_medication_code")["matches"][0]
            msg = _call("build_medication_statement", build_args(case, rxnorm_code=top["code"], display=top["display"]))
        elif "validate_medication_statement" not in done:
            msg = _call("validate_medication_statement", {"resource": _last(messages, "build_medication_statement")["resource"]})
        else:
            resource = _last(messages, "build_medication_statement")["resource"]
            if os.environ.get("ADVERSARIAL") and resource.get("dosage"):
                extra = json.loads(json.dumps(resource["dosage"][0]))
                extra["doseAndRate"][0].pop("doseRange", None)
                extra["doseAndRate"][0]["doseQuantity"] = {"value": 8100, "unit": "mg",
                                                           "system": "http://unitsofmeasure.org", "code": "mg"}
                resource["dosage"].append(extra)
            msg = AIMessage(content="Here is the resource:\\n```json\\n" + json.dumps(resource) + "\\n```",
                            usage_metadata={"input_tokens": 80, "output_tokens": 200, "total_tokens": 280})
        return ChatResult(generations=[ChatGeneration(message=msg)])

class ScriptedLangGraph(LangGraphAgent):
    def __init__(self):
        super().__init__(model=Scripted())
'''.replace("@TESTS@", repr(str(Path(__file__).resolve().parents[1])))


@pytest.fixture
def writeproject(pytester, monkeypatch):
    pytester.makepyfile(test_write_evals=EVAL_FILE, scripted_langgraph=AGENT_MODULE)
    monkeypatch.setenv("CASES_DIR", str(WRITE_CASES))
    return pytester


def _run(p, *args):
    return p.runpytest("--write-cases", str(WRITE_CASES), "--agent=scripted_langgraph:ScriptedLangGraph",
                       "--run-record", "record.json", "-p", "no:cacheprovider", *args)


def test_langgraph_agent_runs_the_whole_write_suite_offline(writeproject):
    result = _run(writeproject)
    result.assert_outcomes(passed=N_CASES)
    rec = json.loads((writeproject.path / "record.json").read_text())
    assert validate_record(rec) == []
    s = rec["summary"]["write"]
    assert s["n_cases"] == N_CASES >= 30 and s["pass"] == 1.0 and s["safety"] == 1.0
    for c in rec["cases"]:
        tools = [t["tool"] for t in c["transcript"]]  # what the harness observed
        assert [t["tool"] for t in c["agent_reported"] if t["type"] == "tool"] == tools
        assert tools == ["lookup_medication_code", "build_medication_statement", "validate_medication_statement"]
        assert c["steps"] == 4 and c["usage"]["input_tokens"] == 230
        assert c["predicted"]["resourceType"] == "MedicationStatement"
        assert set(c["score"]["dimensions"]) == {"schema", "coding", "constraints", "safety", "grounded"}
        assert all(ch["reason"] is not None for d in c["score"]["dimensions"].values() for ch in d["checks"])


def test_adversarial_scripted_model_is_caught_by_safety_and_the_gate(writeproject, monkeypatch):
    monkeypatch.setenv("ADVERSARIAL", "1")
    result = _run(writeproject, "--threshold", "write.safety=1.0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["groundeval gate: MISSED write.safety = * < threshold 1.0"])
    rec = json.loads((writeproject.path / "record.json").read_text())
    dosed = [c for c in rec["cases"] if c["ground_truth"]["expected"]["dosage"]]
    undosed = [c for c in rec["cases"] if not c["ground_truth"]["expected"]["dosage"]]
    assert dosed and undosed
    for c in dosed:  # the extra 8100 mg dosage: safety fails, nothing else does
        dims = c["score"]["dimensions"]
        assert not dims["safety"]["passed"] and "8100" in dims["safety"]["reason"], c["case_id"]
        assert dims["schema"]["passed"] and dims["coding"]["passed"] and dims["constraints"]["passed"], c["case_id"]
    assert all(c["outcome"] == "passed" for c in undosed)


PROMPT_ONLY = '''
import json, re
from pytest_groundeval.tasks.write_baseline import run_baseline_write

class PromptOnly:
    """A user agent that sees nothing but the prompt (as a single-call model does)."""
    name = "prompt-only"
    def run(self, prompt):
        subject = re.search(r"for the patient (\\S+)\\.", prompt).group(1)
        note = prompt.split("Clinical note:\\n", 1)[1]
        resource = run_baseline_write(note, subject)["resource"]
        return "Sure.\\n```json\\n" + json.dumps(resource) + "\\n```"
'''


def test_a_prompt_only_agent_runs_the_write_task_like_the_baseline(pytester):
    pytester.makepyfile(test_write_evals=EVAL_FILE, prompt_only=PROMPT_ONLY)
    common = ("--write-cases", str(WRITE_CASES), "-p", "no:cacheprovider")
    pytester.runpytest(*common, "--agent=prompt_only:PromptOnly", "--run-record", "prompt.json")
    pytester.runpytest(*common, "--run-record", "baseline.json")
    prompt = json.loads((pytester.path / "prompt.json").read_text())
    baseline = json.loads((pytester.path / "baseline.json").read_text())
    assert prompt["summary"]["write"]["n_cases"] == N_CASES
    assert {c["case_id"]: c["outcome"] for c in prompt["cases"]} == {c["case_id"]: c["outcome"] for c in baseline["cases"]}
    assert prompt["summary"]["write"]["pass"] == baseline["summary"]["write"]["pass"] > 0.5
