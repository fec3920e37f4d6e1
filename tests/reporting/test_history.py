"""Run history (``reporting/history.py``): ``groundeval report DIR`` (the page, read in headless
Chromium) and ``groundeval runs DIR`` (the table), over real records.

The records: the small extraction set run by groundeval itself (subprocesses of a copied
project) with four scripted agents and two models: right, adding a code, leaving one out,
and raising under ``-x`` (a run cut short: its record, and its journal kept beside it), plus a
shard's record. They are written into a folder tree whose file names sort against the runs'
times, so the order on the page can only come from ``started_at``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote, urlencode

import pytest
from conftest import AGENTS, EVAL_FILE, SMALL_SET, SYNTHEA
from test_html_report import CHROMIUM, XSS, browse, field, fmt, fmt_ci, needs_chromium, parse

from pytest_groundeval import cli
from pytest_groundeval.reporting import history

# (file, agent, model, extra options): in the order they run (so by started_at); the names
# sort otherwise (z, a, m, b), and two are in a subfolder (folders are read recursively)
RUNS = (("nightly/z-first.json", "CorrectA", ()),
        ("a-second.json", "HallucinatingB", ()),
        ("nightly/m-third.json", "OmittingA", ()),
        ("b-fourth.json", "Raising", ("-x", "--agent-retries", "0")))

# the scripted agents, reporting the model they used (a module:Class agent chooses its own)
MODEL_AGENTS = AGENTS + '''

def _with_model(cls, model):
    class Reported(cls):
        def run(self, prompt):
            return {"text": cls.run(self, prompt), "model": model}
    Reported.name = cls.name
    return Reported

CorrectA = _with_model(Correct, "m-a")
HallucinatingB = _with_model(Hallucinating, "m-b")
OmittingA = _with_model(Omitting, "m-a")
'''


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    """``runs/``: four records, one journal (the run cut short keeps it) and a shard's record."""
    project = tmp_path_factory.mktemp("history")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_evals.py").write_text(EVAL_FILE)
    (project / "agents_under_test.py").write_text(MODEL_AGENTS)
    (project / "data").mkdir()
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", project / "data" / f"{stem}.json")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "--data-dir", "data", "-p", "no:cacheprovider",
                               "-p", "no:randomly", *args], cwd=project, capture_output=True, text=True, timeout=600)

    for path, agent, extra in RUNS:
        done = run(f"--agent=agents_under_test:{agent}", "--run-record", f"runs/{path}", *extra)
        assert (project / "runs" / path).is_file(), done.stdout[-3000:]
    assert (project / "runs" / "b-fourth.jsonl").is_file()  # cut short (-x): its journal stays
    done = run("--agent=agents_under_test:Correct", "--groundeval-shard", "1/1", "--run-record", "runs/shards/s1.json")
    assert done.returncode == 0, done.stdout[-3000:]
    return project / "runs"


def records(runs_dir: Path) -> list[dict]:
    """The four records, in the order they ran."""
    return [json.loads((runs_dir / path).read_text()) for path, *_ in RUNS]


def groundeval(*argv: str) -> int:
    return cli.main(list(argv))


def headline(summary: dict) -> list[str]:
    """The task's headline metrics, from the record's specs as the page promises: rate, mean
    and prf figures outside a per-class breakdown."""
    return [n for n, s in summary["specs"].items() if s["kind"] in ("rate", "mean", "prf") and "group" not in s]


@pytest.fixture(scope="module")
def page(runs_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "index.html"
    assert groundeval("report", str(runs_dir), "-o", str(out)) == 0
    return out


def rows(dom) -> list:
    return dom.all("tr", class_="run")


def shown(dom) -> list[str]:
    return [r.attrs["data-run"] for r in rows(dom) if not r.hidden]


# ---------------------------------------------------------------- the page, in the browser
@needs_chromium
def test_every_run_is_linked_in_time_order_to_its_own_page(page, runs_dir):
    recs = records(runs_dir)
    assert [r["started_at"] for r in recs] == sorted(r["started_at"] for r in recs)
    dom = browse(page)
    assert [r.attrs["data-run"] for r in rows(dom)] == [r["run_id"] for r in recs]
    for tr, rec in zip(rows(dom), recs):
        assert (tr.attrs["data-agent"], tr.attrs["data-model"], tr.attrs["data-branch"]) == (
            rec["agent"], rec["model"] or "no model", "unknown")  # no git block in these records: unknown
        link = tr.one("a")
        assert link.text() == rec["run_id"]
        target = page.parent / unquote(link.attrs["href"])
        assert target.is_file() and target.parent == page.parent / "index-runs"
        run_page = browse(target)  # the run's own report (html.py), of that record
        assert field(run_page, "run_id") == rec["run_id"] and field(run_page, "agent") == rec["agent"]
        s = rec["summary"]["extraction"]
        ran = s["n_cases"] - s["n_skipped"]
        assert tr.one(data_pass="extraction").text() == f"{fmt(s['n_passed'] / ran)} ({s['n_passed']}/{ran})"
        lead = (fmt(s["micro_f1"]) + (f" {fmt_ci(s['micro_f1_ci95'])}" if s.get("micro_f1_ci95") else ""))
        assert tr.one(data_lead="extraction").text() == lead
    cut = rows(dom)[3].one("td", class_="completeness").text()
    assert "cut short" in cut and recs[3]["completeness"]["cut_short"]
    # the journal and the shard: skipped, each said so on the page
    skipped = {Path(li.attrs["data-skipped"]).name: li.text() for li in dom.one(id="skipped").all("li")}
    assert set(skipped) == {"b-fourth.jsonl", "s1.json"}
    assert "a journal" in skipped["b-fourth.jsonl"] and "shard 1/1" in skipped["s1.json"]
    assert dom.one(id="shown").attrs["data-shown"] == "4"


@needs_chromium
def test_trend_points_are_the_records_figures(page, runs_dir):
    recs = records(runs_dir)
    dom = browse(page)
    summaries = [r["summary"]["extraction"] for r in recs]
    names = headline(summaries[0])
    assert "micro_f1" in names and "tp" not in names  # counts are not trends
    plots = {p.attrs["data-metric"]: p for p in dom.one("section", data_task="extraction").all("div",
                                                                                                class_="trend-plot")}
    assert list(plots) == names
    varied = 0
    for name, plot in plots.items():
        chart = plot.one("svg")
        lo, hi = float(chart.attrs["data-lo"]), float(chart.attrs["data-hi"])
        points = plot.all("g", class_="point")
        assert [g.attrs["data-run"] for g in points] == [r["run_id"] for r in recs]
        ys = []
        for g, s in zip(points, summaries):
            assert g.attrs["data-value"] == fmt(s[name])
            assert g.attrs["data-ci"] == (fmt_ci(s.get(f"{name}_ci95")) if s.get(f"{name}_ci95") else "")
            cy = float(g.one("circle").attrs["cy"])  # placed at the value on the chart's own scale
            assert cy == pytest.approx(8 + (hi - s[name]) / (hi - lo) * (110 - 16), abs=0.01)
            ys.append(cy)
            ci = s.get(f"{name}_ci95")
            bars = g.all("line", class_="ci")
            if ci:
                assert sorted(float(bars[0].attrs[k]) for k in ("y1", "y2")) == pytest.approx(
                    sorted(8 + (hi - v) / (hi - lo) * 94 for v in ci), abs=0.01)
            else:
                assert bars == []
        varied += len(set(ys)) > 1
    assert varied  # the runs differ: some line is not flat
    assert int(plots["micro_f1"].one("svg").attrs["data-points"]) == 4


@needs_chromium
def test_filters_hide_and_show_rows_and_points(page, runs_dir):
    recs = records(runs_dir)
    def run_of(r: dict, key: str) -> str:
        return "unknown" if key == "branch" else r[key] or "no model"  # these records have no git block

    assert [r["agent"].split()[0] for r in recs] == ["correct", "hallucinating", "omitting", "raising"]
    assert [r["model"] for r in recs] == ["m-a", "m-b", "m-a", None]
    for query in ({"agent": recs[0]["agent"]}, {"model": "m-b"}, {"model": "m-a"}, {"model": "no model"},
                  {"model": "m-a", "agent": recs[2]["agent"]}, {"branch": "unknown"}):
        dom = browse(page, urlencode(query))
        want = [r["run_id"] for r in recs if all(run_of(r, k) == v for k, v in query.items())]
        assert shown(dom) == want and 0 < len(want), query
        assert dom.one(id="shown").attrs["data-shown"] == str(len(want))
        plot = dom.one("div", class_="trend-plot", data_metric="micro_f1")
        assert [g.attrs["data-run"] for g in plot.all("g", class_="point")] == want  # redrawn over those
    dom = browse(page, urlencode({"agent": "no-such-agent"}))  # no such option: every run
    assert shown(dom) == [r["run_id"] for r in recs]


@needs_chromium
def test_branch_filter(runs_dir, tmp_path):
    """Records with a git block (another part of groundeval adds it): the branch is read from
    it, and filters the rows."""
    found = history.gather([runs_dir])
    branches = ["main", "feature/x", "main", "feature/x"]
    found.runs = [replace(r, branch=b) for r, b in zip(found.runs, branches)]
    out = history.write_index(found, tmp_path / "index.html")
    dom = browse(out, urlencode({"branch": "feature/x"}))
    assert shown(dom) == [r.run_id for r, b in zip(found.runs, branches) if b == "feature/x"]
    options = [o.attrs["value"] for o in dom.one("select", id="filter-branch").all("option")]
    assert options == ["", "feature/x", "main"]


def test_git_block_is_read_defensively():
    rec = SimpleNamespace(git_sha="a" * 40)
    assert history.git_of(rec) == ("unknown", "a" * 40, None)
    rec.git = {"commit": "b" * 40, "branch": "main", "dirty": True}
    assert history.git_of(rec) == ("main", "b" * 40, True)
    rec.git = SimpleNamespace(commit="c" * 40, branch=None, dirty=False)
    assert history.git_of(rec) == ("unknown", "c" * 40, False)


@needs_chromium
def test_markup_in_runs_is_text(runs_dir, tmp_path):
    found = history.gather([runs_dir])
    found.runs = [replace(r, agent=XSS, model="</script><!--", branch='"><img src=x>') for r in found.runs]
    text = history.render(found)
    assert XSS not in text and "<img src=x" not in text and "</script><!--" not in text
    out = tmp_path / "index.html"
    out.write_text(text)
    dom = browse(out, urlencode({"agent": XSS}))
    assert dom.one("head").one("title").text() == "groundeval run history"
    assert dom.all("img") == [] and len(dom.all("script")) == 2
    assert [r.one("td", class_="agent").text() for r in rows(dom)] == [XSS] * 4
    assert len(shown(dom)) == 4  # the filter value is the agent's text, matched as text


# ---------------------------------------------------------------- without a browser
def test_the_page_is_self_contained(page):
    dom = parse(page.read_text(encoding="utf-8"))
    csp = dom.one("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp
    assert [s.attrs.get("type") for s in dom.all("script")] == ["application/json", None]
    for n in dom.iter():
        assert n.tag not in ("link", "img", "iframe", "object", "embed", "base")
        assert not {"src", "action", "srcset", "poster"} & set(n.attrs)
        if "href" in n.attrs:  # only the runs' own pages, beside the index
            assert n.tag == "a" and n.attrs["href"].startswith("index-runs/") and "//" not in n.attrs["href"]
    assert oct(page.stat().st_mode & 0o777) == oct(0o600)


def test_page_names_cannot_leave_their_folder():
    assert history.page_name("../../etc/passwd") == "_.._etc_passwd.html"
    assert history.page_name("20261204T083955Z-11a48c") == "20261204T083955Z-11a48c.html"
    assert history.page_name("..") == "run.html"
    assert "/" not in history.page_name("a/b\\c") and history.page_name("a/b").endswith(".html")


def test_runs_prints_the_table(runs_dir, capsys):
    recs = records(runs_dir)
    assert groundeval("runs", str(runs_dir)) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["started", "run", "id", "agent", "model", "branch", "extraction", "pass", "rate",
                                "extraction", "micro_f1", "completeness"]
    assert len(lines) == 1 + len(recs)
    for line, rec in zip(lines[1:], recs):
        s = rec["summary"]["extraction"]
        ran = s["n_cases"] - s["n_skipped"]
        ci = f" {fmt_ci(s['micro_f1_ci95'])}" if s.get("micro_f1_ci95") else ""
        c = rec["completeness"]
        state = "cut short" if c["cut_short"] else "complete"
        day, rest = rec["started_at"].split("T")
        assert line.split() == [day, rest.split(".")[0].rstrip("Z") + "Z", rec["run_id"], *rec["agent"].split(),
                                *(rec["model"] or "no model").split(), "unknown",
                                fmt(s["n_passed"] / ran), f"({s['n_passed']}/{ran})",
                                *(fmt(s["micro_f1"]) + ci).split(), f"{c['recorded']}/{c['selected']}",
                                *state.split()]
    # what is skipped, and why, on stderr
    assert "b-fourth.jsonl: a journal" in err and "s1.json: shard 1/1" in err
    assert groundeval("runs", str(runs_dir), "--metric", "extraction.exact_match") == 0
    lines = capsys.readouterr().out.splitlines()
    assert "extraction exact_match" in lines[0]
    for line, rec in zip(lines[1:], recs):
        s = rec["summary"]["extraction"]
        want = fmt(s["exact_match"]) + (f" {fmt_ci(s['exact_match_ci95'])}" if s.get("exact_match_ci95") else "")
        assert want in line
    assert groundeval("runs", str(runs_dir), "--metric", "extraction.tp") == 2  # a count is no headline
    assert "declares no headline metric 'tp'" in capsys.readouterr().err


# ---------------------------------------------------------------- errors and the report command's modes
def test_errors_name_the_file(runs_dir, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in ("runs", "report"):
        argv = [command, str(empty)] + (["-o", str(tmp_path / "i.html")] if command == "report" else [])
        assert groundeval(*argv) == 2
        assert f"no run record in {empty}" in capsys.readouterr().err
    only = tmp_path / "only-journal"
    only.mkdir()
    shutil.copy(runs_dir / "b-fourth.jsonl", only)
    assert groundeval("runs", str(only)) == 2
    assert "1 file skipped" in capsys.readouterr().err
    mixed = tmp_path / "mixed"
    shutil.copytree(runs_dir, mixed)
    (mixed / "notes.json").write_text('{"hello": 1}')
    assert groundeval("runs", str(mixed)) == 2
    assert f"{mixed / 'notes.json'} is not a groundeval run record" in capsys.readouterr().err
    (mixed / "notes.json").unlink()
    bad = json.loads((runs_dir / RUNS[0][0]).read_text())
    bad["completeness"]["recorded"] = "many"
    (mixed / "bad.json").write_text(json.dumps(bad))
    assert groundeval("report", str(mixed), "-o", str(tmp_path / "i.html")) == 2
    err = capsys.readouterr().err
    assert f"{mixed / 'bad.json'}: the record is not valid" in err and "completeness.recorded" in err
    (mixed / "bad.json").write_text((runs_dir / RUNS[0][0]).read_text()[:500])  # cut off
    assert groundeval("runs", str(mixed)) == 2
    assert f"{mixed / 'bad.json'} is not a JSON run record" in capsys.readouterr().err
    (mixed / "bad.json").unlink()
    shutil.copy(runs_dir / RUNS[0][0], mixed / "copy.json")  # one run twice
    assert groundeval("runs", str(mixed)) == 2
    assert "are both run" in capsys.readouterr().err
    assert groundeval("runs", str(tmp_path / "missing.json")) == 2
    assert "cannot read" in capsys.readouterr().err
    assert not (tmp_path / "i.html").exists()


def test_report_modes(runs_dir, tmp_path, capsys):
    first, second = (str(runs_dir / p) for p, *_ in RUNS[:2])
    assert groundeval("report", first, "-o", str(tmp_path / "one.html")) == 0  # one record: its report
    assert field(parse((tmp_path / "one.html").read_text()), "run_id") == records(runs_dir)[0]["run_id"]
    assert groundeval("report", first, second, "-o", str(tmp_path / "two.html")) == 0  # two: compared
    assert "groundeval report (comparison)" in (tmp_path / "two.html").read_text()
    assert groundeval("report", first, second, "--history", "-o", str(tmp_path / "h2.html")) == 0
    dom = parse((tmp_path / "h2.html").read_text())
    assert [r.attrs["data-run"] for r in rows(dom)] == [r["run_id"] for r in records(runs_dir)[:2]]
    assert (tmp_path / "h2-runs").is_dir()
    three = [str(runs_dir / p) for p, *_ in RUNS[:3]]
    assert groundeval("report", *three, "-o", str(tmp_path / "h3.html")) == 0
    assert len(rows(parse((tmp_path / "h3.html").read_text()))) == 3
    assert groundeval("report", *three) == 2  # records and no -o: say where
    assert "name the history page with -o" in capsys.readouterr().err
    copy = tmp_path / "copy"
    shutil.copytree(runs_dir, copy)
    assert groundeval("report", str(copy)) == 0  # one folder: DIR/index.html
    assert (copy / "index.html").is_file() and len(list((copy / "index-runs").glob("*.html"))) == 4
    assert groundeval("report", str(copy)) == 0  # again: the pages are not records
    capsys.readouterr()


def test_records_are_read_only_through_the_store_reader(runs_dir, monkeypatch, capsys):
    from pytest_groundeval.store import files

    seen: list[str] = []
    real = files._bytes

    def spy(path):
        seen.append(path.relative_to(runs_dir).as_posix())
        return real(path)

    monkeypatch.setattr(files, "_bytes", spy)
    assert groundeval("runs", str(runs_dir)) == 0
    capsys.readouterr()
    assert seen == ["a-second.json", "b-fourth.json", "b-fourth.jsonl", "nightly/m-third.json", "nightly/z-first.json",
                    "shards/s1.json"]  # every record, journal and shard under the folder, once, in path order


def test_headline_and_lead_metrics_come_from_the_declared_specs():
    """Over every bundled task's own specs: the headline metrics are its rate, mean and prf
    figures outside a per-class breakdown; the lead is the figure the task declares its
    headline (write: ``pass``, all four dimensions, not its first rate ``schema``); a record
    of a task that declares none: the ungrouped prf F1, else ``pass``, else the first rate or
    mean with an interval."""
    from pytest_groundeval.tasks import registry

    tasks = registry()
    rec = SimpleNamespace(specs={s.name: s for s in tasks["reconciliation"].specs})
    names = [s.name for s in history.headline_specs(rec)]
    assert "micro_f1" in names and "macro_f1" in names and "exact_match" in names
    assert not any(s.group for s in rec.specs.values() if s.name in names)
    assert any(s.group for s in rec.specs.values())  # the per-verdict figures exist, and are left out
    assert "matched_f1" in rec.specs and "matched_f1" not in names and "tp" not in names
    assert history.lead_metric(history.headline_specs(rec)) == "micro_f1"
    write = SimpleNamespace(specs={s.name: s for s in tasks["write"].specs})
    assert [s.name for s in history.headline_specs(write)] == ["schema", "coding", "constraints", "safety", "pass"]
    assert history.lead_metric(history.headline_specs(write)) == "pass"  # declared: Task.headline
    leads = {name: history.lead_metric(history.headline_specs(SimpleNamespace(specs={s.name: s for s in cls.specs})))
             for name, cls in tasks.items()}
    assert {k: leads[k] for k in ("extraction", "write", "reconciliation", "labs", "orders", "letter")} == {
        "extraction": "micro_f1", "write": "pass", "reconciliation": "micro_f1", "labs": "pass", "orders": "pass",
        "letter": "checks_passed"}  # orders: not ``persisted`` (an order written, right or wrong)
    # a record of a task that declared no headline (an older record, a user's task): the kinds decide
    plain = [s.model_copy(update={"headline": None}) for s in tasks["write"].specs]
    assert history.lead_metric(plain) == "pass"
    assert history.lead_metric([s for s in plain if s.name != "pass"]) == "schema"  # the first rate with an interval
    # the rule reads kinds, not names: a renamed F1 is still the lead, a count named like one is not a trend
    from pytest_groundeval.model import metric, prf_specs
    specs = [metric("recall_like", "count"), metric("acc", "mean", interval="none"), *prf_specs("x", ("a", "b", "c"))]
    named = SimpleNamespace(specs={s.name: s for s in specs})
    assert [s.name for s in history.headline_specs(named)] == ["acc", "x_precision", "x_recall", "x_f1"]
    assert history.lead_metric(history.headline_specs(named)) == "x_f1"
    assert history.lead_metric(history.headline_specs(SimpleNamespace(specs={}))) is None


def test_a_task_headline_must_name_one_of_its_figures():
    """``Task.headline`` is marked on its spec alone (the record carries it); a name that is not
    one of the task's rates, means or F1s is its author's error, said when the class is made."""
    from pytest_groundeval.model import metric
    from pytest_groundeval.tasks import registry
    from pytest_groundeval.tasks.base import Task

    write = registry()["write"]
    assert [s.name for s in write.specs if s.headline] == ["pass"]
    assert [s.name for s in write.all_specs() if s.headline] == ["pass"]
    dumped = {s.name: s.model_dump() for s in write.specs}
    assert dumped["pass"]["headline"] is True and "headline" not in dumped["schema"]  # set fields only in the record
    for bad in ("nope", "tp"):  # unknown; a count
        with pytest.raises(TypeError, match=rf"headline {bad!r} is not one of its declared rate, mean or prf"):
            type("Toy", (Task,), {"specs": (metric("ok", "rate"), metric("tp", "count")), "headline": bad})
    toy = type("Toy", (Task,), {"specs": (metric("ok", "rate"), metric("also", "rate")), "headline": "also"})
    assert [s.name for s in toy.specs if s.headline] == ["also"]
    sub = type("Sub", (toy,), {"headline": "ok"})  # a subclass re-marks; the parent's specs are not changed
    assert [s.name for s in sub.specs if s.headline] == ["ok"] and [s.name for s in toy.specs if s.headline] == ["also"]


def test_pass_rate_is_over_the_results_that_ran():
    point = history.TaskPoint(n_cases=5, n_passed=2, n_skipped=1, figures={}, specs={})
    assert point.pass_text == "0.500 (2/4)"
    assert history.TaskPoint(n_cases=2, n_passed=0, n_skipped=2, figures={}, specs={}).pass_text == "–"


def test_a_reviews_file_beside_a_record_is_skipped_and_its_reviews_are_on_the_runs_page(runs_dir, tmp_path, capsys):
    """``groundeval review`` writes ``<run>.reviews.jsonl`` beside the record: the history is
    not refused for it; it is skipped (said so) and the run's own page shows the review."""
    copy = tmp_path / "runs"
    shutil.copytree(runs_dir, copy)
    record = copy / RUNS[1][0]  # the hallucinating agent: failed cases to overrule
    rec = json.loads(record.read_text())
    failed = next(c for c in rec["cases"] if c["outcome"] == "failed")
    assert groundeval("review", str(record), "--case", failed["case_id"], "--verdict", "pass",
                      "--reason", "the extra code is on the label", "--by", "Dr Test") == 0
    assert (copy / "a-second.reviews.jsonl").is_file()
    capsys.readouterr()
    out = tmp_path / "site" / "index.html"
    assert groundeval("report", str(copy), "-o", str(out)) == 0, capsys.readouterr().err
    dom = parse(out.read_text())
    assert len(rows(dom)) == 4
    skipped = {Path(li.attrs["data-skipped"]).name: li.text() for li in dom.one(id="skipped").all("li")}
    assert "a-second.reviews.jsonl" in skipped and "human reviews" in skipped["a-second.reviews.jsonl"]
    page = (out.parent / "index-runs" / history.page_name(rec["run_id"])).read_text()
    assert "Dr Test" in page and "the extra code is on the label" in page
