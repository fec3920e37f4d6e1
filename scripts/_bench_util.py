"""Shared helpers for the run-level benchmarks (bench_overhead, bench_scale, bench_concurrency,
bench_memory, bench_cache).

Each benchmark builds a throw-away pytest project in a temp folder (a copy of the committed
eval files, a ``pytest.ini``, generated bundle files, sometimes an agents module), runs
``sys.executable -m pytest`` in it as a child process, and reads the wall time, the child's
peak RSS (``os.wait4``) and the JSON run record. Nothing here asserts on time: the machine
is shared, so the scripts print side-by-side numbers and ratios.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
SYNTHEA = ROOT / "fixtures" / "synthea"
WRITE_CASES = ROOT / "fixtures" / "write_cases"
EVALS = ROOT / "evals"

# env vars that could make a child talk to the network or a real account
_SCRUB_PREFIXES = ("LANGSMITH_", "LANGCHAIN_", "ANTHROPIC_", "OPENAI_")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_NS = uuid.UUID("7d0c3a52-3a8e-4c55-9f0e-6b1f2f3f9a11")  # fixed namespace: generated files are reproducible

GIVEN = ["Ada", "Bo", "Cyd", "Dee", "Eli", "Fay", "Gus", "Hal", "Ida", "Jo", "Kai", "Liv", "Max", "Noa", "Oz"]
FAMILY = ["Benchly", "Casewell", "Datum", "Evalson", "Fixture", "Gauge", "Harness", "Metric"]


class BenchFailure(SystemExit):
    """A run failed outright (crash, usage error, missing record): the script exits 1."""

    def __init__(self, message: str) -> None:
        print(f"\nBENCH FAILURE: {message}", file=sys.stderr)
        super().__init__(1)


# ------------------------------------------------------------------ the temp project
@contextmanager
def temp_project(prefix: str = "groundeval-bench-", keep: bool = False) -> Iterator[Path]:
    """A temp folder with a ``pytest.ini`` (so the rootdir is the folder itself), removed after."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        # the same plugin opt-outs as groundeval's own pyproject.toml (unused plugins that
        # cost ~1.5 s of start-up), so every run below starts like `pytest evals` does here
        (tmp / "pytest.ini").write_text("[pytest]\naddopts = -p no:langsmith_plugin -p no:anyio\n")
        yield tmp
    finally:
        if keep:
            print(f"(kept {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def copy_evals(project: Path, names: Sequence[str] = ("test_extraction.py",)) -> None:
    for name in names:
        shutil.copy(EVALS / name, project / name)


def fixtures() -> list[Path]:
    return sorted(SYNTHEA.glob("*.json"))


def smallest_fixture_with_meds() -> Path:
    """The smallest committed bundle whose ground truth is not empty (so scoring means something)."""
    sys.path.insert(0, str(ROOT))
    from pytest_groundeval.tasks.extraction import active_medications

    for path in sorted(fixtures(), key=lambda p: p.stat().st_size):
        if active_medications(json.loads(path.read_bytes()), path.name):
            return path
    raise BenchFailure("no committed fixture has an active medication")


def fixture_with_meds(which: str = "median") -> Path:
    """A committed bundle with at least one active medication: ``smallest``, ``median``
    (by size among those with medications; the default, a representative case),
    ``largest``, or a file name in fixtures/synthea."""
    if which not in ("smallest", "median", "largest"):
        path = SYNTHEA / which
        if not path.is_file():
            raise BenchFailure(f"no fixture {which!r} in {SYNTHEA}")
        return path
    sys.path.insert(0, str(ROOT))
    from pytest_groundeval.tasks.extraction import active_medications

    with_meds = [p for p in sorted(fixtures(), key=lambda p: p.stat().st_size)
                 if active_medications(json.loads(p.read_bytes()), p.name)]
    if not with_meds:
        raise BenchFailure("no committed fixture has an active medication")
    return {"smallest": with_meds[0], "median": with_meds[len(with_meds) // 2], "largest": with_meds[-1]}[which]


def truth_of(source: Path) -> list[dict[str, str]]:
    sys.path.insert(0, str(ROOT))
    from pytest_groundeval.tasks.extraction import active_medications

    return active_medications(json.loads(source.read_bytes()), source.name)


def copy_bundles(folder: Path, source: Path, n: int) -> None:
    """``n`` files holding the same bundle under distinct names."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = source.read_bytes()
    for i in range(n):
        (folder / f"case-{i:05d}.json").write_bytes(raw)


def tagged_bundles(folder: Path, source: Path, n: int) -> None:
    """``n`` copies of one bundle, each with a top-level ``"id": "bench-<i>"`` put first (the
    clinical content and so the ground truth are unchanged), so an agent can tell the cases
    apart from the start of the bundle text in its prompt, cheaply and deterministically."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = source.read_bytes().lstrip()
    if not raw.startswith(b"{"):
        raise BenchFailure(f"{source.name} is not a JSON object")
    body = raw[1:]
    for i in range(n):
        (folder / f"case-{i:05d}.json").write_bytes(b'{"id": "bench-%05d",' % i + body)


def linked_bundles(folder: Path, source: Path, n: int) -> None:
    """``n`` hard links to one bundle (no disk cost), for benchmarks that only list files
    (collection); falls back to copies where hard links are not possible."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        target = folder / f"case-{i:05d}.json"
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)


# ------------------------------------------------------------------ benchmark agents
AGENTS_MODULE = '''"""Benchmark agents (generated by scripts/_bench_util.py). Every bundle in the data dir is a
copy of the same fixture, so the right answer is precomputed: the agents cost ~nothing and
what is timed is the harness."""
import os
import time

ANSWER = {answer!r}   # the right answer for the copied fixture
OMITTED = {omitted!r}  # one code left out: a scored failure ("missed")
EXTRA = {extra!r}      # one code made up: a scored failure ("hallucinated")


class Instant:
    """Answers right, immediately."""
    name = "instant"

    def run(self, prompt):
        return ANSWER


class Sleepy:
    """Sleeps BENCH_LATENCY seconds (a model's latency), then answers right."""
    name = "sleepy"

    def __init__(self):
        self.latency = float(os.environ["BENCH_LATENCY"])

    def run(self, prompt):
        time.sleep(self.latency)
        return ANSWER


class MostlyWrong:
    """Wrong for 5 cases in 7 (71%), by case index (the bundle's "bench-<i>" id, see
    tagged_bundles): i % 7 in 0,2,4 omits a code, 1,3 hallucinates one, 5,6 answer right."""
    name = "mostly-wrong"

    def run(self, prompt):
        at = prompt.find("Bundle:\\n") + 8
        head = prompt[at:at + 40]
        i = int(head.split('"bench-', 1)[1][:5])
        r = i % 7
        if r >= 5:
            return ANSWER
        return OMITTED if r % 2 == 0 else EXTRA
'''


def write_agents(project: Path, source: Path, module: str = "bench_agents") -> list[dict[str, str]]:
    """Write the benchmark agents module (``--agent=bench_agents:Instant`` etc.) for ``source``."""
    truth = truth_of(source)
    if not truth:
        raise BenchFailure(f"{source.name} has no active medication: a wrong answer could not be told apart")
    key = "active_medications"
    answer = json.dumps({key: truth})
    omitted = json.dumps({key: truth[1:]})
    extra = json.dumps({key: truth + [{"code": "999999999", "display": "Hallucinated 10 MG Oral Tablet"}]})
    (project / f"{module}.py").write_text(AGENTS_MODULE.format(answer=answer, omitted=omitted, extra=extra))
    return truth


PLAIN_TEST = '''"""The plain-pytest counterpart of the extraction suite: one parametrized item per bundle
file of $BENCH_DATA (listed like groundeval lists them), each doing what a plain test of
that data would: read the file, parse it with orjson, assert on it."""
import os

import orjson
import pytest

DATA = os.environ["BENCH_DATA"]
with os.scandir(DATA) as it:
    PATHS = sorted(e.path for e in it if e.name.endswith(".json"))


@pytest.mark.parametrize("path", PATHS, ids=[os.path.basename(p)[:-5] for p in PATHS])
def test_plain(path):
    with open(path, "rb") as f:
        bundle = orjson.loads(f.read())
    assert bundle["resourceType"] == "Bundle" and bundle["entry"]
'''


def write_plain_test(project: Path, name: str = "test_plain.py") -> Path:
    (project / name).write_text(PLAIN_TEST)
    return project / name


INSPECT_SCRIPT = '''"""The inspect_ai counterpart of the extraction suite (generated by scripts/_bench_util.py):
one Sample per bundle file of the data dir (read and put into the same prompt), a solver that
answers like bench_agents (instant: at once; sleepy: after an asyncio sleep of the latency),
a scorer that parses the answer JSON and compares its RxNorm codes with the target's, and
inspect's own eval log. Usage: python inspect_bench.py DATA_DIR LOG_DIR instant|sleepy LATENCY MAX_SAMPLES"""
import asyncio
import json
import os
import sys

from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import CORRECT, INCORRECT, Score, accuracy, scorer
from inspect_ai.solver import solver

from bench_agents import ANSWER

PROMPT = {prompt!r}
data, log_dir, mode, latency, max_samples = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])


def samples():
    with os.scandir(data) as it:
        paths = sorted(e.path for e in it if e.name.endswith(".json"))
    for path in paths:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        yield Sample(id=os.path.basename(path)[:-5], input=PROMPT.replace("{{bundle}}", text), target=ANSWER)


@solver
def bench_agent():
    async def solve(state, generate):
        if mode == "sleepy":
            await asyncio.sleep(latency)
        state.output = ModelOutput.from_content(model="bench", content=ANSWER)
        return state
    return solve


@scorer(metrics=[accuracy()])
def codes():
    async def score(state, target):
        got = {{i["code"] for i in json.loads(state.output.completion)["active_medications"]}}
        want = {{i["code"] for i in json.loads(target.text)["active_medications"]}}
        return Score(value=CORRECT if got == want else INCORRECT)
    return score


task = Task(dataset=MemoryDataset(list(samples())), solver=bench_agent(), scorer=codes())
[log] = inspect_eval(task, model="mockllm/model", display="none", log_dir=log_dir, max_samples=max_samples,
                     log_level="error")
n = len(log.samples or [])
right = sum(1 for s in log.samples or [] for v in (s.scores or {{}}).values() if v.value == CORRECT)
if log.status != "success" or right != n:
    sys.exit(f"inspect run: status {{log.status}}, {{right}}/{{n}} samples right")
print(f"inspect: {{n}} samples, {{right}} right")
'''


def write_inspect_script(project: Path, name: str = "inspect_bench.py") -> Path:
    """The inspect_ai side (needs bench_agents, :func:`write_agents`): the extraction prompt as the groundeval suite
    builds it, over the same files."""
    sys.path.insert(0, str(ROOT))
    from pytest_groundeval.fhir.medications import RXNORM
    from pytest_groundeval.tasks.extraction import ANSWER_KEY, PROMPT

    prompt = PROMPT.replace("{bundle}", "\x00").format(rxnorm=RXNORM, key=ANSWER_KEY).replace("\x00", "{bundle}")
    (project / name).write_text(INSPECT_SCRIPT.format(prompt=prompt))
    return project / name


def inspect_command(python: str, project: Path, data: Path, mode: str = "instant", latency: float = 0.0,
                    max_samples: int = 1) -> list[str]:
    return [python, str(project / "inspect_bench.py"), str(data), str(project / "inspect-logs"), mode, str(latency),
            str(max_samples)]


def reidentify(text: str, index: int) -> str:
    """The same clinical content as a different patient: every UUID (resource ids, ``urn:uuid:``
    references, identifier values equal to ids) is replaced consistently by uuid5(index, old),
    and the patient's name is changed."""
    mapping: dict[str, str] = {}

    def sub(m: re.Match) -> str:
        old = m.group(0).lower()
        if old not in mapping:
            mapping[old] = str(uuid.uuid5(_NS, f"{index}:{old}"))
        return mapping[old]

    bundle = json.loads(_UUID.sub(sub, text))
    for entry in bundle.get("entry") or []:
        res = entry.get("resource") or {}
        if res.get("resourceType") == "Patient":
            res["name"] = [{"use": "official", "family": f"{FAMILY[index % len(FAMILY)]}{index}",
                            "given": [GIVEN[index % len(GIVEN)]]}]
    return json.dumps(bundle, ensure_ascii=False)


def reidentified_bundles(folder: Path, n: int) -> None:
    """``n`` distinct patients, cycling through the committed fixtures."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = [p.read_text(encoding="utf-8") for p in fixtures()]
    for i in range(n):
        (folder / f"patient-{i:05d}.json").write_text(reidentify(sources[i % len(sources)], i), encoding="utf-8")


# ------------------------------------------------------------------ the environments
RUNTIME_VENV = ROOT / ".venv-runtime"  # `uv sync --locked --no-dev`: what a user's install runs
INSPECT_VENV = ROOT / ".venv-inspect"  # inspect_ai alone (its locked version), for the peer side
CHILD_PYTHON = sys.executable  # the interpreter of every pytest child (use_runtime_env() sets it)


def venv_python(folder: Path, *groups: str) -> str:
    """The interpreter of ``folder``, synced first: ``uv sync --locked --no-dev`` (plus
    ``--group G`` for each of ``groups``) with ``UV_PROJECT_ENVIRONMENT=folder``, so the
    benchmark never measures the dev environment's extra pytest plugins."""
    uv = shutil.which("uv") or "uv"
    cmd = [uv, "sync", "--locked", "--no-dev", "--quiet", *[a for g in groups for a in ("--group", g)]]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["UV_PROJECT_ENVIRONMENT"] = str(folder)
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchFailure(f"{' '.join(cmd)} (UV_PROJECT_ENVIRONMENT={folder}) failed:\n{done.stderr[-2000:]}")
    return str(folder / "bin" / "python")


def use_runtime_env(dev: bool = False) -> str:
    """Run the pytest children in the runtime environment (``.venv-runtime``, no dev group),
    or with ``dev`` in this interpreter's. Prints which, and its pytest plugins."""
    global CHILD_PYTHON
    CHILD_PYTHON = sys.executable if dev else venv_python(RUNTIME_VENV)
    plugins = subprocess.run([CHILD_PYTHON, "-c", "import importlib.metadata as m; print(' '.join(sorted("
                              "e.name for e in m.entry_points(group='pytest11'))))"],
                             capture_output=True, text=True).stdout.strip()
    print(f"pytest children: {CHILD_PYTHON} ({'this, the dev environment' if dev else 'runtime env, --no-dev'}; "
          f"pytest11 plugins: {plugins})")
    return CHILD_PYTHON


def locked_version(name: str) -> str:
    """``name``'s version in uv.lock (the ``bench`` group pins inspect-ai there)."""
    m = re.search(rf'\nname = "{re.escape(name)}"\nversion = "([^"]+)"', (ROOT / "uv.lock").read_text(encoding="utf-8"))
    if m is None:
        raise BenchFailure(f"{name} is not in uv.lock")
    return m.group(1)


def inspect_python() -> str:
    """The interpreter of inspect_ai's own clean environment (``.venv-inspect``: ``uv venv`` with
    only ``inspect-ai==<locked>`` and what it depends on, none of groundeval's dependencies),
    made once and reused while its marker names the same version. Prints which."""
    version = locked_version("inspect-ai")
    python = INSPECT_VENV / "bin" / "python"
    marker = INSPECT_VENV / ".groundeval-bench"
    want = f"inspect-ai=={version}\n"
    if not (python.exists() and marker.exists() and marker.read_text() == want):
        uv = shutil.which("uv") or "uv"
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        for cmd in ([uv, "venv", "--quiet", "--clear", "--python", f"{sys.version_info[0]}.{sys.version_info[1]}",
                     str(INSPECT_VENV)],
                    [uv, "pip", "install", "--quiet", "--python", str(python), f"inspect-ai=={version}"]):
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise BenchFailure(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        marker.write_text(want)
    leaked = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in ('pytest_groundeval', "
                             "'fhir', 'healthchain', 'langgraph') if u.find_spec(m)])"], capture_output=True, text=True,
                            cwd=tempfile.gettempdir(), env=child_env())  # (not this checkout's folder on its path)
    print(f"inspect_ai side: {python} (inspect-ai=={version} alone; groundeval's packages importable there: "
          f"{leaked.stdout.strip() or leaked.stderr.strip()[-200:]})")
    return str(python)


bench_env_python = inspect_python  # (the old name: inspect_ai's side, now in its own clean environment)


# a plugin the children load with -p bench_rss: their own peak RSS (getrusage RUSAGE_SELF),
# written at the very end of the session to $BENCH_RSS_OUT
# (Linux: VmHWM of /proc/self/status, the peak of this process's own memory since its exec;
# ru_maxrss is not: the kernel carries the peak of the memory an exec replaced into it, so a child
# started with vfork (subprocess's default) reads its parent's peak when that was higher)
RSS_PLUGIN = '''import os, resource, sys


def own_peak_rss():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def pytest_unconfigure(config):
    out = os.environ.get("BENCH_RSS_OUT")
    if out:
        with open(out, "w") as f:
            f.write(str(own_peak_rss()))
'''

# a plugin the children load with -p bench_shipped: the verdicts file at $BENCH_SHIPPED stands in
# for the package's shipped one (pytest_groundeval/fhir/shipped.py), so N generated bundles start
# as the bundled suites do on a fresh machine (nothing on disk, every verdict shipped)
SHIPPED_PLUGIN = '''import os
from pathlib import Path

from pytest_groundeval.fhir import shipped

shipped.PATH = Path(os.environ["BENCH_SHIPPED"])
'''


def write_shipped(project: Path, folders: Sequence[Path]) -> dict[str, str]:
    """The ``-p bench_shipped`` plugin in ``project`` and a verdicts file for every bundle of
    ``folders`` (each validated here, with the package's own check); the env vars a child needs."""
    sys.path.insert(0, str(ROOT))
    from make_shipped_verdicts import document
    from pytest_groundeval.fhir import shipped
    from pytest_groundeval.tasks.datasets import bundle_files

    files = [(f"{folder.name}/{p.name}", p.read_bytes()) for folder in folders for p in bundle_files(folder)]
    path = project / "bench-shipped-verdicts.json"
    path.write_text(shipped.dumps(document(files)), encoding="utf-8")
    (project / "bench_shipped.py").write_text(SHIPPED_PLUGIN)
    return {"BENCH_SHIPPED": str(path), "PYTHONPATH": str(project)}


def all_of(*checks: Any):
    """One ``Config.check`` that runs each of ``checks``."""
    def check(run: Any) -> None:
        for c in checks:
            c(run)
    return check


def no_validation(project: Path, label: str):
    """A check that a run validated no bundle: nothing stored under ``.groundeval/bundles``."""
    def check(run) -> None:
        stored = list((project / ".groundeval" / "bundles").rglob("*.bin"))
        if stored:
            raise BenchFailure(f"run {label!r} validated {len(stored)} bundles (expected every verdict shipped)")
    return check


# ------------------------------------------------------------------ running pytest
def child_env(**extra: str) -> dict[str, str]:
    """The current environment minus API keys / tracing settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)}
    env.update(extra)
    return env


@dataclass
class Run:
    label: str
    args: list[str]
    rc: int
    wall: float
    max_rss: int  # bytes, of the pytest process itself (not xdist workers)
    stdout: str
    stderr: str
    own_rss: int | None = None  # bytes: the child's own peak RSS, read by itself (own_rss=True)

    def tail(self, n: int = 3000) -> str:
        return f"--- stdout (tail) ---\n{self.stdout[-n:]}\n--- stderr (tail) ---\n{self.stderr[-n:]}"


def run_pytest(project: Path, args: Sequence[str], *, label: str = "", env: dict[str, str] | None = None,
               ok: Sequence[int] = (0,), pre: Sequence[str] = (), own_rss: bool = False) -> Run:
    """Run ``python -m pytest`` in ``project``, timed, and read the child's peak RSS
    (``own_rss``: also as the child reads it itself, ``-p bench_rss``).
    A return code outside ``ok`` is a BenchFailure (the run failed outright)."""
    rss_out = None
    env = dict(env or child_env())
    if own_rss:
        (project / "bench_rss.py").write_text(RSS_PLUGIN)
        rss_out = project / f".rss-{uuid.uuid4().hex}"
        env["BENCH_RSS_OUT"] = str(rss_out)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project), env.get("PYTHONPATH")]))
        args = ["-p", "bench_rss", *args]
    cmd = python_cmd(project, args, pre=pre)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=project, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    run = Run(label or " ".join(args), list(args), proc.returncode, wall, usage.ru_maxrss * scale, stdout, stderr)
    if run.rc not in ok:
        raise BenchFailure(f"run {run.label!r} exited {run.rc} (expected {list(ok)})\n"
                           f"command: {' '.join(cmd)}\n{run.tail()}")
    if rss_out is not None:
        try:
            run.own_rss = int(rss_out.read_text())
            rss_out.unlink()
        except (OSError, ValueError):
            raise BenchFailure(f"run {run.label!r} did not report its own peak RSS\n{run.tail()}") from None
    return run


def python_cmd(project: Path, args: Sequence[str], *, pre: Sequence[str] = ()) -> list[str]:
    """The child command of :func:`run_pytest` (``pre``: interpreter options, e.g. ``-m cProfile -o F``)."""
    return [CHILD_PYTHON, *pre, "-m", "pytest", "-c", str(project / "pytest.ini"), f"--rootdir={project}",
            "-p", "no:cacheprovider", "-q", *args]


def startup_time(project: Path, args: Sequence[str], repeat: int = 3, env: dict[str, str] | None = None) -> float:
    """Best of ``repeat`` ``pytest --collect-only`` runs: process start-up, imports, collection."""
    return min(run_pytest(project, ["--collect-only", *args], label="collect-only", env=env).wall
               for _ in range(repeat))


@dataclass
class Config:
    """One pytest command to time: ``args`` run in ``project`` with ``env``."""
    label: str
    project: Path
    args: list[str]
    env: dict[str, str] | None = None
    ok: Sequence[int] = (0,)
    check: Any = None  # called with the Run of every repetition (e.g. to read its record)
    before: Any = None  # called before every repetition (e.g. to empty a cache: a cold run)
    command: Sequence[str] | None = None  # a command other than pytest (paired_walls only)


def best_walls(configs: Sequence[Config], repeat: int, *, verbose: bool = True) -> dict[str, float]:
    """The minimum wall time of each config over ``repeat`` rounds. The configs run
    interleaved (round-robin, A B C A B C ...), so machine noise hits all of them alike;
    the minimum is the least noisy estimate on a shared machine."""
    best = {c.label: float("inf") for c in configs}
    for r in range(repeat):
        for c in configs:
            run = run_pytest(c.project, c.args, label=c.label, env=c.env, ok=c.ok)
            if c.check is not None:
                c.check(run)
            best[c.label] = min(best[c.label], run.wall)
            if verbose:
                print(f"    round {r + 1}/{repeat}  {c.label:<44} {run.wall:7.2f} s", flush=True)
    return best


def paired_walls(configs: Sequence[Config], rounds: int, *, verbose: bool = True) -> list[dict[str, float]]:
    """Every config once per round, the order rotated each round (round r starts at config
    r mod k), so drift and neighbours' load hit every config alike; one {label: wall} per
    round. Ratios are taken within a round (paired) and their median over the rounds kept."""
    out = []
    k = len(configs)
    for r in range(rounds):
        walls: dict[str, float] = {}
        for c in [*configs[r % k:], *configs[:r % k]]:
            if c.before is not None:
                c.before()
            run = run_pytest(c.project, c.args, label=c.label, env=c.env, ok=c.ok) if c.command is None \
                else run_command(c.command, c.project, label=c.label, env=c.env)
            if c.check is not None:
                c.check(run)
            walls[c.label] = run.wall
            if verbose:
                print(f"    round {r + 1}/{rounds}  {c.label:<52} {run.wall:7.2f} s", flush=True)
        out.append(walls)
    return out


def median_walls(configs: Sequence[Config], rounds: int, *, verbose: bool = True) -> dict[str, float]:
    """:func:`paired_walls`, each config's median wall over the rounds."""
    per_round = paired_walls(configs, rounds, verbose=verbose)
    return {c.label: median([w[c.label] for w in per_round]) for c in configs}


def median(values: Sequence[float]) -> float:
    import statistics

    return statistics.median(values)


def run_command(cmd: Sequence[str], cwd: Path, *, label: str, env: dict[str, str] | None = None) -> Run:
    """Any child command, timed (wall, peak RSS from ``os.wait4``); exit status 0 required."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=out, stderr=err, env=env or child_env())
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        rc = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read().decode("utf-8", "replace") for f in (out, err))
    scale = 1 if sys.platform == "darwin" else 1024
    run = Run(label, list(cmd), rc, wall, usage.ru_maxrss * scale, stdout, stderr)
    if rc != 0:
        raise BenchFailure(f"run {label!r} exited {rc}\ncommand: {' '.join(cmd)}\n{run.tail()}")
    return run


def per_case(wall_n: float, wall_n0: float, n: int, n0: int) -> float:
    """(wall(N) - wall(N0)) / (N - N0): the cost of one more case, start-up cancelled."""
    return (wall_n - wall_n0) / (n - n0)


def goal(text: str, ratio: float, limit: float, *, at_least: bool = False) -> bool:
    """Print the one goal line of a benchmark: ``goal: <text>: ratio X (goal <= Y) met/missed``
    (``at_least``: the goal is ratio >= Y, e.g. a speed-up)."""
    ok = ratio >= limit if at_least else ratio <= limit
    print(f"goal: {text}: ratio {ratio:.2f}x (goal {'>=' if at_least else '<='} {limit:g}x) {'met' if ok else 'MISSED'}")
    return ok


# ------------------------------------------------------------------ profiles
def profile_run(project: Path, args: Sequence[str], out: Path, *, label: str = "", env: dict[str, str] | None = None,
                ok: Sequence[int] = (0,)) -> Run:
    """``python -m cProfile -o out -m pytest ...`` (the same command as :func:`run_pytest`)."""
    return run_pytest(project, args, label=label or f"cProfile {out.name}", env=env, ok=ok,
                      pre=["-m", "cProfile", "-o", str(out)])


def load_profile(path: Path) -> dict[tuple[str, int, str], tuple[int, int, float, float]]:
    """{(file, line, function): (primitive calls, calls, tottime, cumtime)}."""
    import pstats

    return {k: v[:4] for k, v in pstats.Stats(str(path)).stats.items()}  # type: ignore[attr-defined]


def func_label(key: tuple[str, int, str], width: int = 70) -> str:
    file, line, name = key
    if file == "~":  # a builtin / C function: pstats spells it {built-in method ...} / {method ...}
        text = name
    else:
        parts = Path(file).parts
        for anchor in ("site-packages", "lib"):
            if anchor in parts:
                i = len(parts) - 1 - parts[::-1].index(anchor)
                parts = parts[i + 1:]
                break
        else:
            parts = parts[-2:]
        text = f"{'/'.join(parts)}:{line}({name})"
    return text if len(text) <= width else "..." + text[-(width - 3):]


def matches(key: tuple[str, int, str], packages: Sequence[str]) -> bool:
    file, _, name = key
    text = f"{file} {name}"
    return any(p in text for p in packages)


def print_top(stats: dict, *, by: str = "tottime", top: int = 25, packages: Sequence[str] | None = None,
              per: int | None = None, title: str = "") -> None:
    """The ``top`` entries by ``tottime`` or ``cumtime`` (optionally only files/functions
    whose path or name contains one of ``packages``), with µs per case when ``per`` is given."""
    col = 2 if by == "tottime" else 3
    rows = [(k, v) for k, v in stats.items() if packages is None or matches(k, packages)]
    rows.sort(key=lambda kv: kv[1][col], reverse=True)
    if title:
        print(title)
    headers = ["function", "calls", "tottime s", "cumtime s"] + (["tot µs/case", "cum µs/case"] if per else [])
    out = []
    for k, (cc, nc, tt, ct) in rows[:top]:
        row = [func_label(k), f"{nc}" if nc == cc else f"{nc}/{cc}", f"{tt:.3f}", f"{ct:.3f}"]
        if per:
            row += [f"{tt / per * 1e6:.1f}", f"{ct / per * 1e6:.1f}"]
        out.append(row)
    table(headers, out)


def diff_profiles(big: dict, small: dict) -> dict:
    """``big`` minus ``small`` per function (calls, tottime, cumtime): what the extra cases cost."""
    out = {}
    for k, (cc, nc, tt, ct) in big.items():
        s = small.get(k, (0, 0, 0.0, 0.0))
        out[k] = (cc - s[0], nc - s[1], tt - s[2], ct - s[3])
    return out


# ------------------------------------------------------------------ run records
def read_record(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BenchFailure(f"no readable run record at {path}: {e}") from None


def outcomes(record: dict[str, Any]) -> Counter:
    return Counter(c["outcome"] for c in record.get("cases", []))


def usage_counts(record: dict[str, Any]) -> Counter:
    """Per-case usage summed: model_calls, cache_hits, tokens."""
    total: Counter = Counter()
    for c in record.get("cases", []):
        for k, v in (c.get("usage") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                total[k] += v
    return total


def expect_cases(record: dict[str, Any], label: str, n: int, passed: bool = False) -> Counter:
    """Check a record has ``n`` cases (all passed if ``passed``), else BenchFailure."""
    got = outcomes(record)
    total = sum(got.values())
    if total != n or (passed and got.get("passed", 0) != n):
        want = f"{n} passed" if passed else f"{n} cases"
        raise BenchFailure(f"run {label!r}: record has {dict(got)}, expected {want}")
    if record.get("schema_errors"):
        raise BenchFailure(f"run {label!r}: record has schema errors {record['schema_errors'][:5]}")
    return got


# ------------------------------------------------------------------ output
def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for j, r in enumerate(cells):
        print("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            print("  " + "  ".join("-" * w for w in widths))


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def verdict(ok: bool) -> str:
    return "goal met" if ok else "goal missed"
