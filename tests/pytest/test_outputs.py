"""Where a run's files go and how the terminal points at them (issue 30 item 5): the record under
``.groundeval/runs/`` with a ``.gitignore`` the first run writes, the HTML report beside it by
default (``--no-groundeval-html`` skips it), and groundeval's lines ending with the paths and
``groundeval report`` for the history."""

from __future__ import annotations

import json

from conftest import SMALL_SET
from test_bad_inputs_corpus import WRITE_EVAL


def _run(p, *args: str):
    return p.runpytest("--data-dir", "data", "-p", "no:cacheprovider", *args)


def test_the_record_and_its_html_go_under_groundeval_runs_which_git_ignores(evalproject):
    result = _run(evalproject)
    result.assert_outcomes(passed=len(SMALL_SET))
    runs = evalproject.path / ".groundeval" / "runs"
    [record] = list(runs.glob("*.json"))
    html = record.with_suffix(".html")
    assert html.is_file() and json.loads(record.read_text())["run_id"] in html.read_text()
    assert not (evalproject.path / "runs").exists()
    ignore = evalproject.path / ".groundeval" / ".gitignore"
    assert ignore.read_text().splitlines()[-1] == "*"
    # the terminal's groundeval lines end with where they are, and the history command
    summary = result.outlines[:next(i for i, ln in enumerate(result.outlines) if ln.startswith("====") and "passed" in ln)]
    assert summary[-3:] == [f"run record: .groundeval/runs/{record.name}", f"HTML report: .groundeval/runs/{html.name}",
                            "history: groundeval report .groundeval/runs (every run in that folder, one page)"], summary
    # a .gitignore the user changed is theirs
    ignore.write_text("# mine\n")
    _run(evalproject).assert_outcomes(passed=len(SMALL_SET))
    assert ignore.read_text() == "# mine\n" and len(list(runs.glob("*.json"))) == 2


def test_the_output_options_still_decide(evalproject):
    result = _run(evalproject, "--groundeval-runs-dir", "out", "--no-groundeval-html")
    result.assert_outcomes(passed=len(SMALL_SET))
    assert len(list((evalproject.path / "out").glob("*.json"))) == 1
    assert not list((evalproject.path / "out").glob("*.html"))  # --no-groundeval-html
    assert not (evalproject.path / ".groundeval" / "runs").exists() and not (evalproject.path / "out" / ".gitignore").exists()
    assert not any(ln.startswith("HTML report:") for ln in result.outlines)
    result.stdout.fnmatch_lines(["history: groundeval report out *"])
    _run(evalproject, "--run-record", "record.json", "--groundeval-html", "page.html").assert_outcomes(
        passed=len(SMALL_SET))
    assert (evalproject.path / "record.json").is_file() and (evalproject.path / "page.html").is_file()
    assert not (evalproject.path / "record.html").exists()



def test_a_json_error_in_a_cases_file_is_one_line_naming_file_line_and_column(pytester):
    pytester.makepyfile(test_w=WRITE_EVAL)
    (pytester.path / "bad.json").write_text('{"cases": [\n  {"id": "a",}\n]}\n')
    result = pytester.runpytest("--write-cases", "bad.json", "--run-record", "record.json", "-p", "no:cacheprovider")
    assert result.ret == 2  # a collection error: nothing ran
    out = result.stdout.str()
    said = [ln for ln in result.outlines if "bad.json: not valid JSON" in ln]
    assert said and said[0].startswith("groundeval: bad.json: not valid JSON: ") and "line 2 column 13" in said[0]
    assert "pluggy/" not in out and "_hookexec" not in out and "plugin.py" not in out, out  # no traceback of ours
    assert not (pytester.path / "record.json").exists()


def test_a_default_page_that_cannot_be_written_is_one_line_and_leaves_the_exit_status(evalproject):
    (evalproject.path / "record.html").mkdir()  # where the default page would go
    result = _run(evalproject, "--run-record", "record.json")
    assert result.ret == 0  # the record stands; the page was not asked for
    result.stdout.fnmatch_lines(["groundeval: could not write the HTML report *record.html*"])
    assert (evalproject.path / "record.json").is_file()
