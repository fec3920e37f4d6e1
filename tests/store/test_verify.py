"""Nothing stored is trusted unchecked (store/verify.py): merge, report and compare re-derive
every stored case from its answer and its data, compute the summary and gate again, and refuse
a record, shard or journal whose stored results disagree (``--trust-stored``: used as they are,
saying so). Offline: the baseline agent on the packaged write suite and four real bundles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, SMALL_SET, SYNTHEA
from test_shard_merge import _pytest

from pytest_groundeval import cli
from pytest_groundeval.model import JudgeCall, JudgedItem, JuryRecord
from pytest_groundeval.store.verify import ReplayJury, Untrusted, read_verified

GATE = ("--threshold", "write.safety=1.0")  # the baseline misses it: the honest gate fails


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    project = tmp_path_factory.mktemp("verify")
    (project / "pytest.ini").write_text("[pytest]\n")
    for suite in ("test_extraction.py", "test_write.py"):
        shutil.copy(ROOT / "evals" / suite, project / suite)
    (project / "data").mkdir()
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", project / "data" / f"{stem}.json")
    base = ("--agent=baseline", "--data-dir", "data", *GATE)
    for name, extra in (("full", ()), ("s1", ("--groundeval-shard", "1/2")), ("s2", ("--groundeval-shard", "2/2"))):
        proc = _pytest(project, *base, *extra, "--run-record", f"{name}.json")
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return project


def _edit_to_pass(src: Path, dst: Path) -> list[str]:
    """Every failed case marked passed with its metrics set to 1, and the gate to passed:
    what an agent (or a hand) that can write the file would do. Returns the edited cases."""
    data = json.loads(src.read_text())
    edited = []
    for c in data["cases"]:
        if c["outcome"] == "failed":
            c["outcome"] = "passed"
            c["score"]["passed"] = True
            c["score"]["metrics"] = {k: 1.0 for k in c["score"]["metrics"]}
            for d in c["score"].get("dimensions", {}).values():
                d["passed"] = True
            edited.append(c["case_id"])
    if data.get("gate"):
        data["gate"]["passed"] = True
    dst.write_text(json.dumps(data))
    return edited


def test_an_honest_record_re_derives_to_itself(runs):
    record = read_verified(runs / "full.json")
    stored = json.loads((runs / "full.json").read_text())
    assert [c.outcome for c in record.cases] == [c["outcome"] for c in stored["cases"]]
    assert record.gate is not None and record.gate.passed is False  # computed again: the same verdict
    assert record.summary["write"].value("safety") == stored["summary"]["write"]["safety"]


def test_an_edited_record_is_refused_by_compare_and_report_naming_the_case(runs, tmp_path, capsys):
    edited = _edit_to_pass(runs / "full.json", tmp_path / "edited.json")
    assert edited
    code = cli.main(["compare", str(runs / "full.json"), str(tmp_path / "edited.json")])
    err = capsys.readouterr().err
    assert code == 2 and "refused" in err and edited[0] in err and "re-derived" in err
    code = cli.main(["report", str(tmp_path / "edited.json"), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert code == 2 and edited[0] in err and not (tmp_path / "r.html").exists()


def test_trust_stored_uses_the_stored_cases_and_says_so(runs, tmp_path, capsys):
    _edit_to_pass(runs / "full.json", tmp_path / "edited.json")
    code = cli.main(["report", str(tmp_path / "edited.json"), "-o", str(tmp_path / "r.html"), "--trust-stored"])
    err = capsys.readouterr().err
    assert code == 0 and "--trust-stored" in err and "unverified" in err
    with pytest.raises(Untrusted):
        read_verified(tmp_path / "edited.json")


def test_a_stored_gate_is_never_read(runs, tmp_path):
    """Only the gate edited (every case as scored): the gate is computed again, and fails."""
    data = json.loads((runs / "full.json").read_text())
    data["gate"]["passed"] = True
    for check in data["gate"]["thresholds"]:
        check["passed"] = True
        check["value"] = 1.0
    (tmp_path / "gate.json").write_text(json.dumps(data))
    record = read_verified(tmp_path / "gate.json")
    assert record.gate.passed is False


def test_a_truth_edited_with_its_answer_is_refused(runs, tmp_path):
    data = json.loads((runs / "full.json").read_text())
    case = next(c for c in data["cases"] if c["task"] == "extraction" and c["ground_truth"])
    case["ground_truth"] = []
    (tmp_path / "truth.json").write_text(json.dumps(data))
    with pytest.raises(Untrusted, match=rf"{case['case_id']}: ground_truth stored \[\]"):
        read_verified(tmp_path / "truth.json")


def test_shards_edited_to_pass_are_refused_by_merge(runs, tmp_path, capsys):
    assert cli.main(["merge", str(runs / "s1.json"), str(runs / "s2.json"), "-o", str(tmp_path / "m.json")]) == 1
    capsys.readouterr()
    edited = _edit_to_pass(runs / "s1.json", tmp_path / "s1.json") + _edit_to_pass(runs / "s2.json",
                                                                                   tmp_path / "s2.json")
    assert edited
    code = cli.main(["merge", str(tmp_path / "s1.json"), str(tmp_path / "s2.json"), "-o", str(tmp_path / "m2.json")])
    err = capsys.readouterr().err
    assert code == 2 and "disagree" in err and not (tmp_path / "m2.json").exists()


def test_a_record_from_another_machine_re_derives_on_the_packaged_cases_of_the_same_content(runs, tmp_path):
    data = json.loads((runs / "full.json").read_text())
    data["options"]["extraction"]["data_dir"] = str(tmp_path / "nowhere")  # the CI runner's folder
    (tmp_path / "moved.json").write_text(json.dumps(data))
    assert read_verified(tmp_path / "moved.json").gate.passed is False
    case = next(c for c in data["cases"] if c["task"] == "extraction")
    case["content_hash"] = "0" * 64  # a case no data here holds
    (tmp_path / "unknown.json").write_text(json.dumps(data))
    with pytest.raises(Untrusted, match=rf"cannot be re-derived here\n  extraction:{case['case_id']}"):
        read_verified(tmp_path / "unknown.json")


def test_the_replayed_jury_recounts_the_stored_votes():
    """A judged item's verdict is the stored calls' majority again: an item edited to 'met'
    whose judges said not_met is not_met; the judge score follows."""
    from pytest_groundeval.judges.jury import Item

    calls = [JudgeCall(judge=j, verdict="not_met") for j in ("a", "b", "c")]
    stored = JuryRecord(judges=["a", "b", "c"], score=1.0, items=[
        JudgedItem(id="clear", question="q", points=5, verdict="met", calls=calls)])
    item = Item(id="clear", question="q", points=5)
    replayed = ReplayJury(stored).judge("letter", [item], "context")
    assert replayed.items[0].verdict == "not_met" and replayed.score == 0.0
    met = [c.model_copy(update={"verdict": "met"}) for c in calls]
    honest = stored.model_copy(update={"items": [stored.items[0].model_copy(update={"calls": met})]})
    assert ReplayJury(honest).judge("letter", [item], "context").score == 1.0
    assert ReplayJury(None).judge("letter", [item], "context").items[0].unscored


def test_a_task_not_installed_here_is_used_as_stored_and_said(runs, tmp_path, capsys):
    """Another team's task: nothing here can re-score it; its cases are used as stored, named as such."""
    data = json.loads((runs / "full.json").read_text())
    for c in data["cases"]:
        if c["task"] == "extraction":
            c["task"] = "their_task"
    data["summary"]["their_task"] = data["summary"].pop("extraction")
    (tmp_path / "theirs.json").write_text(json.dumps(data))
    code = cli.main(["report", str(tmp_path / "theirs.json"), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert code == 0 and "their_task case(s) used as stored, unverified" in err


def test_an_edited_record_is_refused_by_export_and_the_history_naming_the_case(runs, tmp_path, capsys):
    edited = _edit_to_pass(runs / "full.json", tmp_path / "edited.json")
    code = cli.main(["export", str(tmp_path / "edited.json"), "-o", str(tmp_path / "rows.csv")])
    err = capsys.readouterr().err
    assert code == 2 and edited[0] in err and "re-derived" in err and not (tmp_path / "rows.csv").exists()
    for command in (["runs", str(tmp_path)], ["report", str(tmp_path), "-o", str(tmp_path / "index.html")]):
        code = cli.main(command)
        err = capsys.readouterr().err
        assert code == 2 and edited[0] in err and "re-derived" in err, command
    assert not (tmp_path / "index.html").exists()


def test_export_and_the_history_take_an_honest_record_and_trust_stored_says_so(runs, tmp_path, capsys):
    assert cli.main(["export", str(runs / "full.json"), "--format", "jsonl", "-o", str(tmp_path / "rows.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    stored = json.loads((runs / "full.json").read_text())
    assert [r["outcome"] for r in rows] == [c["outcome"] for c in stored["cases"]]
    honest = tmp_path / "honest"
    honest.mkdir()
    shutil.copy(runs / "full.json", honest / "full.json")
    assert cli.main(["runs", str(honest)]) == 0 and stored["run_id"] in capsys.readouterr().out
    edited = _edit_to_pass(runs / "full.json", tmp_path / "edited.json")
    code = cli.main(["export", str(tmp_path / "edited.json"), "--trust-stored", "-o", str(tmp_path / "rows.csv")])
    err = capsys.readouterr().err
    assert code == 0 and "--trust-stored" in err and "unverified" in err and edited[0] in err
    assert cli.main(["runs", str(tmp_path / "edited.json"), "--trust-stored"]) == 0
    assert "--trust-stored" in capsys.readouterr().err
