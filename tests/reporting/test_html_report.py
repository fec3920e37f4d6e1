"""The HTML report (``--groundeval-html``, ``groundeval report``) read in headless Chromium.

Real records: the extraction plugin run in pytester with a scripted agent that is right on
one case, adds a code on another, leaves one out on a third and fails on the fourth; the
bundled write and reconciliation suites run with the offline baseline on a few committed
cases. Each page is loaded with Chromium's ``--dump-dom`` (the DOM after the page's script
ran) and read back: no console message and nothing in ``#errors``, and every figure it shows
equals the record's, formatted the way the page promises (3 decimals, USD with 4).
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import shutil
import stat
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
from conftest import FIXTURES, REFS, ROOT, SMALL_SET, STOPPED_ACTIVE, SYNTHEA, ZERO, read_record

from pytest_groundeval.reporting import html as html_report

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not found (`chromium` on PATH): install it with `apt-get install -y chromium` "
    "(.ci/run does when it can); the page itself is still checked without a browser")
FAILING = "Clarissa466_Feeney44_38f65650-9735-8541-322d-387417329eb2"


def _patient_id(stem: str) -> str:
    bundle = json.loads((SYNTHEA / f"{stem}.json").read_text())
    return next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")


REPORT_AGENTS = '''
import json
from agents_under_test import _patient, _truth

ADD, OMIT, FAIL = {add!r}, {omit!r}, {fail!r}

class Mixed:
    """Right on one case, adds a code on one, leaves one out on one, fails on one; tokens of a priced model."""
    name = "mixed"
    def run(self, prompt):
        pid, meds = _patient(prompt), _truth(prompt)
        if pid == FAIL:
            raise ConnectionError("upstream API unavailable")
        if pid == ADD:
            meds = meds + [{{"code": "198440", "display": "Acetaminophen 500 MG Oral Tablet"}}]
        if pid == OMIT:
            meds = meds[:-1]
        return {{"text": json.dumps({{"active_medications": meds}}), "model": "claude-opus-4-1",
                "usage": {{"input_tokens": len(prompt) // 4, "output_tokens": 7 + len(meds)}}}}

XSS = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=\\"document.title='pwned'\\">"

class Evil:
    """An agent whose name, displays and raw output are markup."""
    name = XSS
    def run(self, prompt):
        meds = [dict(m, display=IMG + m["display"]) for m in _truth(prompt)]
        meds.append({{"code": "999</script><script>document.title='pwned'</script>", "display": XSS}})
        return "</script>" + XSS + "\\n" + json.dumps({{"active_medications": meds}}) + "\\n<!-- " + IMG
'''

WRITE_CASES = ("acetaminophen-prn-range", "amoxicillin-capsule-250-tid", "aspirin-no-longer-on", "ibuprofen-denied",
               "zyrtec-two-5mg-tablets")
REC_CASES = ("Adalberto_Hartmann_44ec4447_a", "Chiquita638_Vandervort697_269c9001_a", "Devin_Bailey_17dc1d1b_a",
             "Kyla_Zulauf_4ac88c8f_b", "Tanner_Ondricka_43d11566_b")

# records are made once per test session (pytester is per test): the first test that needs one runs it
_RUNS: dict[str, dict] = {}


def _agents(p: pytest.Pytester) -> None:
    p.makepyfile(report_agents=REPORT_AGENTS.format(add=_patient_id(REFS), omit=_patient_id(STOPPED_ACTIVE),
                                                    fail=_patient_id(FAILING)))


def _extraction(p: pytest.Pytester) -> dict:
    if "extraction" not in _RUNS:
        _agents(p)
        result = p.runpytest("test_evals.py", "--agent", "report_agents:Mixed", "--data-dir", "data",
                             "--agent-retries", "0", "--run-record", "record.json", "--threshold", "extraction.f1=0.5",
                             "--threshold", "extraction.exact_match=0.9",
                             "--groundeval-html", "report.html", "-p", "no:cacheprovider")
        _RUNS["extraction"] = {"record": read_record(p), "html": p.path / "report.html", "out": result.stdout.str(),
                               "ret": result.ret, "path": p.path}
    return _RUNS["extraction"]


@pytest.fixture
def extraction(evalproject):
    return _extraction(evalproject)


@pytest.fixture
def suites(pytester):
    if "suites" not in _RUNS:
        pytester.makepyfile(test_suite_write=(ROOT / "evals" / "test_write.py").read_text(),
                            test_suite_reconciliation=(ROOT / "evals" / "test_reconciliation.py").read_text())
        write = pytester.mkdir("cases").joinpath("write")
        write.mkdir()
        for name in WRITE_CASES:
            shutil.copy(FIXTURES / "write_cases" / f"{name}.json", write)
        rec, bundles = pytester.path / "cases" / "reconciliation", pytester.path / "cases" / "synthea"
        rec.mkdir()
        bundles.mkdir()
        for name in REC_CASES:
            src = FIXTURES / "reconciliation" / f"{name}.json"
            shutil.copy(src, rec)
            bundle = (src.parent / json.loads(src.read_text())["bundle"]).resolve()
            shutil.copy(bundle, bundles / bundle.name)
        pytester.runpytest("test_suite_write.py", "test_suite_reconciliation.py", "--write-cases", "cases/write",
                           "--reconciliation-cases", "cases/reconciliation", "--run-record", "suites.json",
                           "--groundeval-html", "suites.html", "-p", "no:cacheprovider")
        _RUNS["suites"] = {"record": read_record(pytester, "suites.json"), "html": pytester.path / "suites.html"}
    return _RUNS["suites"]


# ---------------------------------------------------------------- the dumped DOM, read back
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict, parent: "Node | None") -> None:
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def all(self, tag: str | None = None, **attrs: str | bool) -> list["Node"]:
        want = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}

        def match(n: Node, k: str, v: str | bool) -> bool:
            if v is True:
                return k in n.attrs
            if k == "class":  # one of its classes
                return v in n.attrs.get("class", "").split()
            return n.attrs.get(k) == v

        return [n for n in self.iter()
                if (tag is None or n.tag == tag) and all(match(n, k, v) for k, v in want.items())]

    def one(self, tag: str | None = None, **attrs: str | bool) -> "Node":
        found = self.all(tag, **attrs)
        assert len(found) == 1, f"{len(found)} <{tag or '*'} {attrs}> elements"
        return found[0]

    @property
    def hidden(self) -> bool:
        return "hidden" in self.attrs


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.at = Node("#document", {}, None)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v if v is not None else "" for k, v in attrs}, self.at)
        self.at.children.append(node)
        if tag not in VOID:
            self.at = node

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.at = self.at.parent

    def handle_endtag(self, tag):
        n = self.at
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.at = n.parent

    def handle_data(self, data):
        self.at.children.append(data)


def parse(text: str) -> Node:
    b = _Builder()
    b.feed(text)
    b.close()
    return b.root


_BROWSER: list = []  # this process's one headless Chromium (DevTools over a pipe), closed at exit


def _browser():
    if not _BROWSER or _BROWSER[0].proc.poll() is not None:
        browser = _chromium_module().Chromium(CHROMIUM)
        atexit.register(browser.close)
        _BROWSER[:] = [browser]
    return _BROWSER[0]


# the page is done: its script ran to its end, or its catcher wrote what stopped it
_DONE = ("document.readyState === 'complete' && document.body && (document.body.getAttribute('data-ready') === '1'"
         " || !!(document.getElementById('errors') && document.getElementById('errors').textContent))")


def browse(page: Path, fragment: str = "") -> Node:
    """The page's DOM after its script ran (in a window tall enough for every row of these
    small records to be rendered), asserting it loaded cleanly: no console message
    (the page's console, uncaught errors and the browser's own errors about the page), nothing
    in ``#errors`` (the page's own catcher), and its script ran to the end (``data-ready``).
    One browser per test process; each page its own tab, closed after."""
    browser = _browser()
    tab = browser.open(page, fragment, width=1280, height=30000, ready=_DONE)
    try:
        text = tab.evaluate("document.documentElement.outerHTML")
    finally:
        tab.close()
    mine = [ev for ev in browser.events if ev.get("sessionId") == tab.session]
    browser.events[:] = [ev for ev in browser.events if ev.get("sessionId") != tab.session]
    saved, browser.events = browser.events, mine
    try:
        console = browser.console_messages()
    finally:
        browser.events = saved
    assert console == [], console
    dom = parse(text)
    body = dom.one("body")
    assert body.attrs.get("data-ready") == "1", "the page's script did not run to its end"
    errors = dom.one(id="errors")
    assert errors.hidden and errors.text() == ""
    return dom


# ---------------------------------------------------------------- the record's figures, as the page formats them
def fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    return f"{v:.3f}"


def fmt_ci(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, list) else ""


def fmt_usd(v) -> str:
    return "–" if v is None else f"${v:.4f}"


def field(dom: Node, name: str) -> str:
    return " ".join(dom.one("dd", data_field=name).text().split())


def check_header(dom: Node, rec: dict) -> None:
    assert field(dom, "run_id") == rec["run_id"]
    assert field(dom, "agent") == rec["agent"]
    assert field(dom, "model") == (rec["model"] or "–")
    assert field(dom, "git_sha") == (rec["git_sha"] or "–")
    comp = rec["completeness"]
    for k in ("selected", "deselected", "recorded", "subset", "cut_short"):
        assert field(dom, f"completeness.{k}") == fmt(comp[k]), k
    assert dom.one(data_status="cut-short" if comp["cut_short"] else "complete")
    gate = rec["gate"]
    if gate is None:
        assert dom.one(data_gate="none")
    else:
        assert dom.one(data_gate="PASSED" if gate["passed"] else "FAILED")
        for t in gate["thresholds"]:
            cells = [c.text() for c in dom.one("tr", data_threshold=t["metric"]).all("td")]
            assert cells[1:3] == [fmt(t["value"]), fmt(t["threshold"])]
    for k, v in rec["options"].items():
        cell = dom.one("tr", data_option=k).all("td")[1].text()
        assert cell == (json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else fmt(v) if not isinstance(
            v, str) else v), k


def check_metrics(dom: Node, rec: dict) -> None:
    """Every summary figure of every task is on the page, equal to the record's."""
    for task, summary in rec["summary"].items():
        for key, value in summary.items():
            if key == "specs":  # what each figure is, not a figure
                continue
            cells = dom.all(data_metric=f"{task}.{key}")
            assert cells, f"{task}.{key} is not on the page"
            want = fmt_ci(value) if key.endswith("_ci95") else fmt(value)
            assert {c.text() for c in cells} == {want}, (task, key)


def check_usage(dom: Node, rec: dict) -> None:
    u = rec["usage"]
    assert field(dom, "usage.input_tokens") == fmt(u["input_tokens"])
    assert field(dom, "usage.output_tokens") == fmt(u["output_tokens"])
    from pytest_groundeval.reporting.terminal import cost_words

    assert field(dom, "usage.cost_usd") == cost_words(u["cost_usd"], u["cases_unpriced"], u.get("cases_unreported") or 0,
                                                      u["cases_priced"])  # as the terminal says it
    assert field(dom, "usage.cases_priced") == fmt(u["cases_priced"])
    assert field(dom, "usage.prices_as_of") == u["prices_as_of"]
    for task in rec["summary"]:
        cases = [c for c in rec["cases"] if c["task"] == task]
        row = dom.one("tr", data_usage_task=task)
        for k in ("input_tokens", "output_tokens"):
            assert row.one(data_usage=k).text() == str(sum((c["usage"] or {}).get(k, 0) for c in cases))
        cost = sum(c["cost_usd"] for c in cases if c["cost_usd"] is not None)
        unpriced = sum(1 for c in cases if c["cost_usd"] is None and c["usage"])
        priced = sum(c["cost_usd"] is not None for c in cases)
        assert row.one(data_usage="cost_usd").text() == cost_words(round(cost, 6), unpriced, 0, priced)


def case_rows(dom: Node) -> list[Node]:
    return dom.all("tr", data_key=True)


def check_case_rows(dom: Node, rec: dict) -> None:
    rows = case_rows(dom)
    assert [(r.attrs["data-case-id"], r.attrs["data-task"], r.attrs["data-outcome"]) for r in rows] == [
        (c["case_id"], c["task"], c["outcome"]) for c in rec["cases"]]
    for r, c in zip(rows, rec["cases"]):
        tds = r.all("td")
        assert [tds[0].text(), tds[1].text()] == [c["case_id"], c["task"]]
        kind = f" ({c['error']['kind']})" if c["error"] else ""
        assert tds[2].text() == c["outcome"] + kind
    shown = dom.one(id="shown")
    assert shown.attrs["data-shown"] == shown.attrs["data-total"] == str(len(rec["cases"]))


def check_strip(dom: Node, rec: dict) -> None:
    """The summary strip: per task its cases by outcome (errors by kind) and its headline figure."""
    for task, summary in rec["summary"].items():
        cases = [c for c in rec["cases"] if c["task"] == task]
        row = dom.one("tr", data_strip_task=task)
        shown = {b.attrs["data-count"]: int(b.text()) for b in row.all("b", data_count=True)}
        want = {f"{task}.cases": len(cases)}
        for c in cases:
            k = f"{task}.{c['outcome']}" + (f":{c['error']['kind']}" if c["error"] else "")
            want[k] = want.get(k, 0) + 1
        assert shown == want, task
        assert [want[f"{task}.{o}"] for o in ("passed", "failed") if f"{task}.{o}" in want] == [
            summary[f"n_{o}"] for o in ("passed", "failed") if summary[f"n_{o}"]]
        headline = {"extraction": "micro_f1", "reconciliation": "micro_f1", "write": "pass"}[task]
        assert [k for k, v in summary["specs"].items() if v.get("headline")] == [headline]  # the task's declared one
        assert row.one(data_headline=f"{task}.{headline}").text() == fmt(summary[headline])


def visible(dom: Node) -> list[str]:
    return [r.attrs["data-key"] for r in case_rows(dom) if not r.hidden]


def key(c: dict) -> str:
    return f"{c['task']}:{c['case_id']}"


# ---------------------------------------------------------------- without a browser
def test_the_page_is_self_contained(extraction):
    text = extraction["html"].read_text(encoding="utf-8")
    dom = parse(text)
    scripts = dom.all("script")
    assert [s.attrs.get("type") for s in scripts] == ["application/json", None]
    assert not any(n.tag in ("link", "img", "iframe", "object", "embed", "base", "a")
                   or {"src", "href", "action", "srcset", "poster"} & set(n.attrs) for n in dom.iter())
    csp = dom.one("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp
    data = json.loads(scripts[0].text())
    assert [c["key"] for c in data["cases"]] == [key(c) for c in extraction["record"]["cases"]]
    assert stat.S_IMODE(os.stat(extraction["html"]).st_mode) == 0o600


@pytest.mark.parametrize("run", ["extraction", "suites"])
def test_the_run_s_page_is_the_page_of_its_record_file(pytester, request, run):  # (pytester: its inner runs as set up)
    """The page a run writes reads its record's cases back from the file one at a time (its
    sections' sums, then each case's data): byte for byte the page of the record file read
    whole (errors, costs, dimensions, verdict classes)."""
    got = request.getfixturevalue(run)
    assert got["html"].read_bytes() == html_report.render_bytes(got["record"])


def test_the_pytest_option_writes_the_page_after_the_record(extraction):
    # the gate decides (f1 >= 0.5 met, exact_match >= 0.9 missed): not an internal error
    assert extraction["ret"] == pytest.ExitCode.TESTS_FAILED
    assert [t["passed"] for t in extraction["record"]["gate"]["thresholds"]] == [True, False]
    assert "HTML report: report.html" in extraction["out"]
    assert extraction["html"].is_file() and (extraction["path"] / "record.json").is_file()


def test_a_page_that_cannot_be_written_is_one_line_and_an_internal_error(evalproject):
    (evalproject.path / "afile").write_text("")
    result = evalproject.runpytest("test_evals.py", "--agent", "agents_under_test:Correct", "--data-dir", "data",
                                   "--run-record", "record.json", "--groundeval-html", "afile/report.html",
                                   "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    out = result.stdout.str()
    assert "groundeval: could not write the HTML report afile/report.html" in out
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert read_record(evalproject)["summary"]["extraction"]["n_passed"] == len(SMALL_SET)  # the record is there


def test_report_command_writes_the_page_and_refuses_what_is_not_a_record(extraction, tmp_path, capsys):
    record = extraction["path"] / "record.json"
    out = tmp_path / "r.html"
    assert _report(str(record), "-o", str(out)) == 0
    assert out.read_text(encoding="utf-8") == extraction["html"].read_text(encoding="utf-8")
    assert _report(str(record), "-o", str(tmp_path / "none" / "x.html")) == 0  # folders are made
    (tmp_path / "x.json").write_text('{"a": 1}')
    assert _report(str(tmp_path / "x.json"), "-o", str(out)) == 2
    assert "is not a groundeval run record" in capsys.readouterr().err
    assert _report(str(tmp_path / "missing.json"), "-o", str(out)) == 2
    assert "cannot read" in capsys.readouterr().err
    assert _report(str(record), str(record), str(record)) == 2


def test_a_comparison_compare_refuses_says_why_instead_of_p_values(extraction):
    new = extraction["record"]
    base = json.loads(json.dumps(new))
    for c in base["cases"]:
        c["task"] = "other"
    base["summary"] = {"other": base["summary"]["extraction"]}
    dom = parse(html_report.render(new, base))
    note = dom.one("p", data_paired="refused").text()
    assert "no task in common" in note and "nothing to compare" in note
    assert dom.all("tr", data_paired=True) == []


def _report(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="groundeval")
    html_report.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", *argv])
    return args.run(args)


# ---------------------------------------------------------------- in the browser
@needs_chromium
def test_extraction_page_shows_the_record(extraction):
    rec = extraction["record"]
    outcomes = {c["case_id"]: c["outcome"] for c in rec["cases"]}
    assert outcomes == {ZERO: "passed", REFS: "failed", STOPPED_ACTIVE: "failed", FAILING: "error"}
    assert rec["usage"]["cost_usd"] > 0
    dom = browse(extraction["html"])
    check_header(dom, rec)
    check_metrics(dom, rec)
    check_usage(dom, rec)
    check_case_rows(dom, rec)
    check_strip(dom, rec)
    # the F1 histogram: scored cases per bin (k/10 <= F1 < (k+1)/10; 1.0 its own), errors apart
    bins = {b.attrs["data-bin"]: b for b in dom.one(class_="f1-histogram").all("g", data_bin=True)}
    want = dict.fromkeys(html_report.HIST_BINS, 0)
    for c in rec["cases"]:
        if c["score"] is not None:
            f1 = c["score"]["metrics"]["f1"]
            want[html_report.HIST_BINS[10 if f1 >= 1 else int(f1 * 10)]] += 1
    want["error"] = sum(c["outcome"] == "error" for c in rec["cases"])
    assert {k: int(b.one("text", class_="count").text()) for k, b in bins.items()} == want
    assert sum(want.values()) == len(rec["cases"])


@needs_chromium
def test_an_opened_row_shows_added_and_missed_codes_reasons_and_the_error(extraction):
    rec = extraction["record"]
    by_id = {c["case_id"]: c for c in rec["cases"]}
    fragment = urlencode([("open", key(by_id[i])) for i in (REFS, STOPPED_ACTIVE, FAILING)])
    dom = browse(extraction["html"], fragment)
    details = {d.attrs["data-for"]: d for d in dom.all("tr", class_="detail")}
    assert set(details) == {key(by_id[i]) for i in (REFS, STOPPED_ACTIVE, FAILING)}
    assert all(not d.hidden for d in details.values())
    for case_id, status, listed in ((REFS, "added", "hallucinated"), (STOPPED_ACTIVE, "missed", "missed")):
        c, d = by_id[case_id], details[key(by_id[case_id])]
        codes = {r.attrs["data-code"]: r.attrs["data-status"] for r in d.all("tr", data_status=True)}
        assert sorted(k for k, v in codes.items() if v == status) == c["score"]["details"][listed]
        assert sorted(k for k, v in codes.items() if v == "match") == sorted(
            t["code"] for t in c["ground_truth"] if t["code"] in {p["code"] for p in c["predicted"]})
        assert d.one("p", class_="reason").all("span")[0].text() == c["score"]["reason"]
        assert json.loads(d.one("pre", class_="predicted").text()) == c["predicted"]
        assert json.loads(d.one("pre", class_="truth").text()) == c["ground_truth"]
        metrics = {r.attrs["data-case-metric"]: r.all("td")[1].text() for r in d.all("tr", data_case_metric=True)}
        assert metrics == {k: fmt(v) for k, v in c["score"]["metrics"].items()}
    err = details[key(by_id[FAILING])].one("pre", class_="error-message").text()
    assert err == f"{by_id[FAILING]['error']['error_class']}: {by_id[FAILING]['error']['message']}"


@needs_chromium
def test_search_and_filters_come_from_the_url(suites):
    rec = suites["record"]
    dom = browse(suites["html"], urlencode({"q": "KYLA"}))  # a case-insensitive substring of the id
    assert visible(dom) == [key(c) for c in rec["cases"] if "kyla" in c["case_id"].lower()] != []
    dom = browse(suites["html"], urlencode({"outcome": "failed", "task": "write"}))
    want = [key(c) for c in rec["cases"] if c["outcome"] == "failed" and c["task"] == "write"]
    assert visible(dom) == want and len(want) == 3
    assert dom.one(id="shown").attrs["data-shown"] == str(len(want))
    dom = browse(suites["html"], urlencode({"q": "zzz-no-such-case"}))
    assert visible(dom) == [] and dom.one(id="shown").attrs["data-shown"] == "0"


@needs_chromium
def test_write_and_reconciliation_pages_show_dimensions_verdicts_and_transcripts(suites):
    rec = suites["record"]
    assert {c["task"] for c in rec["cases"]} == {"write", "reconciliation"}
    opened = next(c for c in rec["cases"] if c["case_id"] == "zyrtec-two-5mg-tablets")
    dom = browse(suites["html"], urlencode({"open": key(opened)}))
    check_header(dom, rec)
    check_metrics(dom, rec)
    check_usage(dom, rec)
    check_case_rows(dom, rec)
    check_strip(dom, rec)
    # write: the pass rate per dimension, in the chart and its table, with the interval
    write, cases = rec["summary"]["write"], [c for c in rec["cases"] if c["task"] == "write"]
    dims = list(cases[0]["score"]["dimensions"]) + ["pass"]
    chart = dom.one("figure", class_="dimensions")
    assert [g.attrs["data-dimension"] for g in chart.all("g", data_dimension=True)] == dims
    for d in dims:
        assert chart.one("g", data_dimension=d).one("text", class_="value").text() == fmt(write[d])
        cells = [td.text() for td in chart.one("tr", data_dimension=d).all("td")]
        assert cells == [d, fmt(write[d]), fmt_ci(write[f"{d}_ci95"])]
    # reconciliation: per verdict, the summary's P/R/F1 and the cases' summed TP/FP/FN
    recon, rcases = rec["summary"]["reconciliation"], [c for c in rec["cases"] if c["task"] == "reconciliation"]
    table = dom.one("table", class_="verdict-table")
    verdicts = [r.attrs["data-verdict"] for r in table.all("tr", data_verdict=True)]
    assert verdicts == ["matched", "unreported", "unrecorded", "stopped-but-taking"]
    for v in verdicts:
        slug, row = v.replace("-", "_"), table.one("tr", data_verdict=v)
        for m in ("precision", "recall", "f1"):
            assert row.one(data_metric=f"reconciliation.{slug}_{m}").text() == fmt(recon[f"{slug}_{m}"])
        for m in ("tp", "fp", "fn"):
            assert row.one(data_count=m).text() == str(recon[f"{slug}_{m}"]) \
                == str(int(sum(c["score"]["metrics"][f"{slug}_{m}"] for c in rcases)))  # no errored case here
        assert row.one(data_count="truth").text() == str(
            sum(t["verdict"] == v for c in rcases for t in c["ground_truth"]))
    assert any(int(table.one("tr", data_verdict=v).one(data_count="fp").text()) for v in verdicts)
    # the opened write case: each dimension's reason and each check's, and the tool-call transcript
    detail = dom.one("tr", class_="detail")
    assert detail.attrs["data-for"] == key(opened) and not detail.hidden
    for name, d in opened["score"]["dimensions"].items():
        box = detail.one("div", data_dimension=name)
        assert box.one("span", class_="dim-reason").text() == d["reason"]
        assert [(li.attrs["data-check"], li.all("span")[0].text(), "ok" in li.attrs["class"])
                for li in box.all("li")] == [(ch["name"], ch["reason"], ch["passed"]) for ch in d["checks"]]
    codes = {r.attrs["data-code"]: r.attrs["data-status"] for r in detail.all("tr", data_status=True)}
    assert codes[opened["ground_truth"]["expected"]["rxnorm_code"]] in ("missed", "match")
    # the baseline's fixed pipeline: its own account (agent_reported), no harness-observed call
    assert opened["transcript"] is None and opened["agent_reported"]
    steps = detail.one("ol", class_="transcript").all("li", class_="step")
    assert [s.all("b")[0].text() for s in steps] == [f"tool {t['tool']}" for t in opened["agent_reported"]]
    assert len(steps) == opened["steps"] > 0
    assert "not evidence" in detail.text()


XSS = "<script>document.title='pwned'</script>"


@pytest.fixture
def evil(evalproject):
    """A real record of an agent whose name and answers are markup, plus a case id, an
    option and a reason that are: every record string must come out as text."""
    if "evil" not in _RUNS:
        _agents(evalproject)
        evalproject.runpytest("test_evals.py", "--agent", "report_agents:Evil", "--data-dir", "data",
                              "--run-record", "evil.json", "-p", "no:cacheprovider")
        _RUNS["evil"] = read_record(evalproject, "evil.json")
    rec = json.loads(json.dumps(_RUNS["evil"]))
    assert rec["agent"].startswith(XSS)
    scored = next(c for c in rec["cases"] if c["score"] is not None)
    scored["case_id"] = XSS
    rec["options"]["note"] = "</script><!--"
    scored["score"]["reason"] = '"><img src=x onerror="document.title=1">'
    return rec


def test_markup_in_the_record_is_escaped_in_the_file(evil):
    text = html_report.render(evil)
    assert XSS not in text and "<img src=x" not in text and "</script><!--" not in text
    dom = parse(text)
    assert len(dom.all("script")) == 2 and dom.all("img") == []
    assert field(dom, "agent") == evil["agent"]  # the server-side parts: escaped, and read back as the text
    data = json.loads(dom.all("script")[0].text())  # the inlined cases: intact after the escaping
    assert [c["id"] for c in data["cases"]] == [c["case_id"] for c in evil["cases"]]
    assert [c["raw_output"] for c in data["cases"]] == [c["raw_output"] for c in evil["cases"]]


@needs_chromium
def test_agent_output_renders_as_text_not_markup(evil, tmp_path):
    rec = evil
    page = tmp_path / "evil.html"
    html_report.write(rec, page)
    dom = browse(page, urlencode([("open", key(c)) for c in rec["cases"]]))
    assert dom.one("title").text().startswith("groundeval") and "pwned" not in dom.one("title").text()
    assert len(dom.all("script")) == 2 and dom.all("img") == []
    assert field(dom, "agent") == rec["agent"]
    row = case_rows(dom)[[c["case_id"] for c in rec["cases"]].index(XSS)]
    assert row.attrs["data-case-id"] == XSS and row.all("td")[0].text() == XSS
    raw = [pre.text() for pre in dom.all("pre", class_="raw-output")]
    assert sorted(raw) == sorted(c["raw_output"] for c in rec["cases"] if c["raw_output"])
    assert any(XSS in r for r in raw)
    names = [td.text() for td in dom.all("td") if td.text().startswith("<img src=x")]
    assert names  # the displays the agent answered, shown as the text they are


def label(c: dict) -> str:
    """A case's outcome as the page writes it: an error with its kind."""
    return f"{c['outcome']} ({c['error']['kind']})" if c["error"] else c["outcome"]


def reason(c: dict) -> str:
    return c["error"]["message"] if c["error"] else c["score"]["reason"] if c["score"] else c["skip_reason"] or ""


@needs_chromium
def test_two_runs_compared(evalproject, tmp_path):
    new = _extraction(evalproject)
    evalproject.runpytest("test_evals.py", "--agent", "agents_under_test:Correct", "--data-dir", "data",
                          "--run-record", "base.json", "-p", "no:cacheprovider")
    base_rec, new_rec = read_record(evalproject, "base.json"), new["record"]
    page = tmp_path / "diff.html"
    assert _report(str(evalproject.path / "base.json"), str(new["path"] / "record.json"), "-o", str(page)) == 0
    dom = browse(page)
    check_metrics(dom, new_rec)
    before = {key(c): c for c in base_rec["cases"]}
    flips = {key(c): (before[key(c)], c) for c in new_rec["cases"] if before[key(c)]["outcome"] != c["outcome"]}
    assert len(flips) == 3 and any(c["outcome"] == "error" for _, c in flips.values())
    # each flipped case: its outcome in both runs (an error with its kind, not "failed") and its reason in both
    rows = {r.attrs["data-flip"]: r for r in dom.all("tr", data_flip=True)}
    assert {k: [td.text() for td in r.all("td")[2:4]] for k, r in rows.items()} == {
        k: [label(b), label(n)] for k, (b, n) in flips.items()}
    assert {k: (r.one("td", data_side="base").text(), r.one("td", data_side="new").text()) for k, r in rows.items()} \
        == {k: (reason(b), reason(n)) for k, (b, n) in flips.items()}
    assert all(reason(n) for _, n in flips.values())
    assert dom.one(data_flips="regression").text() == "3"
    # the p-values are groundeval compare's own, for every metric it tests, and each flip names its task's pass test
    from pytest_groundeval.reporting import compare as compare_mod

    cmp = compare_mod.compare_paths(evalproject.path / "base.json", new["path"] / "record.json")
    (task,) = cmp.tasks
    for m in task.metrics:
        row = dom.one("tr", data_paired=f"extraction.{m.metric}")
        assert row.one(data_side="p").text() == compare_mod._fmt_p(m.p_value, cmp.n_resamples, m.test), m.metric
        assert row.one(data_side="test").text() == (m.test or "–")
        assert row.one(data_side="delta_ci95").text() == fmt_ci(m.ci95)
    pass_test = next(m for m in task.metrics if m.metric == "pass")
    assert (pass_test.test, pass_test.discordant, pass_test.p_value) == ("mcnemar", {"b": 3, "c": 0}, 0.25)
    assert {r.one("td", data_side="p").text() for r in rows.values()} == {"0.25 (mcnemar)"}
    assert dom.one("tr", data_strip_task="extraction").one(data_count="extraction.changed").text() == "3"
    for k in ("micro_f1", "n_passed", "macro_f1"):
        row = dom.one("tr", data_compare=f"extraction.{k}")
        b, n = base_rec["summary"]["extraction"][k], new_rec["summary"]["extraction"][k]
        assert (row.one(data_side="base").text(), row.one(data_side="new").text()) == (fmt(b), fmt(n))
        assert row.one(data_side="delta").text() == (f"{n - b:+d}" if isinstance(n, int) else f"{n - b:+.3f}")
    assert [r.all("td")[3].text() for r in case_rows(dom)] == [label(before[key(c)]) for c in new_rec["cases"]]
    dom = browse(page, urlencode({"change": "changed"}))
    assert visible(dom) == [k for k in (key(c) for c in new_rec["cases"]) if k in flips]


@needs_chromium
def test_errors_are_shown_as_errors_with_their_kind(extraction):
    rec = extraction["record"]
    errored = [c for c in rec["cases"] if c["outcome"] == "error"]
    assert [c["error"]["kind"] for c in errored] == ["agent"]
    dom = browse(extraction["html"])
    strip = dom.one("tr", data_strip_task="extraction")
    assert strip.one(data_count="extraction.error:agent").text() == "1"  # counted as an agent error ...
    assert strip.one(data_count="extraction.failed").text() == str(sum(c["outcome"] == "failed" for c in rec["cases"]))
    assert strip.all(data_count="extraction.error") == []  # ... and not once more without its kind
    options = {o.attrs["value"]: o.text() for o in dom.one("select", id="outcome").all("option")}
    assert options["error:agent"] == "error: agent (1)" and options["failed"] == "failed (2)"
    row = dom.one("tr", data_key=key(errored[0]))
    assert row.attrs["data-outcome"] == "error" and row.attrs["data-error-kind"] == "agent"
    assert row.all("td")[2].text() == "error (agent)" and "error" in row.all("td")[2].attrs["class"].split()
    dom = browse(extraction["html"], urlencode({"outcome": "error:agent"}))
    assert visible(dom) == [key(errored[0])] and dom.one(id="shown").attrs["data-shown"] == "1"
    dom = browse(extraction["html"], urlencode({"outcome": "failed"}))
    assert visible(dom) == [key(c) for c in rec["cases"] if c["outcome"] == "failed"]  # the error is not a failure


# ---------------------------------------------------------------- measured in a real viewport (DevTools over a pipe)
def _chromium_module():
    spec = importlib.util.spec_from_file_location("_chromium", ROOT / "scripts" / "_chromium.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def chromium():
    module = _chromium_module()
    with module.Chromium(CHROMIUM) as browser:
        yield browser
        assert browser.console_messages() == []


VIEWPORT = (1280, 900)

# where the table is, where a row is (None: not rendered), and what the box holds
GEOMETRY = """(function (key) {
  var t = document.getElementById("case-table").getBoundingClientRect();
  var box = document.getElementById("case-scroll").getBoundingClientRect();
  var row = null, open = false, detail = false;
  document.querySelectorAll("#case-table tr.case").forEach(function (tr) {
    if (tr.getAttribute("data-key") === key) {
      var r = tr.getBoundingClientRect();
      row = {top: r.top, bottom: r.bottom}; open = tr.classList.contains("open");
      var d = tr.nextElementSibling;
      detail = !!d && d.classList.contains("detail") && d.getAttribute("data-for") === key;
    }
  });
  return {head_bottom: document.querySelector("#case-table thead").getBoundingClientRect().bottom,
          table_top: t.top, first_row_top: (document.querySelector("#case-table tr.case") || t)
            .getBoundingClientRect().top, box: {top: box.top, bottom: box.bottom}, row: row, open: open,
          detail: detail, rendered: document.querySelectorAll("#case-table tr.case").length,
          shown: document.getElementById("shown").getAttribute("data-shown"),
          errors: document.getElementById("errors").textContent, height: innerHeight};
})(%s)"""


def geometry(page, case_key: str = "") -> dict:
    return page.evaluate(GEOMETRY % json.dumps(case_key))


def in_view(g: dict) -> bool:
    """The row is drawn inside the window and inside the table's scroll box, below its sticky header."""
    r = g["row"]
    return r is not None and 0 <= r["top"] and r["bottom"] <= g["height"] and \
        g["head_bottom"] - 0.5 <= r["top"] and r["bottom"] <= g["box"]["bottom"]


@needs_chromium
def test_the_case_table_is_in_the_first_viewport(chromium, suites, extraction, evalproject, tmp_path):
    _extraction(evalproject)
    evalproject.runpytest("test_evals.py", "--agent", "agents_under_test:Correct", "--data-dir", "data",
                          "--run-record", "base.json", "-p", "no:cacheprovider")
    diff = tmp_path / "diff.html"
    html_report.write(extraction["record"], diff, read_record(evalproject, "base.json"))
    for page_path in (suites["html"], extraction["html"], diff):
        page = chromium.open(page_path, width=VIEWPORT[0], height=VIEWPORT[1])
        g = geometry(page)
        assert g["errors"] == ""
        # the table, its header and its first row are on screen without scrolling
        assert 0 < g["table_top"] and g["first_row_top"] + 30 < VIEWPORT[1], (page_path.name, g)
        if page_path == extraction["html"]:  # a count in the strip filters the table to its cases
            page.evaluate('document.querySelector(\'#overview button[data-outcome="error:agent"]\').click()')
            assert rendered_keys(page) == [key(c) for c in extraction["record"]["cases"] if c["outcome"] == "error"]
            assert page.evaluate("location.hash") == "#" + urlencode({"outcome": "error:agent", "task": "extraction"})
        page.close()


def big_record(record: dict, n: int) -> dict:
    """``record`` with ``n`` cases: copies of its cases, each with its own id (``<id>-00042``)."""
    rec = json.loads(json.dumps(record))
    cases = rec["cases"]
    rec["cases"] = [dict(cases[i % len(cases)], case_id=f"{cases[i % len(cases)]['case_id']}-{i:05d}")
                    for i in range(n)]
    return rec


@pytest.fixture
def big_page(extraction, tmp_path_factory):
    if "big" not in _RUNS:  # made once per session, like the records
        rec = big_record(extraction["record"], 3000)
        page = tmp_path_factory.mktemp("big") / "big.html"
        html_report.write(rec, page)
        _RUNS["big"] = (rec, page)
    return _RUNS["big"]


@needs_chromium
def test_case_link_scrolls_to_and_opens_the_case(chromium, big_page, suites):
    rec, path = big_page
    far = rec["cases"][2731]
    for name in ("case", "open"):  # #open= is the older name of #case=
        page = chromium.open(path, urlencode({name: key(far)}), width=VIEWPORT[0], height=VIEWPORT[1])
        g = geometry(page, key(far))
        assert g["open"] and g["detail"] and in_view(g), (name, g)
        assert g["rendered"] < 200 and g["shown"] == "3000"  # virtualised: a window of the rows is in the DOM
        # a link followed on the open page (hashchange) goes there too
        near = rec["cases"][5]
        page.evaluate(f"location.hash = {json.dumps(urlencode({'case': key(near)}))}")
        page.wait_for(f"({GEOMETRY % json.dumps(key(near))}).open")
        g = geometry(page, key(near))
        assert in_view(g) and g["detail"] and not geometry(page, key(far))["open"]
        page.close()
    # a small page (the committed suites' record): the last case, opened, is on screen
    last = suites["record"]["cases"][-1]
    page = chromium.open(suites["html"], urlencode({"case": key(last)}), width=VIEWPORT[0], height=VIEWPORT[1])
    g = geometry(page, key(last))
    page.close()
    assert g["open"] and g["detail"] and in_view(g), g


SEARCH = """(function (value) {
  var q = document.getElementById("q");
  q.value = value;
  q.dispatchEvent(new Event("input", {bubbles: true}));
})(%s)"""


def rendered_keys(page) -> list[str]:
    return page.evaluate('Array.prototype.map.call(document.querySelectorAll("#case-table tr.case"), '
                         'function (tr) { return tr.getAttribute("data-key"); })')


@needs_chromium
def test_the_virtualised_table_finds_filters_and_opens_any_row(chromium, big_page):
    rec, path = big_page
    keys = [key(c) for c in rec["cases"]]
    page = chromium.open(path, width=VIEWPORT[0], height=VIEWPORT[1])
    first = rendered_keys(page)
    assert 10 < len(first) < 200 and first == keys[:len(first)]  # the top of the table, in the record's order
    # search (debounced: wait for the counter) finds a row far down; clearing brings every row back
    far = rec["cases"][2950]
    page.evaluate(SEARCH % json.dumps(far["case_id"][-12:].upper()))
    page.wait_for('document.getElementById("shown").getAttribute("data-shown") === "1"')
    assert rendered_keys(page) == [key(far)]
    page.evaluate(SEARCH % json.dumps(""))
    page.wait_for('document.getElementById("shown").getAttribute("data-shown") === "3000"')
    assert rendered_keys(page) == first
    # a filter: every errored case, wherever it is; the box scrolled to its end shows the last of them
    page.evaluate('var o = document.getElementById("outcome"); o.value = "error:agent";'
                  'o.dispatchEvent(new Event("change"));')
    errored = [key(c) for c in rec["cases"] if c["outcome"] == "error"]
    assert page.evaluate('document.getElementById("shown").getAttribute("data-shown")') == str(len(errored)) == "750"
    shown = rendered_keys(page)
    assert shown == errored[:len(shown)] and len(shown) < 200
    page.evaluate('var b = document.getElementById("case-scroll"); b.scrollTop = b.scrollHeight;')
    page.wait_for(f"({GEOMETRY % json.dumps(errored[-1])}).row !== null")
    assert rendered_keys(page)[-1] == errored[-1]
    # a click on that far row opens it where it is
    page.evaluate(f'document.querySelector(\'#case-table tr.case[data-key="{errored[-1]}"]\').click()')
    g = geometry(page, errored[-1])
    assert g["open"] and g["detail"]
    err = page.evaluate(f'document.querySelector(\'tr.detail[data-for="{errored[-1]}"] pre.error-message\')'
                        '.textContent')
    assert err == f"{rec['cases'][keys.index(errored[-1])]['error']['error_class']}: " \
                  f"{rec['cases'][keys.index(errored[-1])]['error']['message']}"
    assert "case=" in page.evaluate("location.hash")  # the opened row is in the URL, to be linked
    page.close()


@needs_chromium
def test_what_the_pages_policy_blocks_is_reported_on_the_page(chromium, extraction):
    """The script sizes the table's rows through the CSSOM, which the policy allows; an inline
    style attribute it would block lands in ``#errors``, which every page test reads."""
    page = chromium.open(extraction["html"], width=VIEWPORT[0], height=VIEWPORT[1])
    assert page.evaluate('document.getElementById("errors").textContent') == ""
    page.evaluate('document.body.appendChild(document.createElement("div")).setAttribute("style", "color:red")')
    errors = page.wait_for('document.getElementById("errors").textContent')
    page.close()
    assert errors.startswith("blocked by the page's policy: style-src-attr")
    chromium.events.clear()  # the browser logged the violation too: expected here
