"""The store: one reader (``store.read``: record, journal, shard) and one writer
(``store.write``: redacted, atomic, journal folding), and every command reading through it."""

from __future__ import annotations

import json
import os
import stat

import pytest
from conftest import SMALL_SET, read_record

from pytest_groundeval import cli
from pytest_groundeval.model import SCHEMA_VERSION, CaseResult, RunRecord
from pytest_groundeval.store import Journal, StoreError, files, read, write
from pytest_groundeval.store.record import FILE_MODE

N = len(SMALL_SET)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A real record, the journal of a run cut short (-x), and a shard record (1/1), of the
    small extraction set, written by groundeval runs (pytester needs a function scope, so
    these are subprocess runs of a copied project)."""
    import shutil
    import subprocess
    import sys

    from conftest import AGENTS, EVAL_FILE, SYNTHEA

    project = tmp_path_factory.mktemp("store")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_evals.py").write_text(EVAL_FILE)
    (project / "agents_under_test.py").write_text(AGENTS)
    (project / "data").mkdir()
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", project / "data" / f"{stem}.json")

    def run(*args: str) -> int:
        return subprocess.run([sys.executable, "-m", "pytest", "--data-dir", "data", "-p", "no:cacheprovider",
                               "-p", "no:randomly", *args], cwd=project, capture_output=True, text=True,
                              timeout=600).returncode

    assert run("--run-record", "record.json") == 0
    assert run("--agent=agents_under_test:Omitting", "-x", "--run-record", "short.json") == 1
    assert run("--groundeval-shard", "1/1", "--run-record", "shard.json") == 0
    return project


# ---------------------------------------------------------------- read
def test_read_gives_a_typed_record_a_journal_and_a_shard(stored):
    record = read(stored / "record.json")
    assert isinstance(record, RunRecord) and len(record.cases) == N and record.completeness.shard is None
    assert all(isinstance(c, CaseResult) for c in record.cases)
    assert not (stored / "record.jsonl").exists()  # complete: the record folded its journal
    journal = read(stored / "short.jsonl")  # -x: cut short, so the journal stays beside the record
    assert isinstance(journal, Journal) and journal.schema_version == SCHEMA_VERSION
    assert journal.run_id == read(stored / "short.json").run_id and journal.requested["agent"] == \
        "agents_under_test:Omitting"
    assert journal.cases[-1].outcome == "failed" and len(journal.cases) < N  # stopped at the first failure
    shard = read(stored / "shard.json")
    assert isinstance(shard, RunRecord) and shard.completeness.shard is not None
    assert shard.completeness.shard.index == shard.completeness.shard.count == 1


def test_a_journal_declares_the_specs_of_the_tasks_it_holds_before_their_first_case(stored):
    """A ``specs`` line per task the journal holds cases of (not every installed task), before
    the first of them: what compare reads a journal's figures by."""
    kinds = [(line.get("kind"), line.get("task")) for line in map(json.loads, (stored / "short.jsonl").read_text().splitlines())]
    assert kinds[0] == ("header", None) and kinds[1] == ("specs", "extraction")
    assert [k for k in kinds if k[0] == "specs"] == [("specs", "extraction")]
    journal = read(stored / "short.jsonl")
    assert set(journal.specs) == {"extraction"}
    assert {s.name: s.kind for s in journal.specs["extraction"]}["micro_f1"] == "prf"


def test_a_torn_last_journal_line_is_left_out(stored, tmp_path):
    text = (stored / "short.jsonl").read_text()
    torn = tmp_path / "torn.jsonl"
    torn.write_text(text + '{"kind":"case","case_id":"half-wr')
    assert read(torn).cases == read(stored / "short.jsonl").cases


def _record(stored) -> dict:
    return json.loads((stored / "record.json").read_text())


CANNOT_READ = {
    "missing": (None, "cannot read {path}: no such file"),
    "a folder": ("folder", "a folder, not a run record or journal"),
    "not JSON": ("{not json", "{path} is not a JSON run record"),
    "foreign JSON": ({"cases": []}, "{path} is not a groundeval run record or journal"),
    "a JSON list": ([1, 2], "is not a groundeval run record (a JSON list)"),
    "an older format": ({"schema_version": "1.0"}, "written by another groundeval record format ('1.0'"),
    "a newer format": ({"schema_version": "2.1"}, "a newer groundeval record format ('2.1'; this one reads '2.0'): "
                                                  "upgrade groundeval"),
    "an invalid record": ({"completeness": {"recorded": "many"}}, "the record is not valid in groundeval record "
                                                                  "format '2.0' (completeness.recorded"),
    "an empty journal": ("", "the journal is empty"),
    "a journal with no header": ('{"kind":"case"}\n', "is not a groundeval journal (no header line)"),
    "a journal of a newer format": ('{"kind":"header","schema_version":"9.0"}\n', "a journal written by a newer"),
    "an invalid journal line": ('{"kind":"header","schema_version":"2.0"}\n{"kind":"case","case_id":1}\n',
                                "line 2 is not valid in groundeval record format"),
}


@pytest.mark.parametrize("what", CANNOT_READ)
def test_what_read_refuses_names_the_file_and_what_to_do(stored, tmp_path, what):
    content, expected = CANNOT_READ[what]
    path = tmp_path / ("run.jsonl" if isinstance(content, str) and "kind" in content or content == "" else "run.json")
    if content == "folder":
        path.mkdir()
    elif isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, dict) and ("schema_version" in content or "completeness" in content):
        data = _record(stored)
        for key, value in content.items():
            if isinstance(value, dict):
                data[key].update(value)
            else:
                data[key] = value
        path.write_text(json.dumps(data))
    elif content is not None:
        path.write_text(json.dumps(content))
    with pytest.raises(StoreError) as info:
        read(path)
    assert expected.format(path=path) in str(info.value)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------- write
def test_write_is_redacted_owner_only_and_reads_back_the_same(stored, tmp_path, monkeypatch):
    from pytest_groundeval.store import redact

    record = read(stored / "record.json")
    secret = "sk-test-" + "x" * 24
    leaky = record.model_copy(update={"cases": [record.cases[0].model_copy(update={"raw_output": f"key {secret}"}),
                                                *record.cases[1:]]})
    monkeypatch.setenv("MY_API_KEY", secret)
    redact.configure()
    try:
        path = write(leaky, tmp_path / "out" / "run.json")
    finally:
        monkeypatch.delenv("MY_API_KEY")
        redact.configure()
    text = path.read_text()
    assert secret not in text and "[redacted]" in text
    assert stat.S_IMODE(path.stat().st_mode) == FILE_MODE
    again = read(path)
    assert again.cases[1:] == record.cases[1:] and again.cases[0].raw_output == "key [redacted]"
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]  # no temp file left behind


def test_only_the_listed_case_objects_skip_the_record_s_second_redaction(stored, tmp_path, monkeypatch):
    """``write(..., redacted=)``: the reporter lists the results its redaction step made
    (``case_json``), by id with the objects held. Only those very objects are written without
    a second pass; a copy holding the same id's content, or any other case, is redacted."""
    from pytest_groundeval.store import redact

    record = read(stored / "record.json")
    secret = "sk-test-" + "y" * 24
    listed, other = (c.model_copy(update={"raw_output": f"key {secret}"}) for c in record.cases[:2])
    leaky = record.model_copy(update={"cases": [listed, other, *record.cases[2:]]})
    monkeypatch.setenv("MY_API_KEY", secret)
    redact.configure()
    try:
        path = write(leaky, tmp_path / "run.json", redacted={id(listed): listed, id(other): listed})
    finally:
        monkeypatch.delenv("MY_API_KEY")
        redact.configure()
    cases = read(path).cases
    # (a listed case holding a secret cannot happen: listed means redacted; here it shows the skip)
    assert cases[0].raw_output == f"key {secret}"
    assert cases[1].raw_output == "key [redacted]"  # its id listed with another object: redacted


@pytest.mark.parametrize("n", [0, 1, 5])
def test_a_written_record_is_read_back_case_by_case_as_its_file_holds_it(stored, tmp_path, monkeypatch, n):
    """``write(..., layout=)`` notes where each case went; ``read_written`` gives the file's
    JSON with its cases read one at a time from there (the page's two passes), each exactly
    as the file holds it: a case redacted on the way (its piece shorter than its dump), a
    name in another script (several bytes a character), no case at all."""
    from pytest_groundeval.store import redact

    record = read(stored / "record.json")
    secret = "sk-test-" + "z" * 40
    cases = [c.model_copy(update={"raw_output": f"Ölçü {secret} ✓"}) if i % 2 else c
             for i, c in enumerate((record.cases * 3)[:n])]
    monkeypatch.setenv("MY_API_KEY", secret)
    redact.configure()
    try:
        layout = files.Layout()
        path = write(record.model_copy(update={"cases": cases}), tmp_path / "run.json", layout=layout)
    finally:
        monkeypatch.delenv("MY_API_KEY")
        redact.configure()
    whole = json.loads(path.read_bytes())
    got = files.read_written(path, layout)
    assert isinstance(got["cases"], files.WrittenCases) and len(got["cases"]) == n
    for _ in range(2):  # every pass reads them again
        assert {**got, "cases": list(got["cases"])} == whole
    assert n < 2 or "[redacted] ✓" in whole["cases"][1]["raw_output"]


def test_a_record_file_replaced_after_its_write_is_read_whole(stored, tmp_path):
    record = read(stored / "record.json")
    layout = files.Layout()
    path = write(record, tmp_path / "run.json", layout=layout)
    write(record.model_copy(update={"cases": record.cases[:1]}), path)  # another writer, since
    got = files.read_written(path, layout)
    assert got == json.loads(path.read_bytes()) and len(got["cases"]) == 1


def test_write_folds_the_journal_only_when_the_record_is_complete(stored, tmp_path):
    complete, short = read(stored / "record.json"), read(stored / "short.json")
    for record, kept in ((complete, False), (short, True)):
        journal = tmp_path / "run.jsonl"
        journal.write_text("{}\n")
        write(record, tmp_path / "run.json", journal=journal)
        assert journal.exists() is kept


def test_a_failed_write_leaves_the_old_file_and_the_journal(stored, tmp_path, monkeypatch):
    record = read(stored / "record.json")
    target, journal = tmp_path / "run.json", tmp_path / "run.jsonl"
    target.write_text("old")
    journal.write_text("{}\n")

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write(record, target, journal=journal)
    assert target.read_text() == "old" and journal.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.jsonl"]


# ---------------------------------------------------------------- every command reads through store.read
@pytest.fixture
def reads(monkeypatch):
    """The paths ``store.read`` opened (it is the only reader: nothing else opens a record)."""
    seen: list[str] = []
    real = files._bytes

    def spy(path):
        seen.append(path.name)
        return real(path)

    monkeypatch.setattr(files, "_bytes", spy)
    return seen


def test_compare_report_and_merge_read_records_journals_and_shards_through_store_read(stored, tmp_path, capsys,
                                                                                      reads):
    p = {name: str(stored / name) for name in ("record.json", "short.jsonl", "shard.json")}
    # compare: a record, a journal and a shard, each against the record
    for other in ("record.json", "short.jsonl", "shard.json"):
        code = cli.main(["compare", p["record.json"], p[other], "--intersect"])
        assert code == 0, capsys.readouterr()
    assert reads == ["record.json", "record.json", "record.json", "short.jsonl", "record.json", "shard.json"]
    # report: a record and a shard are pages; a journal is refused, said as the store's reader says
    reads.clear()
    assert cli.main(["report", p["record.json"], "-o", str(tmp_path / "r.html")]) == 0
    assert cli.main(["report", p["shard.json"], "-o", str(tmp_path / "s.html")]) == 0
    capsys.readouterr()
    assert cli.main(["report", p["short.jsonl"], "-o", str(tmp_path / "j.html")]) == 2
    assert "short.jsonl is a journal" in capsys.readouterr().err
    assert reads == ["record.json", "shard.json", "short.jsonl"]
    # merge: a shard merges; a journal and a whole run's record are refused
    reads.clear()
    assert cli.main(["merge", p["shard.json"], "-o", str(tmp_path / "m.json")]) == 0
    capsys.readouterr()
    assert cli.main(["merge", p["short.jsonl"], "-o", str(tmp_path / "m2.json")]) == 2
    assert "short.jsonl: a journal, not a run record" in capsys.readouterr().err
    assert cli.main(["merge", p["record.json"], "-o", str(tmp_path / "m3.json")]) == 2
    assert "record.json: not a shard record" in capsys.readouterr().err
    assert reads == ["shard.json", "short.jsonl", "record.json"]
    merged = read(tmp_path / "m.json")
    assert isinstance(merged, RunRecord) and merged.options.merged_from == [read(stored / "shard.json").run_id]


def test_every_command_refuses_a_newer_record_with_the_same_words(stored, tmp_path, capsys):
    data = _record(stored)
    data["schema_version"] = "2.9"
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(data))
    said = "newer.json: a record written by a newer groundeval record format ('2.9'; this one reads '2.0'): " \
           "upgrade groundeval to read it"
    for argv in (["compare", str(stored / "record.json"), str(newer)], ["report", str(newer), "-o", str(tmp_path / "x.html")],
                 ["merge", str(newer), "-o", str(tmp_path / "x.json")]):
        assert cli.main(argv) == 2
        assert said in capsys.readouterr().err, argv


def test_resume_and_rescore_read_through_store_read(evalproject):
    """--resume / --rescore of a newer record: a usage error in the store's words."""
    evalproject.runpytest("--data-dir", "data", "-p", "no:cacheprovider", "--run-record", "record.json")
    data = read_record(evalproject)
    data["schema_version"] = "2.9"
    (evalproject.path / "newer.json").write_text(json.dumps(data))
    for mode in ("--resume", "--rescore"):
        result = evalproject.runpytest("--data-dir", "data", "-p", "no:cacheprovider", mode, "newer.json",
                                       "--run-record", "again.json")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{mode} newer.json: */newer.json: a record written by a newer groundeval record "
                                     "format ('2.9'*upgrade groundeval*"])


# ---------------------------------------------------------------- typed transcript steps
STEPS = [
    {"type": "ai", "content": "", "tool_calls": [{"name": "lookup", "args": {"q": "x"}, "id": "c1"}],
     "usage": {"input_tokens": 3}},
    {"type": "tool", "tool": "lookup", "tool_call_id": "c1", "result": {"ok": True}},
    {"type": "tool", "tool": "lookup", "tool_call_id": "c2", "result": "boom", "status": "error"},
    {"type": "ai", "content": "cut", "tool_calls": ["[groundeval: truncated: 3 more items]"],
     "groundeval_truncated": "[groundeval: truncated: 1 more keys]"},
    {"type": "groundeval", "truncated": "400 more steps"},
    "a step in an agent's own format",
]


def test_reported_steps_are_typed_written_back_as_given_and_valid_in_the_schema(stored):
    from pytest_groundeval.model import AgentMessageStep, ToolResultStep
    from pytest_groundeval.store.record import validate_record

    data = _record(stored)
    data["cases"][0]["agent_reported"] = STEPS
    record = RunRecord.model_validate(data)
    steps = record.cases[0].agent_reported
    assert [type(s).__name__ for s in steps] == ["AgentMessageStep", "ToolResultStep", "ToolResultStep",
                                                 "AgentMessageStep", "dict", "str"]
    assert isinstance(steps[0], AgentMessageStep) and steps[0].tool_calls[0].name == "lookup"
    assert isinstance(steps[2], ToolResultStep) and steps[2].status == "error"
    dumped = record.model_dump(mode="json")
    assert dumped["cases"][0]["agent_reported"] == STEPS  # no key added, none lost
    assert validate_record(dumped) == []
    bad = json.loads(json.dumps(dumped))
    bad["cases"][0]["agent_reported"] = [{"type": "ai", "tool_calls": 3}]
    assert validate_record(bad) and any("agent_reported" in p for p in validate_record(bad))


def test_an_agent_transcript_not_in_the_steps_shape_is_dropped_with_a_warning(tmp_path):
    from pytest_groundeval.model import AgentOutput
    from pytest_groundeval.run.runner import run_case
    from pytest_groundeval.tasks.extraction import ExtractionTask
    from conftest import SYNTHEA, ZERO
    import shutil

    (tmp_path / "data").mkdir()
    shutil.copy(SYNTHEA / f"{ZERO}.json", tmp_path / "data" / f"{ZERO}.json")
    task = ExtractionTask(tmp_path / "data")
    ref = task.discover()[0]

    class Odd:
        name = "odd"

        def __init__(self, steps):
            self.steps = steps

        def run(self, prompt):
            return AgentOutput(text='{"active_medications": []}', transcript=self.steps,
                               extra={"answer_source": "final_message", "other": 1})

    kept = run_case(task, ref, Odd(STEPS))
    assert kept.outcome == "passed" and kept.model_dump(mode="json")["agent_reported"] == STEPS
    assert kept.answer_source == "final_message" and kept.warnings == []
    odd = run_case(task, ref, Odd([{"type": "ai", "tool_calls": 3}]))
    assert odd.outcome == "passed" and odd.agent_reported is None  # scored all the same
    assert odd.warnings and odd.warnings[0].startswith("transcript dropped: agent 'odd' reported steps not in")


# ---------------------------------------------------------------- a case not run, then and now
NOT_RUN_MESSAGE = "not run: --max-cost 1 USD reached (spent 1.0200)"


def test_not_run_is_the_errors_field_and_older_files_said_it_by_their_message(stored, tmp_path):
    """``ErrorInfo.not_run`` says a case was not run, whatever wraps its message; a record or
    journal written before the field existed said it by the message's first words alone and is
    read so, the journal a --resume reads included. A file with the field, and an error made in
    this version, say it themselves."""
    from pytest_groundeval.model import ErrorInfo
    from pytest_groundeval.reporting.terminal import errors_line

    data = _record(stored)
    errors = [{"kind": "budget", "message": NOT_RUN_MESSAGE, "error_class": None, "traceback": None},  # before
              {"kind": "budget", "message": f"agent 'x' failed after 1 attempt(s): {NOT_RUN_MESSAGE}",
               "not_run": True},  # wrapped: the field stands
              {"kind": "agent", "message": NOT_RUN_MESSAGE, "not_run": False}]  # said not: its words change nothing
    for case, error in zip(data["cases"], errors):
        case.update(outcome="error", error=error, score=None)
    (tmp_path / "old.json").write_text(json.dumps(data))
    lines = [{"kind": "header", "schema_version": SCHEMA_VERSION, "run_id": data["run_id"]},
             *({"kind": "case", **c} for c in data["cases"])]
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for name in ("old.json", "old.jsonl"):
        said = [c.error.not_run for c in read(tmp_path / name).cases[:3]]
        assert said == [True, True, False], name
    assert errors_line(read(tmp_path / "old.json")) == "errors: 1 agent; not run: 2 budget"
    # an error this version makes without the field is not read from its words
    assert ErrorInfo(kind="budget", message=NOT_RUN_MESSAGE).not_run is False
    assert ErrorInfo.never_run("budget", "--max-cost 1 USD reached").not_run is True
