"""``groundeval export RUN... --format csv|jsonl`` and ``pytest_groundeval.load_run``.

Real records: the extraction plugin run over four committed bundles under ``--repeat 2`` with
a scripted agent that raises on one patient (errored results), adds a code on another
(failed) and is right on the others; and the packaged write suite with the offline baseline
(scoring dimensions). Every row is counted against the record's results and every cell read
back against the record's own values."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import AGENTS, EVAL_FILE, REFS, ROOT, SMALL_SET, SYNTHEA, ZERO

import pytest_groundeval
from pytest_groundeval import cli
from pytest_groundeval.model import CaseResult, RunRecord, TaskSummary
from pytest_groundeval.reporting import export

FAST = ("-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-p", "no:anyio")
MIXED = '''
from agents_under_test import _patient, _truth
import json

RAISE_ON, ADD_ON = {raise_on!r}, {add_on!r}

class Mixed:
    """Raises on one patient, adds a code on another, right on the rest; reports tokens."""
    name = "mixed"
    def run(self, prompt):
        pid, meds = _patient(prompt), _truth(prompt)
        if pid == RAISE_ON:
            raise ConnectionError("upstream API unavailable")
        if pid == ADD_ON:
            meds = meds + [{{"code": "198440", "display": "Acetaminophen 500 MG Oral Tablet"}}]
        return {{"text": json.dumps({{"active_medications": meds}}), "model": "claude-opus-4-1",
                "usage": {{"input_tokens": len(prompt) // 4, "output_tokens": 7}}}}
'''


def _patient_id(stem: str) -> str:
    bundle = json.loads((SYNTHEA / f"{stem}.json").read_text())
    return next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *FAST, *args], cwd=project, capture_output=True,
                          text=True, timeout=600)


_BUILT: dict[str, Path] = {}  # once per process: tests/store/test_reviews.py reads the same records


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``mixed.json`` (extraction, 4 cases x 2 repeats, 2 errored results, 2 failed), the write
    suite with the baseline twice (``write.json``, ``write_base.json``: the same cases) and as
    shards 1/2 and 2/2 (``s1.json``, ``s2.json``). Read only: a test that writes beside a record
    copies it first."""
    if "project" not in _BUILT:
        _BUILT["project"] = _make_runs(tmp_path_factory)
    return _BUILT["project"]


def _make_runs(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("export")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_evals.py").write_text(EVAL_FILE)
    shutil.copy(ROOT / "evals" / "test_write.py", project / "test_write.py")
    (project / "agents_under_test.py").write_text(
        AGENTS + MIXED.format(raise_on=_patient_id(ZERO), add_on=_patient_id(REFS)))
    (project / "data").mkdir()
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", project / "data" / f"{stem}.json")
    todo = {
        "mixed": ("test_evals.py", "--data-dir", "data", "--agent", "agents_under_test:Mixed", "--repeat", "2",
                  "--agent-retries", "0"),
        "write": ("test_write.py", "--agent=baseline"),
        "write_base": ("test_write.py", "--agent=baseline"),
        "s1": ("test_write.py", "--agent=baseline", "--groundeval-shard", "1/2"),
        "s2": ("test_write.py", "--agent=baseline", "--groundeval-shard", "2/2"),
    }
    for name, args in todo.items():
        proc = _pytest(project, *args, "--run-record", f"{name}.json")
        assert proc.returncode == 1, f"{name}: {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return project


def record(path: Path) -> dict:
    return json.loads(path.read_text())


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _cell(value) -> str:
    """A record value as the CSV writes it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ---------------------------------------------------------------- one row per case result
def test_csv_has_one_row_per_case_result_repeats_and_errors_included(runs, tmp_path, capsys):
    rec = record(runs / "mixed.json")
    out = tmp_path / "mixed.csv"
    code, _, err = run_cli(capsys, "export", runs / "mixed.json", "-o", out)
    assert code == 0 and "8 rows" in err
    rows = read_csv(out.read_text())
    cases = rec["cases"]
    assert len(cases) == 8 and len(rows) == len(cases)  # 4 cases x 2 repeats, each its own row
    assert [(r["task"], r["case_id"], r["repeat"]) for r in rows] == \
        [(c["task"], c["case_id"], str(c["repeat"])) for c in cases]
    assert sorted({r["repeat"] for r in rows}) == ["1", "2"]
    errored = [r for r in rows if r["outcome"] == "error"]
    assert len(errored) == 2 and {r["error_kind"] for r in errored} == {"agent"}
    assert all(r["metric.f1"] == "" and r["metric.tp"] == "" for r in errored)  # no score: empty, not 0
    assert {r["outcome"] for r in rows} == {"passed", "failed", "error"}
    for row, case in zip(rows, cases):
        assert row["run_id"] == rec["run_id"] and row["agent"] == (case["agent"] or rec["agent"])
        assert row["agent"].startswith("mixed")
        assert row["outcome"] == case["outcome"] and row["error_kind"] == _cell((case["error"] or {}).get("kind"))
        for name, value in ((case["score"] or {}).get("metrics") or {}).items():
            assert float(row[f"metric.{name}"]) == value, name
        usage = case["usage"] or {}
        assert row["input_tokens"] == _cell(usage.get("input_tokens"))
        assert row["output_tokens"] == _cell(usage.get("output_tokens"))
        assert row["cost_usd"] == _cell(case["cost_usd"]) and row["duration_s"] == _cell(case["duration_s"])
        assert row["model"] == _cell(case["model"] or rec["model"])
    priced = [r for r in rows if r["outcome"] != "error"]
    assert priced and all(float(r["cost_usd"]) > 0 and int(r["input_tokens"]) > 0 for r in priced)


def test_metric_columns_are_the_record_s_declared_per_case_values_then_the_others(runs):
    rec = record(runs / "mixed.json")
    declared = []
    for spec in rec["summary"]["extraction"]["specs"].values():
        if spec.get("source", "score") != "score" or spec["kind"] == "custom":
            continue
        for name in spec["counts"] if spec["kind"] == "prf" else [spec.get("of") or spec["name"]]:
            if name not in declared:
                declared.append(name)
    held = [m for c in rec["cases"] if c["score"] for m in c["score"]["metrics"]]
    others = [m for m in dict.fromkeys(held) if m not in declared]
    cols = export.columns([(RunRecord.model_validate(rec), None)])
    assert [c.removeprefix("metric.") for c in cols if c.startswith("metric.")] == declared + others
    assert "exact_match" in declared and "tp" in declared  # a rate's value, a prf figure's count

    # the declaration's order, not the order a score happens to hold its metrics in
    shuffled = json.loads(json.dumps(rec))
    for c in shuffled["cases"]:
        if c["score"]:
            c["score"]["metrics"] = dict(reversed(list(c["score"]["metrics"].items())))
    cols = export.columns([(RunRecord.model_validate(shuffled), None)])
    assert [c.removeprefix("metric.") for c in cols if c.startswith("metric.")] == declared + others

    # a spec's per-case value under another name is a column by that name (from the spec, not a list of names)
    renamed = json.loads(json.dumps(rec).replace("exact_match", "whole_list_right"))
    cols = export.columns([(RunRecord.model_validate(renamed), None)])
    assert "metric.whole_list_right" in cols and "metric.exact_match" not in cols
    assert cols.index("metric.whole_list_right") < cols.index("metric.name_accuracy")  # the spec's place


def test_dimension_columns_are_the_scores_dimensions(runs, capsys):
    rec = record(runs / "write.json")
    code, out, _ = run_cli(capsys, "export", runs / "write.json")
    assert code == 0
    rows = read_csv(out)
    assert len(rows) == len(rec["cases"]) == 48
    dims = list(rec["cases"][0]["score"]["dimensions"])
    assert dims == ["schema", "coding", "constraints", "safety"]
    for row, case in zip(rows, rec["cases"]):
        for d in dims:
            assert row[f"dimension.{d}"] == _cell(case["score"]["dimensions"][d]["passed"])
        assert row["reviewed_outcome"] == "" and row["reviewed_by"] == ""  # nothing reviewed


def test_jsonl_round_trips_to_the_rows_of_load_run(runs, tmp_path, capsys):
    out = tmp_path / "mixed.jsonl"
    code, _, _ = run_cli(capsys, "export", runs / "mixed.json", "--format", "jsonl", "-o", out)
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    run = pytest_groundeval.load_run(runs / "mixed.json")
    assert lines == run.to_rows()
    assert len(lines) == len(run.cases)
    for row, case in zip(lines, run.cases):
        assert row["case_id"] == case.case_id and row["repeat"] == case.repeat and row["outcome"] == case.outcome
        assert row["error_kind"] == case.error_kind
        metrics = case.score.metrics if case.score is not None else {}
        assert {k[7:]: v for k, v in row.items() if k.startswith("metric.") and v is not None} == metrics
        assert row["cost_usd"] == case.cost_usd
        assert list(row) == export.columns([(run, run.reviews)])  # every column, null for none


def test_several_runs_are_one_table_with_the_union_of_their_columns(runs, capsys):
    code, out, _ = run_cli(capsys, "export", runs / "mixed.json", runs / "write.json")
    assert code == 0
    rows = read_csv(out)
    assert len(rows) == 8 + 48
    assert {r["task"] for r in rows[:8]} == {"extraction"} and {r["task"] for r in rows[8:]} == {"write"}
    assert rows[0]["dimension.safety"] == "" and rows[8]["metric.f1"] == ""
    assert {r["run_id"] for r in rows} == {record(runs / "mixed.json")["run_id"], record(runs / "write.json")["run_id"]}


# ---------------------------------------------------------------- load_run
def test_load_run_is_the_typed_record(runs):
    run = pytest_groundeval.load_run(runs / "mixed.json")
    assert isinstance(run, RunRecord)
    assert all(isinstance(c, CaseResult) for c in run.cases)
    assert isinstance(run.summary["extraction"], TaskSummary)
    assert run.summary["extraction"].specs["exact_match"].kind == "rate"
    assert run.model_dump(mode="json") == RunRecord.model_validate(record(runs / "mixed.json")).model_dump(mode="json")
    assert run.path == runs / "mixed.json" and run.reviews is not None and len(run.reviews) == 0
    assert "load_run" in pytest_groundeval.__all__ and pytest_groundeval.load_run is export.load_run


def test_to_dataframe_has_the_rows(runs):
    pd = pytest.importorskip("pandas", reason="pandas is not a dependency of groundeval (not installed here)")
    run = pytest_groundeval.load_run(runs / "mixed.json")
    df = run.to_dataframe()
    assert isinstance(df, pd.DataFrame)
    rows = run.to_rows()
    assert list(df.columns) == list(rows[0]) and len(df) == len(rows) == 8
    assert df["outcome"].tolist() == [r["outcome"] for r in rows]


def test_to_dataframe_without_pandas_says_how_to_get_it(runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    run = pytest_groundeval.load_run(runs / "mixed.json")
    with pytest.raises(ImportError, match="needs pandas, which groundeval does not install: `pip install pandas`"):
        run.to_dataframe()
    assert len(run.to_rows()) == 8  # rows need nothing


# ---------------------------------------------------------------- what a spreadsheet would run
def test_a_cell_a_spreadsheet_would_run_as_a_formula_is_quoted_in_csv_only(runs, tmp_path, capsys):
    rec = record(runs / "write.json")
    case = next(c for c in rec["cases"] if c["outcome"] == "failed")
    case["score"]["reason"] = '=HYPERLINK("http://example.invalid","click")'
    path = tmp_path / "formula.json"
    path.write_text(json.dumps(rec))  # (a reason planted by hand: the record is exported as stored, unverified)
    code, out, _ = run_cli(capsys, "export", path, "--trust-stored")
    assert code == 0
    row = next(r for r in read_csv(out) if r["case_id"] == case["case_id"])
    assert row["reason"] == "'" + case["score"]["reason"]
    code, out, _ = run_cli(capsys, "export", path, "--format", "jsonl", "--trust-stored")
    row = next(json.loads(x) for x in out.splitlines() if json.loads(x)["case_id"] == case["case_id"])
    assert row["reason"] == case["score"]["reason"]  # JSON is data, not a sheet


# ---------------------------------------------------------------- bad input
def test_bad_input_is_refused_naming_the_file(runs, tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", tmp_path / "missing.json")
    assert code == 2 and "missing.json: no such file" in err
    journal = tmp_path / "run.jsonl"
    journal.write_text('{"kind":"header","schema_version":"2.0","run_id":"x"}\n')
    code, _, err = run_cli(capsys, "export", journal)
    assert code == 2 and "is a journal" in err and "--resume" in err
    code, _, err = run_cli(capsys, "export", runs / "mixed.json", "-o", runs / "mixed.json")
    assert code == 2 and "a record given to read" in err
    code, _, err = run_cli(capsys, "export", runs / "mixed.json", "--format", "xlsx")
    assert code == 2
    with pytest.raises(export.ExportError, match="missing.json"):
        pytest_groundeval.load_run(tmp_path / "missing.json")
