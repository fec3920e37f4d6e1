"""CI across machines: ``--groundeval-shard K/N`` splits the eval cases by a stable hash of
task and case id, and ``groundeval merge`` makes the shards' records into the record of the
unsharded run (cases, summary, gate), refusing shards that are not one run's (the example
GitHub Actions workflows that run shards and merge them: tests/test_example_workflows.py).
Offline (the baseline agent)."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SMALL_SET, SYNTHEA, read_record

from pytest_groundeval import cli
from pytest_groundeval.store.record import comparable, validate_record
from pytest_groundeval.pytest.shard import parse_shard, selection_digest, shard_of

GATE = ("--threshold", "extraction.f1=0.95", "--threshold", "write.safety=1.0")  # write.safety is missed
FAST = ("-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-p", "no:anyio")
# parts of two records of the same cases that say how, when and where each run happened
RUN_SPECIFIC = ("run_id", "started_at", "finished_at", "git_sha", "cases", "summary", "gate")
OPTIONS_OF_A_MERGE = ("shard", "merged_from")


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *FAST, *args], cwd=project, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One project (extraction over 4 real bundles, the packaged write suite: 52 cases),
    run unsharded, as shards 1/2 and 2/2, and as shard 1/2 under ``-n 2``."""
    project = tmp_path_factory.mktemp("sharded")
    (project / "pytest.ini").write_text("[pytest]\n")
    for suite in ("test_extraction.py", "test_write.py"):
        shutil.copy(ROOT / "evals" / suite, project / suite)
    (project / "data").mkdir()
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", project / "data" / f"{stem}.json")
    base = ("--agent=baseline", "--data-dir", "data", *GATE)
    rets = {
        "full": _pytest(project, *base, "--run-record", "full.json"),
        "s1": _pytest(project, *base, "--groundeval-shard", "1/2", "--run-record", "s1.json"),
        "s2": _pytest(project, *base, "--groundeval-shard", "2/2", "--run-record", "s2.json"),
        "x1": _pytest(project, *base, "--groundeval-shard", "1/2", "--run-record", "x1.json", "-n", "2"),
    }
    for name, proc in rets.items():
        assert proc.returncode == 1, f"{name}: {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return project, rets


def merge(project: Path, *args: str) -> int:
    return cli.main(["merge", *[str(project / a) if a.endswith(".json") else a for a in args]])


def load(project: Path, name: str) -> dict:
    return json.loads((project / name).read_text())


# ---------------------------------------------------------------- the split
def test_shard_option_values():
    assert parse_shard("1/4") == (1, 4) and parse_shard(" 4/4 ") == (4, 4) and parse_shard("1/1") == (1, 1)
    for bad in ("0/4", "5/4", "1/0", "4", "a/b", "1/2/3", ""):
        with pytest.raises(ValueError):
            parse_shard(bad)


def test_a_bad_shard_option_is_a_usage_error(pytester):
    result = pytester.runpytest("--groundeval-shard", "3/2", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--groundeval-shard '3/2': K must be between 1 and N" in result.stderr.str()


def test_the_split_is_by_case_not_by_collection_order():
    ids = [f"case-{i:04d}" for i in range(2000)]
    shards = {i: shard_of("write", i, 4) for i in ids}
    sizes = [list(shards.values()).count(k) for k in (1, 2, 3, 4)]
    assert min(sizes) > 400  # balanced enough (2000/4 = 500 each, hash noise ~ 22)
    # another task's case of the same id is another case
    assert [shard_of("extraction", i, 4) for i in ids] != list(shards.values())
    # adding cases moves none of the others: the shard is a function of the case alone
    assert {i: shard_of("write", i, 4) for i in ids[:1000]} == {i: shards[i] for i in ids[:1000]}
    assert selection_digest([("t", "b"), ("t", "a")]) == selection_digest([("t", "a"), ("t", "b"), ("t", "a")])


def test_shards_are_disjoint_cover_the_run_and_say_which_shard_they_are(runs):
    project, _ = runs
    full, s1, s2 = (load(project, n) for n in ("full.json", "s1.json", "s2.json"))
    keys = {n: {(c["task"], c["case_id"]) for c in r["cases"]} for n, r in (("full", full), ("s1", s1), ("s2", s2))}
    assert len(keys["full"]) == 52 and keys["s1"] and keys["s2"]
    assert keys["s1"].isdisjoint(keys["s2"]) and keys["s1"] | keys["s2"] == keys["full"]
    for k, rec in ((1, s1), (2, s2)):
        comp = rec["completeness"]
        assert all(shard_of(c["task"], c["case_id"], 2) == k for c in rec["cases"])
        assert comp["shard"] == {"index": k, "count": 2, "selection_size": 52,
                                 "selection_sha256": selection_digest(keys["full"])}
        # a shard is a subset (the other shard's cases are deselected), never a run cut short
        assert comp["selected"] == comp["recorded"] == len(rec["cases"]) and comp["deselected"] == 52 - comp["selected"]
        assert comp["subset"] is True and comp["cut_short"] is False
        assert rec["options"]["shard"] == f"{k}/2" and validate_record(rec) == []
    assert full["completeness"]["shard"] is None and full["options"]["shard"] is None


def test_a_shard_under_xdist_is_the_same_shard(runs):
    project, rets = runs
    serial, parallel = load(project, "s1.json"), load(project, "x1.json")
    assert comparable(parallel) == comparable(serial)
    assert parallel["completeness"]["shard"] == serial["completeness"]["shard"]  # through workeroutput
    assert parallel["options"]["numprocesses"] == 2
    assert "groundeval: shard 1/2: " in rets["x1"].stdout


# ---------------------------------------------------------------- the merge
def test_merging_two_shards_gives_the_unsharded_record(runs, capsys):
    project, rets = runs
    assert merge(project, "s2.json", "s1.json", "-o", "merged.json") == rets["full"].returncode == 1  # gate missed
    out = capsys.readouterr().out
    full, merged = load(project, "full.json"), load(project, "merged.json")
    assert validate_record(merged) == []
    assert comparable(merged) == comparable(full)  # cases, summary, gate
    assert merged["gate"]["passed"] is False and len(merged["gate"]["thresholds"]) == 2
    assert merged["summary"]["write"]["n_failed"] > 0  # a summary worth comparing: failures, two tasks
    for key in set(full) - set(RUN_SPECIFIC) - {"options"}:
        assert merged[key] == full[key], key  # agent, model, requested, versions, usage, completeness, budget
    assert {k: v for k, v in merged["options"].items() if k not in OPTIONS_OF_A_MERGE} == \
        {k: v for k, v in full["options"].items() if k not in OPTIONS_OF_A_MERGE}
    assert merged["options"]["merged_from"] == [load(project, "s1.json")["run_id"], load(project, "s2.json")["run_id"]]
    assert merged["git_sha"] == full["git_sha"]
    assert "groundeval gate: FAILED (1/2 thresholds met)" in out and "merged 2 shard records, 52 cases" in out
    assert (project / "merged.json").stat().st_mode & 0o777 == 0o600


def test_the_console_script_merges(runs):
    project, _ = runs
    script = Path(sys.executable).with_name("groundeval")
    proc = subprocess.run([str(script), "merge", "s1.json", "x1.json", "-o", "script.json"],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "shard 1/2 is given twice" in proc.stderr  # x1 is shard 1 as well
    proc = subprocess.run([str(script), "merge", "x1.json", "s2.json", "-o", "script.json"],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert comparable(load(project, "script.json")) == comparable(load(project, "full.json"))


def test_merge_can_set_the_gate(runs):
    project, _ = runs
    assert merge(project, "s1.json", "s2.json", "-o", "gated.json", "--threshold", "extraction.f1=0.95") == 0
    gated = load(project, "gated.json")
    assert gated["gate"]["passed"] is True and [t["metric"] for t in gated["gate"]["thresholds"]] == ["extraction.f1"]
    assert gated["options"]["thresholds"] == ["extraction.f1=0.95"]
    assert merge(project, "s1.json", "s2.json", "-o", "gated.json", "--threshold", "extraction.nope=1") == 2


def test_empty_shards_write_no_record_and_the_others_still_merge(evalproject):
    """4 cases in 5 shards: shards 1 and 2 hold none (pytest exits 5, no record); the three
    records there are account for every selected case."""
    assert [shard_of("extraction", s, 5) for s in sorted(SMALL_SET)] == [3, 3, 4, 5]
    base = ("--data-dir", "data", "-p", "no:cacheprovider")
    assert evalproject.runpytest(*base, "--run-record", "full.json").ret == 0
    for k in range(1, 6):
        ret = evalproject.runpytest(*base, "--groundeval-shard", f"{k}/5", "--run-record", f"s{k}.json").ret
        assert ret == (pytest.ExitCode.NO_TESTS_COLLECTED if k <= 2 else 0)
        assert (evalproject.path / f"s{k}.json").exists() == (k > 2)
    assert merge(evalproject.path, "s3.json", "s4.json", "s5.json", "-o", "merged.json") == 0
    assert comparable(read_record(evalproject, "merged.json")) == comparable(read_record(evalproject, "full.json"))
    assert merge(evalproject.path, "s3.json", "s5.json", "-o", "merged.json") == 2  # shard 4 held a case


def test_a_task_only_a_later_shard_holds_is_summed_up_too(evalproject):
    """Shard 1/2 holds extraction cases only; shard 2/2 the one write case as well."""
    evalproject.makepyfile(test_write=(ROOT / "evals" / "test_write.py").read_text())
    cases = evalproject.mkdir("wcases")
    shutil.copy(ROOT / "fixtures" / "write_cases" / "allopurinol-three-tablets.json", cases)
    assert shard_of("write", "allopurinol-three-tablets", 2) == 2
    base = ("--data-dir", "data", "--write-cases", "wcases", "-p", "no:cacheprovider")
    evalproject.runpytest(*base, "--run-record", "full.json")
    for k in (1, 2):
        evalproject.runpytest(*base, "--groundeval-shard", f"{k}/2", "--run-record", f"s{k}.json")
    assert {c["task"] for c in read_record(evalproject, "s1.json")["cases"]} == {"extraction"}
    merge(evalproject.path, "s1.json", "s2.json", "-o", "merged.json")
    merged, full = read_record(evalproject, "merged.json"), read_record(evalproject, "full.json")
    assert set(merged["summary"]) == {"extraction", "write"} and comparable(merged) == comparable(full)


def test_the_project_s_ini_thresholds_gate_the_merged_run_as_the_unsharded_one(evalproject):
    """An ini threshold of a task the run has no case of is not applied (a --threshold would be
    missed): the merge tells them apart by what the shards' gates say."""
    evalproject.makeini("[pytest]\ngroundeval_thresholds =\n    extraction.f1=0.95\n    write.safety=1.0\n")
    base = ("--data-dir", "data", "-p", "no:cacheprovider")
    full_ret = evalproject.runpytest(*base, "--run-record", "full.json").ret
    for k in (1, 2):
        evalproject.runpytest(*base, "--groundeval-shard", f"{k}/2", "--run-record", f"s{k}.json")
    assert merge(evalproject.path, "s1.json", "s2.json", "-o", "merged.json") == full_ret
    merged, full = read_record(evalproject, "merged.json"), read_record(evalproject, "full.json")
    assert merged["gate"] is not None and comparable(merged) == comparable(full)


# ---------------------------------------------------------------- what merge refuses
def _set(path: str, value):
    def change(rec: dict) -> None:
        *parents, last = path.split(".")
        target = rec
        for p in parents:
            target = target[p]
        target[last] = value
    return change


def _move_a_case(s1: dict, s2: dict) -> None:
    s1["cases"].append(s2["cases"].pop())
    for rec in (s1, s2):
        rec["completeness"]["selected"] = rec["completeness"]["recorded"] = len(rec["cases"])
        rec["completeness"]["deselected"] = 52 - len(rec["cases"])


def _same_case_other_content(s1: dict, s2: dict) -> None:
    twin = copy.deepcopy(s1["cases"][0])
    twin["content_hash"] = "sha256:" + "0" * 64
    s2["cases"].append(twin)


def _copy_a_case(s1: dict, s2: dict) -> None:  # the same case, same content, in both shards
    s2["cases"].append(copy.deepcopy(s1["cases"][0]))


def _count_one_more(s1: dict, s2: dict) -> None:  # says it selected a case more (of the other shard's)
    s2["completeness"]["selected"] += 1
    s2["completeness"]["deselected"] -= 1


def _deselect_one_more(s1: dict, s2: dict) -> None:  # as if -k had left out one more item
    s2["completeness"]["deselected"] += 1


def _other_selection_digest(s1: dict, s2: dict) -> None:  # both shards agree, their cases do not
    for rec in (s1, s2):
        rec["completeness"]["shard"]["selection_sha256"] = "sha256:" + "2" * 64


def _uninstalled_task(s1: dict, s2: dict) -> None:
    """Every case of a task this machine does not have, split and counted as a real run would."""
    cases = s1["cases"] + s2["cases"]
    for c in cases:
        c["task"] = "not-installed"
    digest = selection_digest((c["task"], c["case_id"]) for c in cases)
    for k, rec in ((1, s1), (2, s2)):
        rec["cases"] = [c for c in cases if shard_of(c["task"], c["case_id"], 2) == k]
        comp = rec["completeness"]
        comp["selected"] = comp["recorded"] = len(rec["cases"])
        comp["deselected"] = len(cases) - len(rec["cases"])
        comp["shard"]["selection_sha256"] = digest


def _not_json(s1: dict, s2: dict) -> str:
    return "{not json"


def _foreign(s1: dict, s2: dict) -> None:
    s2.clear()
    s2["a"] = 1


def _thresholds(value):
    def change(s1: dict, s2: dict) -> None:
        for rec in (s1, s2):
            rec["options"]["thresholds"] = value
    return change


# every refusal merge has (store/merge.py, store/files.py), one row each: (change to the
# shards' records, what the refusal says); a journal, a whole run, a missing shard and a shard
# or a file given twice are refused in the test after this one
REFUSALS = {
    "another package version": (lambda a, b: _set("versions.pytest", "0.0.1")(b), "package versions"),
    "another price table": (lambda a, b: _set("usage.prices_as_of", "1999-01-01")(b), "price table"),
    "another answering agent": (lambda a, b: _set("agent", "claude")(b), "the agent that answered"),
    "other items deselected": (_deselect_one_more, "eval items deselected"),
    "a newer record format": (lambda a, b: _set("schema_version", "3.0")(b), "newer groundeval record format"),
    "not a valid record": (lambda a, b: _set("completeness.recorded", "many")(b), "is not valid in groundeval"),
    "not JSON": (_not_json, "is not a JSON run record"),
    "not a groundeval file": (_foreign, "is not a groundeval run record"),
    "overlapping shards": (_copy_a_case, "the shards overlap"),
    "selected cases that do not add up": (_count_one_more, "selected cases add up to"),
    "cases that are not the selection": (_other_selection_digest, "are not the selection they were split from"),
    "a task not installed": (_uninstalled_task, "is not installed here"),
    "a recorded threshold of no task": (_thresholds(["nosuch.f1=0.9"]), "unknown task 'nosuch'"),

    "another agent": (lambda a, b: (_set("requested.agent", "claude")(b), _set("agent", "claude")(b)),
                      "the agent and model asked for"),
    "another model": (lambda a, b: _set("model", "claude-opus-4-8")(b), "the model that answered"),
    "another record format": (lambda a, b: _set("schema_version", "1.0")(b), "another groundeval record format"),
    "other options": (lambda a, b: _set("options.extraction", {"data_dir": "/elsewhere"})(b), "option extraction"),
    "other thresholds": (lambda a, b: _set("options.thresholds", [])(b), "option thresholds"),
    "another selection": (lambda a, b: _set("completeness.selection.markexpr", "write")(b), "selection markexpr"),
    "another commit": (lambda a, b: (_set("git_sha", "e" * 40)(a), _set("git_sha", "f" * 40)(b)), "commit"),
    "another case set": (lambda a, b: _set("completeness.shard.selection_sha256", "sha256:" + "1" * 64)(b),
                         "case set"),
    "another shard count": (lambda a, b: _set("completeness.shard.count", 3)(b), "shard count"),
    "a case in the wrong shard": (_move_a_case, "which belongs to shard 2/2"),
    "the same case with other content": (_same_case_other_content, "cannot be re-derived here"),
}


@pytest.mark.parametrize("why", REFUSALS)
def test_merge_refuses_shards_that_are_not_one_run(runs, tmp_path, capsys, why):
    project, _ = runs
    change, expected = REFUSALS[why]
    s1, s2 = load(project, "s1.json"), load(project, "s2.json")
    text = change(s1, s2)
    for name, rec in (("a.json", s1), ("b.json", s2)):
        (tmp_path / name).write_text(text if name == "b.json" and isinstance(text, str) else json.dumps(rec))
    assert merge(tmp_path, "a.json", "b.json", "-o", "out.json") == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert str(tmp_path / "b.json") in err or str(tmp_path / "a.json") in err  # names the file
    assert not (tmp_path / "out.json").exists()


def test_merge_refuses_a_missing_or_duplicated_shard_a_journal_and_a_whole_run(runs, tmp_path, capsys):
    project, _ = runs
    assert merge(project, "s1.json", "-o", "out.json") == 2
    assert "shard(s) 2/2 missing" in capsys.readouterr().err
    shutil.copy(project / "s1.json", tmp_path / "again.json")
    assert merge(project, "s1.json", str(tmp_path / "again.json"), "s2.json", "-o", "out.json") == 2
    assert "shard 1/2 is given twice" in capsys.readouterr().err
    assert merge(project, "s1.json", "s1.json", "s2.json", "-o", "out.json") == 2
    assert "s1.json is given twice" in capsys.readouterr().err
    journal = tmp_path / "s2.jsonl"
    journal.write_text('{"kind": "header", "schema_version": "2.0", "run_id": "r"}\n')
    assert merge(project, "s1.json", str(journal), "-o", "out.json") == 2
    assert "a journal, not a run record" in capsys.readouterr().err
    assert merge(project, "s1.json", "full.json", "-o", "out.json") == 2
    assert "full.json: not a shard record" in capsys.readouterr().err
    assert not (project / "out.json").exists()


def test_a_shard_cut_short_makes_the_merged_run_cut_short(runs, tmp_path, capsys):
    project, _ = runs
    s2 = load(project, "s2.json")
    s2["cases"].pop()
    s2["completeness"].update(recorded=len(s2["cases"]), cut_short=True, reason="-x / --maxfail: stopping after 1 failures")
    (tmp_path / "s2.json").write_text(json.dumps(s2))
    assert merge(project, "s1.json", str(tmp_path / "s2.json"), "-o", "short.json") == 1
    short = load(project, "short.json")
    comp = short["completeness"]
    assert comp["cut_short"] and comp["recorded"] == 51 and comp["selected"] == 52
    assert comp["reason"].startswith("shard 2/2 (") and "--maxfail" in comp["reason"]
    assert short["gate"]["passed"] is False and short["gate"]["reason"].startswith("the run was cut short")
    assert "the run was cut short" in capsys.readouterr().err


def test_merge_s_own_content_check_stands_behind_trust_stored(runs, tmp_path, capsys):
    """--trust-stored skips re-deriving the cases, not merge's checks that the shards are one run's."""
    project, _ = runs
    s1, s2 = load(project, "s1.json"), load(project, "s2.json")
    _same_case_other_content(s1, s2)
    for name, rec in (("a.json", s1), ("b.json", s2)):
        (tmp_path / name).write_text(json.dumps(rec))
    assert merge(tmp_path, "a.json", "b.json", "-o", "out.json", "--trust-stored") == 2
    err = capsys.readouterr().err
    assert "with different content hashes" in err and "--trust-stored" in err
