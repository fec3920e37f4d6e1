"""The user-repo workflow end to end (issue 30 item 2): ``examples/github-actions/user-project.yml``
run, step by step as its YAML says, in a separate project that installed groundeval's built
wheel.

The project is what a team writes in an afternoon: a src layout package with its own agent
class (``my_evals.agent:MyAgent``), its own write case and its own hand-written FHIR bundle, an
``evals/`` folder with its own write suite and a unit test, and a pyproject.toml naming the
agent, the cases and the gate (the workflow's config file). Its bundled suites run beside
``./evals`` in one session; the bundled write suite and the project's own write suite read the
same cases, each under its suite's ids.

The wheel is built with ``uv build`` from this checkout and committed where the workflow's
default ``GROUNDEVAL`` looks for it (``wheels/``); everything installs offline from uv's cache.
The workflow's ``run:`` steps are run with bash, in order, with their ``env`` and ``if``
evaluated (tests/test_example_workflows.py's evaluator): the install step, two shards, the
merge and the comparison. ``uses:`` steps are done here (checkout: nothing; upload/download
of the shards' artifacts: a copy); the ``gh`` steps (fetching main's record, the comment) are
checked against a stand-in gh in test_example_workflows.py: here main's record is the first
run's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_example_workflows import USER_WORKFLOW, commands, condition, evaluate, event, load, program
from test_install import UV, _fresh_project, _ok, _run

from pytest_groundeval.store.record import validate_record

pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed (the CI installs it: .ci/run)")

OFFLINE = {"UV_OFFLINE": "1", "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "ALL_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # the project's .python-version: uv venv finds it

PYPROJECT = '''
[project]
name = "my-evals"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["groundeval"]

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["src/my_evals"]

[tool.pytest.ini_options]
groundeval_agent = "my_evals.agent:MyAgent"
groundeval_write_cases = "cases/write.json"
groundeval_data_dir = "bundles"
groundeval_thresholds = ["write.pass=1.0", "extraction.f1=1.0"]
# the suites this project gates on (the others need a judge model or a FHIR server)
addopts = ["-m", "not (reconciliation or letter or labs or orders)", "-p", "no:langsmith_plugin", "-p", "no:anyio"]
'''

AGENT = '''
"""My agent: reads the prompt (no key, no network). A write case: the note through groundeval's
offline writer; an extraction case: the active MedicationRequests' RxNorm codes."""
import json
import re

from pytest_groundeval.tasks.write_baseline import run_baseline_write


class MyAgent:
    name = "my-agent"

    def run(self, prompt):
        if "Bundle:\\n" in prompt:
            return json.dumps({"active_medications": self.active(json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0])})
        subject = re.search(r"for the patient (\\S+)\\.", prompt)[1]
        note = prompt.split("Clinical note:\\n", 1)[1]
        return "Here is the resource:\\n```json\\n" + json.dumps(run_baseline_write(note, subject)["resource"]) + "\\n```"

    @staticmethod
    def active(bundle):
        codes = []
        for entry in bundle.get("entry", []):
            r = entry.get("resource", {})
            if r.get("resourceType") == "MedicationRequest" and r.get("status") == "active":
                codes += [{"code": c["code"], "display": c["display"]} for c in r["medicationCodeableConcept"]["coding"]
                          if c["code"] not in [k["code"] for k in codes]]
        return codes
'''

SUITE = '''
import pytest


@pytest.mark.write
def test_my_write_cases(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''

UNIT = "def test_my_unit():\n    assert 'metformin'.upper() == 'METFORMIN'\n"

# a FHIR bundle written by hand: one active medication, one stopped
BUNDLE = {"resourceType": "Bundle", "type": "collection", "entry": [
    {"fullUrl": "urn:uuid:pat-1", "resource": {"resourceType": "Patient", "id": "pat-1",
                                               "name": [{"family": "Example", "given": ["Ada"]}]}},
    {"fullUrl": "urn:uuid:mr-1", "resource": {
        "resourceType": "MedicationRequest", "id": "mr-1", "status": "active", "intent": "order",
        "medicationCodeableConcept": {"coding": [{"system": "http://www.nlm.nih.gov/research/umls/rxnorm",
                                                  "code": "310965", "display": "Ibuprofen 200 MG Oral Tablet"}]},
        "subject": {"reference": "urn:uuid:pat-1"}, "authoredOn": "2024-03-01"}},
    {"fullUrl": "urn:uuid:mr-2", "resource": {
        "resourceType": "MedicationRequest", "id": "mr-2", "status": "stopped", "intent": "order",
        "medicationCodeableConcept": {"coding": [{"system": "http://www.nlm.nih.gov/research/umls/rxnorm",
                                                  "code": "197361", "display": "Amlodipine 5 MG Oral Tablet"}]},
        "subject": {"reference": "urn:uuid:pat-1"}, "authoredOn": "2023-01-01"}}]}

PASSING_CASE = "ibuprofen-two-tablets"  # the offline strategy gets it right
FAILING_CASE = "ibuprofen-denied"  # ... and this one wrong


def _write_case(name: str) -> dict:
    return json.loads((FIXTURES / "write_cases" / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def user_project(tmp_path_factory):
    """The project, with the built wheel under wheels/ and the locked dependencies in uv's
    cache; the workflow's install step has not run yet."""
    base = tmp_path_factory.mktemp("user-repo")
    dist = base / "dist"
    from conftest import ROOT

    _ok(_run([UV, "build", "--wheel", "--no-build-isolation", "-o", str(dist), str(ROOT)], ROOT, env=OFFLINE))
    wheel = next(dist.glob("groundeval-*.whl"))
    project, pins = _fresh_project(base, wheel)
    shutil.rmtree(project.path / ".venv")  # the workflow's install step makes it
    root = project.path
    (root / "wheels").mkdir()
    shutil.copy(wheel, root / "wheels" / wheel.name)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / ".python-version").write_text(PYTHON + "\n")
    (root / "src" / "my_evals").mkdir(parents=True)
    (root / "src" / "my_evals" / "__init__.py").write_text("")
    (root / "src" / "my_evals" / "agent.py").write_text(AGENT)
    (root / "cases").mkdir()
    (root / "cases" / "write.json").write_text(json.dumps([_write_case(PASSING_CASE)], indent=1))
    (root / "bundles").mkdir()
    (root / "bundles" / "ada-example.json").write_text(json.dumps(BUNDLE, indent=1))
    (root / "evals").mkdir()
    (root / "evals" / "test_write.py").write_text(SUITE)
    (root / "evals" / "test_units.py").write_text(UNIT)
    return root, pins


class Runner:
    """The workflow's jobs in one workspace: its run steps through bash, as GitHub runs them."""

    def __init__(self, root: Path, pins: Path, context: dict) -> None:
        self.root, self.context = root, context
        self.workflow = load(USER_WORKFLOW.read_text())
        # the locked versions (a user's uv.lock does the same): resolved offline from uv's cache
        self.env = {**OFFLINE, "UV_CONSTRAINT": str(pins)}
        self.installed = False
        self.log: list[tuple[str, int, str]] = []  # (step, exit status, output)

    def functions(self) -> dict:
        return {"format": lambda f, *a: re.sub(r"\{(\d+)\}", lambda m: str(a[int(m[1])]), f),
                "hashFiles": lambda *pats: "f00d" if any(any(self.root.glob(p)) for p in pats) else "",
                "cancelled": lambda: False, "always": lambda: True, "success": lambda: True, "failure": lambda: False}

    def _env(self, *scopes: dict | None) -> dict[str, str]:
        env = {}
        for scope in scopes:
            for k, v in (scope or {}).items():
                value = evaluate(v, self.context, self.functions())
                env[k] = "" if value is None else str(value)
        return env

    def job(self, name: str, shard: int | None = None) -> dict[str, int]:
        """Run one job's steps; the exit status of each run step, by the program it runs."""
        self.context["matrix"] = {"shard": shard}
        job = self.workflow["jobs"][name]
        assert condition(job.get("if"), self.context, self.functions())
        statuses = {}
        for step in job["steps"]:
            if not condition(step.get("if"), self.context, self.functions()):
                continue
            if "run" not in step:
                self._uses(step)
                continue
            script = evaluate(step["run"], self.context, self.functions())
            programs = [program(w)[0] for w in commands(script)]
            if "gh" in programs:
                continue  # (the gh steps: test_example_workflows.py, against a stand-in gh)
            if "uv" in programs and self.installed:
                continue  # the install step: one workspace here, one machine per job on GitHub
            env = self._env(self.workflow.get("env"), job.get("env"), step.get("env"))
            proc = _run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], self.root,
                        env={**self.env, **env, "PATH": f"{Path(UV).parent}:{os.environ['PATH']}"}, timeout=300)
            self.log.append((step.get("name", "?"), proc.returncode, proc.stdout[-3000:] + proc.stderr[-3000:]))
            key = next(p for p in programs if p in ("uv", "pytest", "groundeval"))
            key = f"{key} {commands(script)[programs.index(key)][1]}" if key == "groundeval" else key
            statuses[key] = proc.returncode
            self.installed = self.installed or key == "uv"
        return statuses

    def _uses(self, step: dict) -> None:
        action = step["uses"].split("@")[0]
        if action == "actions/download-artifact":  # every shard's record into shards/
            (self.root / "shards").mkdir(exist_ok=True)
            for record in self.root.glob("shard-*.json"):
                shutil.copy(record, self.root / "shards" / record.name)

    def run(self) -> dict[str, list[int]]:
        """Both shards, then the merge job: the exit statuses of their run steps."""
        for stale in ("shards", "run.json", "compare.md"):
            path = self.root / stale
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        ran: dict[str, list[int]] = {}
        for name, shard in (("shard", 1), ("shard", 2), ("merge", None)):
            for key, status in self.job(name, shard).items():
                ran.setdefault(key, []).append(status)
        return ran


def _record(root: Path) -> dict:
    rec = json.loads((root / "run.json").read_text())
    assert validate_record(rec) == []
    return rec


def _junit_classnames(root: Path) -> set[str]:
    return {m for shard in (1, 2) for m in re.findall(r'classname="([^"]*)"', (root / f"junit-{shard}.xml").read_text())}


def test_the_user_workflow_runs_end_to_end_and_gates_the_merged_run(user_project):
    root, pins = user_project
    push = Runner(root, pins, event("push"))
    ran = push.run()
    log = "\n".join(f"--- {name}: exit {status}\n{out}" for name, status, out in push.log)
    assert ran == {"uv": [0], "pytest": [0, 0], "groundeval merge": [0]}, log
    rec = _record(root)
    # every case once: the bundled suites' under their ids, the project's own suite's namespaced by it
    ids = sorted((c["task"], c["case_id"]) for c in rec["cases"])
    assert ids == sorted([("extraction", "ada-example"), ("write", PASSING_CASE),
                          ("write", f"evals.test_write/{PASSING_CASE}")]), log
    assert all(c["outcome"] == "passed" for c in rec["cases"])
    assert rec["agent"] == "my-agent (my_evals.agent:MyAgent)"
    assert rec["gate"]["passed"] is True and rec["completeness"]["cut_short"] is False
    assert not rec.get("reruns")
    assert "ran again" not in log  # no rerun reported: no id is shared by two items
    assert _junit_classnames(root) >= {"groundeval.write", "groundeval.extraction", "evals.test_write"}
    assert not any(".venv" in c or "site-packages" in c for c in _junit_classnames(root))
    (root / "main").mkdir(exist_ok=True)
    shutil.copy(root / "run.json", root / "main" / "run.json")  # main's last passing record

    # a pull request adds a case the agent gets wrong: write.pass=1.0 is missed
    (root / "cases" / "write.json").write_text(json.dumps([_write_case(PASSING_CASE), _write_case(FAILING_CASE)]))
    pr = Runner(root, pins, event("pr"))
    pr.installed = True
    ran = pr.run()
    log = "\n".join(f"--- {name}: exit {status}\n{out}" for name, status, out in pr.log)
    # the shard step lets pytest's 1 (a case failed) through: the merged run's gate judges
    assert ran["pytest"] == [0, 0] and ran["groundeval merge"] == [1], log
    assert any(" failed" in out for name, _, out in pr.log if name.startswith("Run shard")), log
    assert ran["groundeval compare"] == [0], log
    rec = _record(root)
    assert rec["gate"]["passed"] is False and rec["completeness"]["cut_short"] is False
    assert "write.pass" in json.dumps(rec["gate"])
    ids = sorted(c["case_id"] for c in rec["cases"] if c["task"] == "write")
    assert ids == sorted([PASSING_CASE, FAILING_CASE, f"evals.test_write/{PASSING_CASE}",
                          f"evals.test_write/{FAILING_CASE}"])
    failed = sorted(c["case_id"] for c in rec["cases"] if c["outcome"] != "passed")
    assert failed == sorted([FAILING_CASE, f"evals.test_write/{FAILING_CASE}"])
    comment = (root / "compare.md").read_text()  # the pull request's comment: a markdown table
    assert "#### write (2 cases)" in comment and "2 only in NEW" in comment, comment  # the added case's 2 ids
