"""``groundeval compare BASE NEW``: paired comparison of two runs (records or journals).

Records come from real runs of the plugin (a project over the 45 committed Synthea bundles,
scripted agents from conftest plus two of this file's), or are made from such records by
editing their case dicts (a case left out, a content hash changed, a dimension failed)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import AGENTS, EVAL_FILE, ROOT, SYNTHEA

from pytest_groundeval.reporting import compare
from pytest_groundeval.reporting.compare import LoadedRun, RunInfo, compare_task, mcnemar_p, read_run
from pytest_groundeval.model import CaseResult

FAST = ("-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-p", "no:anyio")
EXTRA_AGENTS = '''
import hashlib

def _odd(prompt):
    return int(hashlib.sha256(_patient(prompt).encode()).hexdigest(), 16) % 2 == 1

class HalfWrong:
    """Right for about half the patients, one hallucinated code for the others."""
    name = "half-wrong"
    def run(self, prompt):
        meds = _truth(prompt)
        if _odd(prompt):
            meds = meds + [{"code": "198440", "display": "Acetaminophen 500 MG Oral Tablet"}]
        return json.dumps({"active_medications": meds})
'''
HALLUCINATED = "hallucinated ['198440']"


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *FAST, *args], cwd=project, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Extraction over every committed bundle (45) with four agents, a run cut short by -x
    (its journal kept), and the packaged write and reconciliation suites with the baseline."""
    project = tmp_path_factory.mktemp("compare")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_evals.py").write_text(EVAL_FILE)
    for suite in ("test_write.py", "test_reconciliation.py"):
        shutil.copy(ROOT / "evals" / suite, project / suite)
    (project / "agents_under_test.py").write_text(AGENTS + EXTRA_AGENTS)
    (project / "data").mkdir()
    for bundle in sorted(SYNTHEA.glob("*.json")):
        shutil.copy(bundle, project / "data" / bundle.name)
    ext = ("test_evals.py", "--data-dir", "data")
    runs = {
        "correct": (*ext, "--agent", "agents_under_test:Correct"),
        "correct2": (*ext, "--agent", "agents_under_test:Correct"),
        "halluc": (*ext, "--agent", "agents_under_test:Hallucinating"),
        "half": (*ext, "--agent", "agents_under_test:HalfWrong"),
        "short": (*ext, "--agent", "agents_under_test:Hallucinating", "-x"),
        "write": ("test_write.py", "--agent=baseline"),
        "recon": ("test_reconciliation.py", "--agent=baseline"),
    }
    for name, args in runs.items():
        proc = _pytest(project, *args, "--run-record", f"{name}.json")
        assert proc.returncode in (0, 1), f"{name}: {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert (project / f"{name}.json").exists(), name
    assert (project / "short.jsonl").exists()  # cut short: the journal stays
    return project


def run_compare(capsys, *args) -> tuple[int, str, str]:
    code = compare.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys, *args) -> tuple[int, dict]:
    code, out, err = run_compare(capsys, *args, "--format", "json")
    assert code in (0, 1), err
    return code, json.loads(out)


def metrics_of(data: dict, task: str = "extraction") -> dict[str, dict]:
    t = next(t for t in data["tasks"] if t["task"] == task)
    return {m["metric"]: m for m in t["metrics"]}


def task_of(data: dict, task: str = "extraction") -> dict:
    return next(t for t in data["tasks"] if t["task"] == task)


def record(project: Path, name: str) -> dict:
    return json.loads((project / f"{name}.json").read_text())


def write_record(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def outcomes(project: Path, name: str) -> dict[str, str]:
    return {c["case_id"]: c["outcome"] for c in record(project, name)["cases"]}


# ---------------------------------------------------------------- exact McNemar
@pytest.mark.parametrize("b, c, p", [
    (0, 6, 0.03125),  # 2 * (1/2)^6
    (6, 0, 0.03125),
    (1, 1, 1.0),  # 2 * (1 + 2) / 4, capped at 1
    (0, 0, 1.0),  # no discordant pair
    (0, 1, 1.0),  # 2 * 1/2
    (0, 5, 0.0625),  # 2 / 32: five flips in one direction are not significant at 0.05
    (2, 8, 0.109375),  # 2 * (1 + 10 + 45) / 1024
    (3, 10, 2 * 378 / 8192),  # 2 * (1 + 13 + 78 + 286) / 2^13
    (10, 3, 2 * 378 / 8192),
])
def test_mcnemar_is_exact(b, c, p):
    assert mcnemar_p(b, c) == pytest.approx(p, abs=1e-15)


# ---------------------------------------------------------------- identical runs
def test_identical_runs_show_no_difference(project, capsys):
    code, data = as_json(capsys, project / "correct.json", project / "correct2.json", "--fail-on-regression")
    assert code == 0 and data["regressions"] == []
    task = task_of(data)
    assert task["n_cases"] == 45 and task["pass_to_fail"] == [] and task["fail_to_pass"] == []
    rows = metrics_of(data)
    assert rows["pass"]["test"] == "mcnemar" and rows["pass"]["discordant"] == {"b": 0, "c": 0}
    assert {"micro_f1", "macro_f1", "exact_match", "name_accuracy"} <= set(rows)
    for m, row in rows.items():
        assert row["base"] == row["new"] and row["delta"] == 0, m
        assert row["p_value"] == 1.0 and row["ci95"] == [0.0, 0.0], m
        assert not row["regression"] and not row["improvement"], m
    assert "no regression significant at alpha 0.05" in run_compare(capsys, project / "correct.json",
                                                                   project / "correct2.json")[1]


# ---------------------------------------------------------------- a worse agent
def test_a_clearly_worse_agent_is_a_significant_regression(project, capsys):
    base, new = project / "correct.json", project / "halluc.json"
    was, now = outcomes(project, "correct"), outcomes(project, "halluc")
    b = sum(was[i] == "passed" and now[i] != "passed" for i in was)
    assert b >= 40 and not any(was[i] != "passed" and now[i] == "passed" for i in was)

    code, data = as_json(capsys, base, new)
    assert code == 0  # without --fail-on-regression a regression is reported, not an exit status
    rows = metrics_of(data)
    assert rows["pass"]["discordant"] == {"b": b, "c": 0}
    assert rows["pass"]["p_value"] == pytest.approx(2 / 2 ** b) and rows["pass"]["regression"]
    assert rows["pass"]["delta"] == pytest.approx(-b / 45, abs=1e-6)
    assert rows["micro_precision"]["regression"] and rows["micro_precision"]["test"] == "bootstrap"
    assert rows["micro_precision"]["p_value"] < 0.05 and rows["micro_precision"]["ci95"][1] < 0
    # a hallucinated code misses nothing: recall is unchanged, and no regression
    assert rows["micro_recall"]["delta"] == 0 and rows["micro_recall"]["p_value"] == 1.0
    assert not rows["micro_recall"]["regression"]
    labels = {r["label"] for r in data["regressions"]}
    assert {"extraction.pass", "extraction.micro_precision", "extraction.micro_f1"} <= labels
    assert "extraction.micro_recall" not in labels

    code, out, err = run_compare(capsys, base, new, "--fail-on-regression")
    assert code == 1
    assert "FAILED" in err and "extraction.pass: 1.000 -> " in err and "mcnemar p=" in err
    assert "extraction.micro_f1" in err and "regressions significant at alpha 0.05" in out
    assert re.search(r"^  pass .* mcnemar .* REGRESSION$", out, re.M)

    # the other way round it is an improvement, never a regression
    code, data = as_json(capsys, new, base, "--fail-on-regression")
    assert code == 0 and data["regressions"] == [] and metrics_of(data)["pass"]["improvement"]


def test_a_strict_alpha_lets_a_small_regression_through(project, capsys, tmp_path):
    """Five cases that fail in NEW: McNemar p = 2/32 = 0.0625, not significant at 0.05."""
    base, new = record(project, "correct"), record(project, "halluc")
    five = sorted(c["case_id"] for c in new["cases"])[:5]
    new["cases"] = [n if n["case_id"] in five else o for o, n in zip(base["cases"], new["cases"])]
    path = write_record(tmp_path / "five.json", new)
    rates = ("--metric", "extraction.pass", "--metric", "extraction.exact_match")
    code, data = as_json(capsys, project / "correct.json", path, "--fail-on-regression", *rates)
    rows = metrics_of(data)
    assert code == 0 and data["regressions"] == []
    for row in rows.values():  # exact match is pass/fail per case too: the same exact test
        assert row["test"] == "mcnemar" and row["discordant"] == {"b": 5, "c": 0}
        assert row["p_value"] == pytest.approx(0.0625) and not row["regression"]
    assert [f["case_id"] for f in task_of(data)["pass_to_fail"]] == five
    code, data = as_json(capsys, project / "correct.json", path, "--fail-on-regression", "--alpha", "0.1", *rates)
    assert code == 1 and {r["label"] for r in data["regressions"]} == {"extraction.pass", "extraction.exact_match"}


# ---------------------------------------------------------------- flipped cases
def test_flipped_cases_are_listed_with_the_new_reason(project, capsys):
    was, half, bad = outcomes(project, "correct"), outcomes(project, "half"), outcomes(project, "halluc")
    worse = sorted(i for i in was if was[i] == "passed" and half[i] == "failed")
    better = sorted(i for i in bad if bad[i] == "failed" and half[i] == "passed")
    assert len(worse) >= 10 and len(better) >= 10

    _, data = as_json(capsys, project / "correct.json", project / "half.json")
    task = task_of(data)
    assert [f["case_id"] for f in task["pass_to_fail"]] == worse and task["fail_to_pass"] == []
    for f in task["pass_to_fail"]:
        assert f["new_outcome"] == "failed" and f["reason"] == f"failed: {HALLUCINATED}"
        assert (f["base_pass_rate"], f["new_pass_rate"]) == (1.0, 0.0)

    _, data = as_json(capsys, project / "halluc.json", project / "half.json")
    task = task_of(data)
    assert [f["case_id"] for f in task["fail_to_pass"]] == better and task["pass_to_fail"] == []
    assert {f["reason"] for f in task["fail_to_pass"]} == {"passed: exact match"}

    _, out, _ = run_compare(capsys, project / "correct.json", project / "half.json", "--max-flips", "3")
    assert f"  pass -> fail: {len(worse)}\n" in out and f"    {worse[0]}: failed: {HALLUCINATED}\n" in out
    assert f"... and {len(worse) - 3} more" in out and worse[3] not in out


def test_an_errored_case_flips_with_its_error(project, capsys, tmp_path):
    new = record(project, "correct")
    case = new["cases"][0]
    case.update(outcome="error", score=None, error={"kind": "agent", "message": "upstream API unavailable",
                                                    "error_class": "ConnectionError"})
    # a record edited by hand (its case's answer says passed): read as stored, on purpose
    _, data = as_json(capsys, project / "correct.json", write_record(tmp_path / "err.json", new), "--trust-stored")
    flip, = task_of(data)["pass_to_fail"]
    assert flip["case_id"] == case["case_id"] and flip["new_outcome"] == "error"
    assert flip["reason"] == "error (agent): upstream API unavailable"


# ---------------------------------------------------------------- the bootstrap
def test_the_bootstrap_is_seeded(project, capsys):
    args = (project / "correct.json", project / "half.json")
    _, first = as_json(capsys, *args)
    _, again = as_json(capsys, *args)
    _, seeded = as_json(capsys, *args, "--seed", "0")
    assert first == again == seeded and first["seed"] == 0 and first["n_resamples"] == 2000
    _, other = as_json(capsys, *args, "--seed", "7")
    a, b = metrics_of(first), metrics_of(other)
    assert all(a[m]["delta"] == b[m]["delta"] for m in a)  # the figures do not depend on the seed
    assert any(a[m]["ci95"] != b[m]["ci95"] for m in a)  # the resamples do
    assert a["pass"]["p_value"] == b["pass"]["p_value"]  # McNemar is exact


def _by_summarize(b: LoadedRun, n: LoadedRun, task_name: str, n_resamples: int) -> dict[str, tuple]:
    """Each figure's (base, new, ci95, bootstrap p) as the task's own summarize computes it on
    the same resamples compare draws: the reference the declared specs must reproduce."""
    import numpy as np

    from pytest_groundeval.tasks import registry

    task = registry()[task_name](Path("."))
    pairs = [(b.cases[k], n.cases[k]) for k in sorted(b.cases) if k[0] == task_name]
    m = len(pairs)
    weights = np.random.default_rng(0).multinomial(m, np.full(m, 1.0 / m), size=n_resamples)
    whole_b = task.summarize([r for x, _ in pairs for r in x])
    whole_n = task.summarize([r for _, y in pairs for r in y])
    out = {}
    per_resample = [(task.summarize([r for k, t in enumerate(w) for _ in range(t) for r in pairs[k][0]]),
                     task.summarize([r for k, t in enumerate(w) for _ in range(t) for r in pairs[k][1]]))
                    for w in weights]
    for name in task.metrics:
        diffs = np.array([float(y[name]) - float(x[name]) for x, y in per_resample])
        delta = round(whole_n[name] - whole_b[name], 6)
        ci, p = compare._ci_and_p(diffs, delta)
        out[name] = (whole_b[name], whole_n[name], ci, p)
    return out


def test_the_bootstrap_recomputes_each_metric_as_the_task_summarizes_it(project):
    """Each figure recomputed from its declared spec (means of per-case values, micro figures
    through prf from summed counts) is what the task's own summarize gives, on the full sample
    and on the same resamples: the same interval and, for the bootstrap, the same p."""
    for base, new in [("correct", "half"), ("correct", "halluc")]:
        b, n = read_run(project / f"{base}.json"), read_run(project / f"{new}.json")
        fast = compare.compare(b, n, n_resamples=300)
        slow = _by_summarize(b, n, "extraction", 300)
        rows = {m.metric: m for m in fast.tasks[0].metrics}
        assert set(rows) == {"pass"} | set(slow)
        for name, (vb, vn, ci, p) in slow.items():
            assert (rows[name].base, rows[name].new) == (vb, vn)
            assert rows[name].ci95 == pytest.approx(ci, abs=2e-6)  # summarize rounds its figures to 6 digits
            if rows[name].test == "bootstrap":
                assert rows[name].p_value == p
        assert sum(x.test == "bootstrap" for x in fast.tasks[0].metrics) >= 4
        assert not fast.tasks[0].notes  # every spec reproduced the record's figure


def test_an_errored_case_counts_as_its_count_specs_say(project, tmp_path):
    """An errored reconciliation case counts its truth items as missed in their verdict's
    class (its per-case metrics are gone with its score; the count specs the record declares
    say what it adds): the per-verdict and micro figures come out as the task's summarize
    gives them, on the full sample and on every resample."""
    base = record(project, "recon")
    new = copy.deepcopy(base)
    case = next(c for c in new["cases"] if c["outcome"] == "passed"
                and any(t.get("verdict") == "matched" for t in c["ground_truth"]))
    case.update(outcome="error", score=None, error={"kind": "timeout", "message": "no answer within 120 s"})
    from pytest_groundeval.tasks import registry

    new["summary"]["reconciliation"] = registry()["reconciliation"](Path(".")).summary(
        [CaseResult.model_validate(c) for c in new["cases"]]).model_dump(mode="json")
    b, n = read_run(project / "recon.json"), read_run(write_record(tmp_path / "r.json", new), trust_stored=True)
    fast = compare.compare(b, n, n_resamples=200).tasks[0]
    slow = _by_summarize(b, n, "reconciliation", 200)
    rows = {m.metric: m for m in fast.metrics}
    assert rows["matched_recall"].new == slow["matched_recall"][1] < rows["matched_recall"].base
    for name, (vb, vn, ci, p) in slow.items():
        assert (rows[name].base, rows[name].new) == (vb, vn), name
        assert rows[name].ci95 == pytest.approx(ci, abs=2e-6), name
        if rows[name].test == "bootstrap":
            assert rows[name].p_value == p, name
    assert not fast.notes
    assert fast.pass_to_fail[0].reason == "error (timeout): no answer within 120 s"


def test_micro_f1_comes_from_summed_counts_not_a_mean(project, capsys):
    """micro-F1 over the cases is not the mean of per-case F1: the record's summary says so,
    and compare shows the record's figure (the task's summarize over the paired cases)."""
    half = record(project, "half")
    _, data = as_json(capsys, project / "correct.json", project / "half.json")
    rows = metrics_of(data)
    assert rows["micro_f1"]["new"] == half["summary"]["extraction"]["micro_f1"]
    assert rows["macro_f1"]["new"] == half["summary"]["extraction"]["macro_f1"]
    assert rows["micro_f1"]["new"] != rows["macro_f1"]["new"]


def test_write_dimensions_are_compared_as_rates(project, capsys, tmp_path):
    """A new write run whose safety fails in 8 more cases: a safety (and pass) regression,
    each a pass/fail rate; schema untouched."""
    base = record(project, "write")
    new = copy.deepcopy(base)
    hit = [c for c in new["cases"] if c["outcome"] == "passed"][:8]
    for c in hit:
        c["outcome"] = "failed"
        c["score"]["passed"] = False
        c["score"]["metrics"].update(safety=0.0, **{"pass": 0.0})
        c["score"]["dimensions"]["safety"]["passed"] = False
        c["score"]["reason"] = "safety: dose 800 mg, documented 400 mg"
    code, data = as_json(capsys, project / "write.json", write_record(tmp_path / "w.json", new), "--fail-on-regression",
                         "--trust-stored")  # hand-made: the stored verdicts contradict the answers
    rows = metrics_of(data, "write")
    assert set(rows) == {"pass", "schema", "coding", "constraints", "safety"}
    assert code == 1 and {r["label"] for r in data["regressions"]} == {"write.pass", "write.safety"}
    for m in ("pass", "safety"):  # pass/fail per case: exact McNemar
        assert rows[m]["test"] == "mcnemar" and rows[m]["regression"] and rows[m]["discordant"] == {"b": 8, "c": 0}
        assert rows[m]["delta"] == pytest.approx(-8 / 48, abs=1e-6) and rows[m]["p_value"] == pytest.approx(2 / 2 ** 8)
        assert rows[m]["ci95"][1] < 0
    assert rows["schema"]["delta"] == 0 and rows["schema"]["p_value"] == 1.0
    flips = task_of(data, "write")["pass_to_fail"]
    assert sorted(f["case_id"] for f in flips) == sorted(c["case_id"] for c in hit)
    assert {f["reason"] for f in flips} == {"failed: safety: dose 800 mg, documented 400 mg"}


# ---------------------------------------------------------------- repeats
def _repeated(results: list[CaseResult], copies: list[CaseResult]) -> dict:
    return {r.key: [r, c] for r, c in zip(results, copies)}


def test_repeats_are_compared_on_per_case_pass_rates(project):
    """Several results per case (repeats, when records hold them): a case's pass rate is the
    mean of its results; the pass rate is tested by the paired bootstrap over whole cases."""
    good = list(read_run(project / "correct.json").cases.values())
    bad = list(read_run(project / "halluc.json").cases.values())
    good, bad = [g[0] for g in good], [b[0] for b in bad]
    assert [g.case_id for g in good] == [b.case_id for b in bad]
    base = [(g.case_id, [g, g], [g, b]) for g, b in zip(good, bad)]  # NEW: one of two repeats fails
    specs = read_run(project / "correct.json").specs["extraction"]
    t = compare_task("extraction", base, specs=(specs, specs), alpha=0.05, seed=0, n_resamples=500)
    row = next(m for m in t.metrics if m.metric == "pass")
    assert t.repeats and row.test == "bootstrap" and row.discordant is None
    failed = sum(b.outcome != "passed" for b in bad)
    assert row.base == 1.0 and row.new == pytest.approx(1 - failed / 90, abs=1e-6) and row.regression
    assert {(f.base_pass_rate, f.new_pass_rate) for f in t.pass_to_fail} == {(1.0, 0.5)}
    assert {f.reason for f in t.pass_to_fail} == {f"failed: {HALLUCINATED}"}
    # tau-bench's pass^2 (declared per k under --repeat): a case with one of two repeats failing has 0
    from pytest_groundeval.run.repeats import pass_hat_specs

    hat = {**specs, **{s.name: s for s in pass_hat_specs(2)}}
    numbered = [(cid, [r.model_copy(update={"repeat": k}) for k, r in enumerate(b_, 1)],
                 [r.model_copy(update={"repeat": k}) for k, r in enumerate(n_, 1)]) for cid, b_, n_ in base]
    t2 = compare_task("extraction", numbered, specs=(hat, hat), alpha=0.05, seed=0, n_resamples=500)
    rows = {m.metric: m for m in t2.metrics}
    assert rows["pass_hat_1"].new == pytest.approx(1 - failed / 90, abs=1e-6) and rows["pass_hat_1"].test == "bootstrap"
    assert (rows["pass_hat_2"].base, rows["pass_hat_2"].new) == (1.0, pytest.approx(1 - failed / 45, abs=1e-6))
    assert rows["pass_hat_2"].regression
    # half the repeats passing is a rate of 0.5, not a pass (per-case sums of 0 or 1 are no pass/fail)
    halves = compare_task("extraction", [(g.case_id, [g, b], [b, b]) for g, b in zip(good, bad)
                                         if b.outcome == "failed"], specs=(specs, specs), alpha=0.05, seed=0,
                          n_resamples=500)
    assert {m.test for m in halves.metrics} == {"bootstrap"}
    assert (halves.metrics[0].base, halves.metrics[0].new) == (0.5, 0.0) and halves.n_cases == failed
    assert {(f.base_pass_rate, f.new_pass_rate) for f in halves.pass_to_fail} == {(0.5, 0.0)}
    # a task's pass rate is the mean of its cases' pass rates (however many results each holds)
    uneven = [(g.case_id, [g], [g, b, b] if k == 0 else [g]) for k, (g, b) in enumerate(zip(good, bad))
              if k == 0 or b.outcome == "failed"]
    assert bad[0].outcome == "failed"
    t = compare_task("extraction", uneven, specs=(specs, specs), alpha=0.05, seed=0, n_resamples=200)
    assert t.metrics[0].new == pytest.approx((1 / 3 + len(uneven) - 1) / len(uneven), abs=1e-6)
    # one result per case is the rate 0/1: the same figures as a plain run, with McNemar
    single = compare_task("extraction", [(g.case_id, [g], [b]) for g, b in zip(good, bad)], specs=(specs, specs),
                          alpha=0.05, seed=0, n_resamples=500)
    assert not single.repeats and single.metrics[0].test == "mcnemar"
    assert {(f.base_pass_rate, f.new_pass_rate) for f in single.pass_to_fail} == {(1.0, 0.0)}


# ---------------------------------------------------------------- output formats
def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_markdown_is_valid_tables(project, capsys):
    code, out, _ = run_compare(capsys, project / "correct.json", project / "half.json", "--format", "markdown")
    assert code == 0 and out.startswith("### groundeval compare\n")
    lines = out.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))]
    assert len(starts) == 1
    table = []
    for line in lines[starts[0]:]:
        if not line.startswith("|"):
            break
        table.append(line)
    header, sep, *rows = table
    assert _cells(header) == ["metric", "base", "new", "delta", "95% CI", "test", "p", ""]
    assert re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", sep) and len(_cells(sep)) == len(_cells(header))
    assert rows and all(len(_cells(r)) == len(_cells(header)) for r in rows)
    pass_row = next(_cells(r) for r in rows if _cells(r)[0] == "pass")
    assert pass_row[5] == "mcnemar" and pass_row[7] == "**regression**"
    assert "<details><summary>pass → fail: " in out and "</details>" in out
    assert "**1 regression**" not in out and "regressions** significant at alpha 0.05" in out
    assert f"- `" in out and HALLUCINATED in out


def test_json_holds_the_figures(project, capsys):
    code, data = as_json(capsys, project / "correct.json", project / "halluc.json")
    assert code == 0 and data["alpha"] == 0.05
    assert data["base"]["run_id"] == record(project, "correct")["run_id"] and data["base"]["kind"] == "record"
    assert data["new"]["agent"].startswith("hallucinating")
    rows = metrics_of(data)
    summary = record(project, "halluc")["summary"]["extraction"]
    for m in ("micro_precision", "micro_recall", "micro_f1", "macro_f1", "exact_match", "name_accuracy"):
        assert rows[m]["new"] == summary[m] and rows[m]["base"] == 1.0
        assert rows[m]["delta"] == pytest.approx(summary[m] - 1.0, abs=1e-6)
    regs = {r["label"]: r for r in data["regressions"]}
    assert regs["extraction.pass"]["test"] == "mcnemar" and regs["extraction.pass"]["p_value"] < 1e-9


def test_only_the_metrics_asked_for(project, capsys):
    code, data = as_json(capsys, project / "correct.json", project / "halluc.json", "--metric", "extraction.f1")
    assert code == 0 and list(metrics_of(data)) == ["micro_f1"]
    code, _, err = run_compare(capsys, project / "correct.json", project / "halluc.json", "--metric", "extraction.nope")
    assert code == 2 and "extraction.nope" in err


# ---------------------------------------------------------------- refusals
def test_different_case_sets_are_refused_unless_intersect(project, capsys, tmp_path):
    new = record(project, "correct2")
    dropped = [c["case_id"] for c in new["cases"][:4]]
    new["cases"] = new["cases"][4:]
    path = write_record(tmp_path / "fewer.json", new)
    code, out, err = run_compare(capsys, project / "correct.json", path)
    assert code == 2 and out == ""
    assert "not runs of the same cases" in err and "4 only in BASE" in err and dropped[0] in err
    assert "--intersect" in err and "41 cases" in err
    code, data = as_json(capsys, project / "correct.json", path, "--intersect")
    assert code == 0 and task_of(data)["n_cases"] == 41
    assert data["left_out"]["extraction"] == {"only_in_base": 4, "only_in_new": 0, "content_differs": 0, "compared": 41}
    _, out, _ = run_compare(capsys, project / "correct.json", path, "--intersect")
    assert "--intersect: extraction: compared 41 cases; left out 4 only in BASE" in out


def test_different_content_hashes_are_refused_unless_intersect(project, capsys, tmp_path):
    new = record(project, "correct2")
    changed = new["cases"][7]
    changed["content_hash"] = "0" * 64
    path = write_record(tmp_path / "edited.json", new)
    code, _, err = run_compare(capsys, project / "correct.json", path)  # no data here has that content
    assert code == 2 and "cannot be re-derived here" in err and changed["case_id"] in err
    code, _, err = run_compare(capsys, project / "correct.json", path, "--trust-stored")
    assert code == 2 and "1 case with a different content hash" in err and changed["case_id"] in err
    code, data = as_json(capsys, project / "correct.json", path, "--intersect", "--trust-stored")
    assert code == 0 and task_of(data)["n_cases"] == 44
    assert data["left_out"]["extraction"]["content_differs"] == 1


def test_tasks_of_one_run_only_are_left_out_with_a_note(project, capsys, tmp_path):
    both = record(project, "correct")
    both["cases"] += record(project, "write")["cases"]
    path = write_record(tmp_path / "both.json", both)
    code, data = as_json(capsys, path, project / "correct2.json")
    assert code == 0 and [t["task"] for t in data["tasks"]] == ["extraction"]
    assert "task write is only in BASE: not compared" in data["warnings"]
    code, _, err = run_compare(capsys, project / "write.json", project / "correct.json")
    assert code == 2 and "no task in common" in err


def test_a_journal_and_a_run_cut_short_are_compared_with_a_warning(project, capsys):
    short = record(project, "short")
    assert short["completeness"]["cut_short"] and len(short["cases"]) < 45
    code, _, err = run_compare(capsys, project / "correct.json", project / "short.jsonl")
    assert code == 2 and "only in BASE" in err  # the journal holds fewer cases
    code, data = as_json(capsys, project / "correct.json", project / "short.jsonl", "--intersect")
    assert code == 0 and data["new"]["kind"] == "journal" and task_of(data)["n_cases"] == len(short["cases"])
    assert any("is a journal" in w for w in data["warnings"])
    code, data = as_json(capsys, project / "correct.json", project / "short.json", "--intersect")
    assert any("was cut short" in w and "maxfail" in w.lower() or "was cut short (-x" in w for w in data["warnings"])
    _, out, _ = run_compare(capsys, project / "correct.json", project / "short.json", "--intersect")
    assert "warning: NEW (" in out and "was cut short" in out


def test_unreadable_input_and_bad_options_exit_2(project, capsys, tmp_path):
    code, _, err = run_compare(capsys, project / "correct.json", tmp_path / "missing.json")
    assert code == 2 and "no such file" in err
    (tmp_path / "bad.json").write_text("{not json")
    assert run_compare(capsys, project / "correct.json", tmp_path / "bad.json")[0] == 2
    old = record(project, "correct")
    old["schema_version"] = "1.0"
    code, _, err = run_compare(capsys, write_record(tmp_path / "old.json", old), project / "correct.json")
    assert code == 2 and "another groundeval record format" in err
    assert run_compare(capsys, project / "correct.json", project / "correct2.json", "--alpha", "0")[0] == 2
    assert run_compare(capsys, project / "correct.json", "--format", "yaml")[0] == 2
