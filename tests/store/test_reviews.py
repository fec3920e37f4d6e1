"""``groundeval review``: a person's verdict beside the scorer's (``store/reviews.py``).

The records are real runs (``test_export``'s ``runs`` fixture: the write suite with the offline
baseline, twice and as two shards; extraction under ``--repeat 2`` with errored results). A
review is written through the command line, then read back by every consumer: the record's
bytes and scores are unchanged, export, the HTML report (in headless Chromium), compare and
merge show it with who and why, and only ``compare --with-reviews`` gates on it."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import threading
from pathlib import Path

import pytest
from test_export import read_csv, record, run_cli, runs  # noqa: F401  (runs: the module's fixture)
from test_html_report import CHROMIUM, browse, parse

from pytest_groundeval import cli
from pytest_groundeval.model import RunRecord
from pytest_groundeval.reporting import export
from pytest_groundeval.store import StoreError, read, reviews
from pytest_groundeval.store.files import find_run
from pytest_groundeval.store.record import comparable

ZYRTEC = "zyrtec-two-5mg-tablets"  # the baseline fails it (coding and safety)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def copy(runs, tmp_path):  # noqa: F811
    """A fresh copy of a record of the fixture's (each test reviews its own)."""
    def _copy(name: str) -> Path:
        dst = tmp_path / f"{name}.json"
        shutil.copy(runs / f"{name}.json", dst)
        return dst
    return _copy


def review(capsys, path: Path, case: str, verdict: str, *more: str, reason: str = "clinically fine",
           by: str = "Dr Ada Lee") -> tuple[int, str, str]:
    return run_cli(capsys, "review", path, "--case", case, "--verdict", verdict, "--reason", reason, "--by", by, *more)


def scorer_view(path: Path) -> list:
    """Every score of the record, as read."""
    return [(c.result_key, c.outcome, c.score.model_dump() if c.score else None) for c in read(path).cases]


def passing(path: Path, n: int) -> list[str]:
    return [c["case_id"] for c in record(path)["cases"] if c["outcome"] == "passed"][:n]


# ---------------------------------------------------------------- writing a review
def test_a_review_is_appended_beside_the_record_and_changes_no_byte_of_it(copy, capsys):
    path = copy("write")
    before, scores = digest(path), scorer_view(path)
    code, out, err = review(capsys, path, ZYRTEC, "pass", reason="two 5 mg tablets are the documented 10 mg")
    assert code == 0, err
    assert f"write:{ZYRTEC}: fail -> pass by Dr Ada Lee" in out and "is unchanged" in out
    code, _, err = review(capsys, path, ZYRTEC, "pass", "--dimension", "safety", reason="dose is right", by="Dr B")
    assert code == 0, err
    assert digest(path) == before and scorer_view(path) == scores  # the record and every score as they were

    file = path.with_name("write.reviews.jsonl")
    assert reviews.reviews_path(path) == file
    assert stat.S_IMODE(file.stat().st_mode) == 0o600  # owner-only, like the record
    lines = [json.loads(x) for x in file.read_text().splitlines()]
    case = next(c for c in record(path)["cases"] if c["case_id"] == ZYRTEC)
    assert [(x["dimension"], x["original"], x["verdict"], x["by"], x["reason"]) for x in lines] == [
        (None, "fail", "pass", "Dr Ada Lee", "two 5 mg tablets are the documented 10 mg"),
        ("safety", "fail", "pass", "Dr B", "dose is right")]
    assert all(x["run_id"] == record(path)["run_id"] for x in lines)
    assert all(x["content_hash"] == case["content_hash"] and x["at"].endswith("Z") for x in lines)


def test_the_latest_review_stands_and_the_earlier_ones_are_kept(copy, capsys):
    path = copy("write")
    for verdict, by in (("pass", "A"), ("fail", "B"), ("pass", "C")):
        assert review(capsys, path, ZYRTEC, verdict, by=by)[0] == 0
    rec, got = reviews.load(path)
    assert [r.by for r in got.lines] == ["A", "B", "C"]
    standing = got.standing[("write", ZYRTEC)]
    assert standing.case.by == "C" and standing.dimensions == {}
    assert [r.original for r in got.lines] == ["fail"] * 3  # the scorer's, whatever a reviewer said before


def test_two_reviewers_at_once_both_keep_their_line(copy, monkeypatch):
    """The second append waits for the first (the folder's lock): it reads the file with the
    first one's line in it. Events, not timing: the first append is held inside its write until
    the second has reached the lock."""
    path = copy("write")
    rec = read(path)
    first_inside, second_at_lock = threading.Event(), threading.Event()
    real_write, real_flock = reviews.write_json_atomic, reviews.fcntl.flock

    def write(p, data):
        if threading.current_thread().name == "first":
            first_inside.set()
            assert second_at_lock.wait(60), "the second append never reached the lock"
        return real_write(p, data)

    class Fcntl:
        LOCK_EX, LOCK_SH, LOCK_UN = reviews.fcntl.LOCK_EX, reviews.fcntl.LOCK_SH, reviews.fcntl.LOCK_UN

        @staticmethod
        def flock(fd, op):
            if threading.current_thread().name == "second":
                second_at_lock.set()
            return real_flock(fd, op)

    monkeypatch.setattr(reviews, "write_json_atomic", write)
    monkeypatch.setattr(reviews, "fcntl", Fcntl)
    made = [reviews.make_review(rec, path, case=ZYRTEC, verdict=v, reason="r", by=v) for v in ("pass", "fail")]
    errors = []

    def go(r):
        try:
            reviews.append(path, [r])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    first = threading.Thread(target=go, args=(made[0],), name="first")
    first.start()
    assert first_inside.wait(60)
    second = threading.Thread(target=go, args=(made[1],), name="second")
    second.start()
    first.join()
    second.join()
    assert errors == []
    assert [r.by for r in reviews.read_reviews(path, rec).lines] == ["pass", "fail"]


# ---------------------------------------------------------------- refusals
def test_an_unknown_case_or_dimension_is_refused_naming_the_record_and_what_exists(copy, capsys):
    path = copy("write")
    code, _, err = review(capsys, path, "no-such-case", "pass")
    assert code == 2 and f"{path} (run {record(path)['run_id']}) holds no case 'no-such-case'" in err
    assert "it holds 48: write:acetaminophen-prn-range" in err and "(38 more)" in err
    code, _, err = review(capsys, path, ZYRTEC, "pass", "--dimension", "dosing")
    assert code == 2 and f"write:{ZYRTEC} has no dimension 'dosing'; its score has schema, coding, constraints, safety" \
        in err
    code, _, err = review(capsys, path, ZYRTEC, "pass", reason="  ")
    assert code == 2 and "--reason" in err
    code, _, err = review(capsys, path, ZYRTEC, "maybe")
    assert code == 2 and "invalid choice" in err
    assert not reviews.reviews_path(path).exists()  # nothing written by a refused review


def test_repeats_are_named_and_an_errored_result_has_nothing_to_review(copy, capsys):
    path = copy("mixed")
    rec = record(path)
    errored = next(c for c in rec["cases"] if c["outcome"] == "error")
    code, _, err = review(capsys, path, errored["case_id"], "pass")
    assert code == 2 and "its results are repeats 1, 2: name one as" in err
    code, _, err = review(capsys, path, f"{errored['case_id']}[r1]", "pass")
    assert code == 2 and "was not scored (outcome error (agent: " in err and "re-run the case" in err
    failed = next(c for c in rec["cases"] if c["outcome"] == "failed")
    code, out, err = review(capsys, path, f"extraction:{failed['case_id']}[r{failed['repeat']}]", "pass")
    assert code == 0, err
    assert f"extraction:{failed['case_id']}[r{failed['repeat']}]: fail -> pass" in out
    code, _, err = review(capsys, path, f"{failed['case_id']}[r7]", "pass")
    assert code == 2 and "no result" in err


def test_a_journal_is_not_reviewed_and_a_reviews_file_is_not_a_record(copy, capsys, tmp_path):
    journal = tmp_path / "run.jsonl"
    journal.write_text('{"kind":"header","schema_version":"2.0","run_id":"x"}\n')
    code, _, err = review(capsys, journal, ZYRTEC, "pass")
    assert code == 2 and "is a journal" in err
    path = copy("write")
    assert review(capsys, path, ZYRTEC, "pass")[0] == 0
    file = reviews.reviews_path(path)
    with pytest.raises(StoreError, match=r"reviews file of a run record .* give the record beside it \(.*write.json\)"):
        read(file)
    import os
    os.utime(file)  # the newest file in the folder: still not a run to --resume
    assert find_run("last", path.parent) == path


def test_a_broken_reviews_file_is_refused_by_every_reader_and_another_run_s_reviews_are_left_out(copy, runs, capsys):  # noqa: F811
    path = copy("write")
    file = reviews.reviews_path(path)
    file.write_text('{"run_id": "x"}\n')
    for args in (("export", path), ("report", path, "-o", path.with_suffix(".html")),
                 ("compare", runs / "write_base.json", path)):
        code, _, err = run_cli(capsys, *args)
        assert code == 2 and f"{file}: line 1 is not a groundeval review" in err, args
    code, _, err = review(capsys, path, ZYRTEC, "pass")  # nothing appended to a file no reader can read
    assert code == 2 and f"{file}: line 1 is not a groundeval review" in err
    assert file.read_text() == '{"run_id": "x"}\n'
    rec = read(path)
    made = reviews.make_review(rec, path, case=ZYRTEC, verdict="pass", reason="r", by="x")
    file.write_text(made.model_copy(update={"case_id": "gone"}).model_dump_json() + "\n")
    code, _, err = run_cli(capsys, "export", path)
    assert code == 2 and "line 1 reviews write:gone, which" in err
    file.write_text(made.model_copy(update={"run_id": "an-earlier-run"}).model_dump_json() + "\n")
    code, out, err = run_cli(capsys, "export", path)  # a record written again at the same path
    assert code == 0 and "1 review(s) of another run (an-earlier-run)" in err and "left out" in err
    assert all(r["reviewed_outcome"] == "" for r in read_csv(out))


# ---------------------------------------------------------------- shown beside the scorer's
def test_a_review_shows_in_export_beside_the_scorer_s_columns(copy, capsys):
    path = copy("write")
    plain = read_csv(run_cli(capsys, "export", path)[1])
    assert review(capsys, path, ZYRTEC, "pass", reason="acceptable")[0] == 0
    assert review(capsys, path, ZYRTEC, "pass", "--dimension", "safety", reason="dose ok", by="Dr B")[0] == 0
    rows = read_csv(run_cli(capsys, "export", path)[1])
    row = next(r for r in rows if r["case_id"] == ZYRTEC)
    assert (row["outcome"], row["dimension.safety"], row["metric.safety"]) == ("failed", "false", "0.0")  # scorer's
    assert (row["reviewed_outcome"], row["reviewed.safety"]) == ("passed", "true")
    assert row["reviewed_by"] == "Dr Ada Lee; Dr B" and row["review_reason"] == "acceptable; safety: dose ok"
    # every other cell as it was
    scorer = lambda table: [{k: v for k, v in r.items() if not k.startswith("review")} for r in table]  # noqa: E731
    assert scorer(rows) == scorer(plain)
    run = export.load_run(path)
    assert next(r for r in run.to_rows() if r["case_id"] == ZYRTEC)["reviewed_outcome"] == "passed"


def test_a_review_shows_in_the_report_and_the_page_s_figures_stay_the_scorer_s(copy, capsys):
    path = copy("write")
    plain = path.with_suffix(".plain.html")
    assert run_cli(capsys, "report", path, "-o", plain)[0] == 0
    assert review(capsys, path, ZYRTEC, "fail", reason="first look", by="Dr Early")[0] == 0  # superseded below
    assert review(capsys, path, ZYRTEC, "pass", reason="<b>two tablets</b> = 10 mg")[0] == 0
    assert review(capsys, path, ZYRTEC, "pass", "--dimension", "safety", reason="dose ok", by="Dr B")[0] == 0
    page = path.with_suffix(".html")
    assert run_cli(capsys, "report", path, "-o", page)[0] == 0
    text = page.read_text()
    assert "<b>two tablets</b>" not in text  # a reviewer's text is text
    dom = browse(page) if CHROMIUM else parse(text)
    section = dom.one("section", id="reviews")
    assert section.one("b", data_reviews="standing").text() == "2"
    assert "1 earlier review superseded by later ones" in section.one("p", class_="warn").text()
    rows = section.all("tr", data_review=f"write:{ZYRTEC}")
    assert [(r.attrs["data-dimension"], r.one(data_scorer=True).text(), r.one(data_reviewed=True).text(),
             r.one(data_by=True).text(), r.one(data_why=True).text()) for r in rows] == [
        ("", "failed", "passed", "Dr Ada Lee", "<b>two tablets</b> = 10 mg"),
        ("safety", "failed", "passed", "Dr B", "dose ok")]
    # the rest of the page is the scorer's: the same case data and figures as before the review
    plain_dom = parse(plain.read_text())
    assert parse(text).one(id="groundeval-data").text() == plain_dom.one(id="groundeval-data").text()
    assert plain_dom.all("section", id="reviews") == []
    summary = lambda d: [n.text() for n in d.all("section") if n.attrs.get("id", "").startswith("task")]  # noqa: E731
    assert summary(parse(text)) == summary(plain_dom)


def test_a_review_shows_in_compare_and_only_with_reviews_gates_on_it(copy, runs, capsys):  # noqa: F811
    base, path = runs / "write_base.json", copy("write")
    before, scores = digest(path), scorer_view(path)
    overruled = passing(path, 6)
    for case_id in overruled:  # a clinician fails six cases the scorer passed
        assert review(capsys, path, case_id, "fail", reason="unsafe for this patient")[0] == 0
    code, out, err = run_cli(capsys, "compare", base, path, "--fail-on-regression")
    assert code == 0, err  # the scorer's verdicts: the same as BASE
    assert "human reviews: 6 (scorer's verdict -> reviewer's)" in out
    assert f"[new] write:{overruled[0]}: pass -> fail by Dr Ada Lee" in out
    assert "the figures are the scorer's (--with-reviews" in out

    code, out, err = run_cli(capsys, "compare", base, path, "--fail-on-regression", "--with-reviews")
    assert code == 1  # over the reviewed verdicts: six passes lost, McNemar p = 2 / 2**6
    assert "write.pass: 0.833 -> 0.708" in err and "mcnemar p=0.0312" in err
    assert "pass -> fail: 6" in out and "reviewed fail by Dr Ada Lee: unsafe for this patient" in out
    flips = out.split("pass -> fail: 6", 1)[1].split("fail -> pass", 1)[0]
    assert flips.count("reviewed fail by Dr Ada Lee: unsafe for this patient") == 6  # once per flip, not twice
    assert "over the reviewed verdicts (--with-reviews)" in out
    data = json.loads(run_cli(capsys, "compare", base, path, "--with-reviews", "--format", "json")[1])
    task = data["tasks"][0]
    assert data["new"]["reviewed"] is True and data["new"]["reviews"] == 6 and data["base"]["reviewed"] is False
    assert len(task["reviews"]) == 6 and {r["by"] for r in task["reviews"]} == {"Dr Ada Lee"}
    assert all(f["reviewed"].startswith("reviewed fail by Dr Ada Lee") for f in task["pass_to_fail"])
    md = run_cli(capsys, "compare", base, path, "--format", "markdown")[1]
    assert "<summary>human reviews: 6</summary>" in md
    assert digest(path) == before and scorer_view(path) == scores  # nothing written back


def test_a_dimension_review_sets_that_dimension_not_the_case_s_outcome(copy, runs, capsys):  # noqa: F811
    base, path = runs / "write_base.json", copy("write")
    assert review(capsys, path, ZYRTEC, "pass", "--dimension", "safety")[0] == 0
    data = json.loads(run_cli(capsys, "compare", base, path, "--with-reviews", "--format", "json")[1])
    figures = {m["metric"]: m for m in data["tasks"][0]["metrics"]}
    assert figures["safety"]["new"] - figures["safety"]["base"] == pytest.approx(1 / 48, abs=1e-6)
    assert figures["pass"]["new"] == figures["pass"]["base"] and figures["coding"]["delta"] == 0
    rec, got = reviews.load(path)
    case = next(c for c in rec.cases if c.case_id == ZYRTEC)
    seen = reviews.reviewed(case, got.standing[case.result_key])
    assert seen.score.dimensions["safety"].passed and seen.score.metrics["safety"] == 1.0 and seen.outcome == "failed"
    assert not case.score.dimensions["safety"].passed and case.score.metrics["safety"] == 0.0  # the record's own


def test_merge_carries_the_shards_reviews_to_the_merged_record(copy, capsys, tmp_path):
    s1, s2 = copy("s1"), copy("s2")
    f1 = next(c["case_id"] for c in record(s1)["cases"] if c["outcome"] == "failed")
    p2 = passing(s2, 1)[0]
    assert review(capsys, s1, f1, "pass", reason="fine by the chart", by="A")[0] == 0
    assert review(capsys, s2, p2, "fail", reason="wrong patient", by="B")[0] == 0
    before = {p: digest(p) for p in (s1, s2)}
    out = tmp_path / "merged.json"
    code, text, err = run_cli(capsys, "merge", s1, s2, "-o", out)
    plain = tmp_path / "plain"
    plain.mkdir()
    for p in (s1, s2):
        shutil.copy(p, plain / p.name)  # the same shards without their reviews
    assert run_cli(capsys, "merge", plain / s1.name, plain / s2.name, "-o", plain / "merged.json")[0] == code
    assert "human reviews: 2, carried to" in text and "the scores and the gate above are the scorer's" in text
    assert f"write:{f1}: fail -> pass by A" in text and f"write:{p2}: pass -> fail by B" in text
    merged = read(out)
    lines = reviews.read_reviews(out, merged).lines
    assert [(r.case_id, r.by, r.run_id) for r in lines] == [(f1, "A", merged.run_id), (p2, "B", merged.run_id)]
    assert comparable(json.loads(out.read_text())) == comparable(json.loads((plain / "merged.json").read_text()))
    assert {p: digest(p) for p in (s1, s2)} == before
    rows = {r["case_id"]: r for r in read_csv(run_cli(capsys, "export", out)[1])}
    assert (rows[f1]["outcome"], rows[f1]["reviewed_outcome"]) == ("failed", "passed")


def test_reviewed_copies_are_valid_records_cases(copy, capsys):
    path = copy("write")
    for case_id in passing(path, 2):
        assert review(capsys, path, case_id, "fail")[0] == 0
    rec, got = reviews.load(path)
    changed = reviews.reviewed_cases(rec, got)
    RunRecord.model_validate({**rec.model_dump(mode="json"), "cases": [c.model_dump(mode="json") for c in changed]})
    assert sum(c.outcome == "failed" for c in changed) == sum(c.outcome == "failed" for c in rec.cases) + 2
