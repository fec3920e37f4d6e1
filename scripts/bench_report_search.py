"""The HTML report's case search at scale, measured in the page: a 5,000-case report opened in
headless Chromium, a case id typed into the search box one character at a time, then the box
cleared; for each keystroke the time from the input event to the first frame painted after the
table changed (the page's debounce included), taken with ``performance.now()`` in the page.

    uv run python scripts/bench_report_search.py [--cases 5000] [--record RUN.json] [--before REV]

RUN.json: any run record (default: the committed write, reconciliation and extraction suites
run with the offline baseline, made here in a temp folder). Its cases are copied, each under
its own id, up to ``--cases``. ``--before REV``: the same record rendered by the report of git
revision REV too (its ``pytest_groundeval/reporting/html.py``; default: the commit before the
virtualised table, 5039cc4), and the two printed side by side with the ratio. Nothing here
asserts on time (the machine is shared): it prints the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _chromium import Chromium  # noqa: E402

BEFORE = "5039cc4"  # the report before the case table was virtualised and the search debounced

# One keystroke, in the page: set the box's value, fire its input event, then wait for the
# table (or its counter) to change and for the next frame to be painted (a rAF, then a task
# queued from it runs after that frame). Returns [ms to the table's change, ms to the painted
# frame]: the first is the debounce plus the script's work, the rest is layout and paint.
KEYSTROKE = """(function (value) {
  return new Promise(function (resolve) {
    var q = document.getElementById("q");
    var watched = [document.getElementById("case-table"), document.getElementById("shown")];
    var t0 = performance.now();
    var seen = false;
    var mo = new MutationObserver(function () {
      if (seen) { return; }
      seen = true;
      mo.disconnect();
      var changed = performance.now() - t0;
      requestAnimationFrame(function () {
        setTimeout(function () { resolve([changed, performance.now() - t0]); }, 0);
      });
    });
    watched.forEach(function (n) {
      mo.observe(n, {subtree: true, childList: true, attributes: true, characterData: true});
    });
    q.value = value;
    q.dispatchEvent(new Event("input", {bubbles: true}));
  });
})(%s)"""


def make_record(path: Path) -> None:
    """The committed suites run with the offline baseline (no network, no key)."""
    cmd = [sys.executable, "-m", "pytest", "evals/test_write.py", "evals/test_reconciliation.py",
           "evals/test_extraction.py", "-q", "-n", "0", "-p", "no:cacheprovider", "--run-record", str(path)]
    subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    if not path.is_file():
        raise SystemExit(f"bench_report_search: {' '.join(cmd)} wrote no record")


def inflate(record: dict, n: int) -> dict:
    cases = record["cases"]
    out = dict(record)
    out["cases"] = [dict(cases[i % len(cases)], case_id=f"{cases[i % len(cases)]['case_id']}-{i:05d}")
                    for i in range(n)]
    return out


def html_module(rev: str | None):
    """The report module of the working tree (None) or of git revision ``rev``."""
    if rev is None:
        from pytest_groundeval.reporting import html
        return html
    source = subprocess.run(["git", "show", f"{rev}:pytest_groundeval/reporting/html.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="bench-report-"))
    (folder / f"html_{rev}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(f"html_{rev}", folder / f"html_{rev}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(browser: Chromium, page_path: Path, needle: str, rounds: int) -> dict:
    t = time.perf_counter()
    page = browser.open(page_path, width=1280, height=900)
    opened = time.perf_counter() - t
    loaded_ms = page.evaluate("performance.now()")  # since the navigation began (the page is ready by now)
    typed: list[list[float]] = []
    cleared: list[list[float]] = []
    for _ in range(rounds):
        for k in range(1, len(needle) + 1):
            typed.append(page.evaluate(KEYSTROKE % json.dumps(needle[:k]), await_promise=True))
        shown = page.evaluate('document.getElementById("shown").getAttribute("data-shown")')
        cleared.append(page.evaluate(KEYSTROKE % json.dumps(""), await_promise=True))
    total = page.evaluate('document.getElementById("shown").getAttribute("data-total")')
    in_dom = page.evaluate('document.querySelectorAll("#case-table tr.case").length')
    page.close()
    return {"typed": typed, "cleared": cleared, "shown": shown, "total": total, "rows_in_dom": in_dom,
            "ready_s": opened, "loaded_ms": loaded_ms}


def painted(times: list[list[float]]) -> list[float]:
    return [t[1] for t in times]


def line(label: str, r: dict) -> str:
    typed, cleared = painted(r["typed"]), painted(r["cleared"])
    return (f"{label:<7} type: median {statistics.median(typed):6.1f} ms (table changed at "
            f"{statistics.median(t[0] for t in r['typed']):5.1f}) max {max(typed):6.1f} ms | "
            f"clear: median {statistics.median(cleared):6.1f} ms (changed at "
            f"{statistics.median(t[0] for t in r['cleared']):5.1f}) max {max(cleared):6.1f} ms | "
            f"open {r['ready_s']:5.2f} s, rows in DOM {r['rows_in_dom']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--record", type=Path, help="a run record to copy cases from (default: make one)")
    ap.add_argument("--before", default=BEFORE, help="git revision of the report to compare with ('' for none)")
    ap.add_argument("--rounds", type=int, default=3, help="times the id is typed and cleared")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        tmp_path = Path(tmp)
        source = args.record
        if source is None:
            source = tmp_path / "suites.json"
            make_record(source)
        record = inflate(json.loads(source.read_text(encoding="utf-8")), args.cases)
        needle = record["cases"][args.cases * 9 // 10]["case_id"][-14:]  # a case far down the table
        revs = [("before", args.before)] if args.before else []
        revs.append(("after", None))
        results = {}
        with Chromium() as browser:
            for label, rev in revs:
                page = tmp_path / f"{label}.html"
                module = html_module(rev)
                t = time.perf_counter()
                module.write(record, page)
                render_s = time.perf_counter() - t
                r = measure(browser, page, needle, args.rounds)
                r["render_s"], r["size_mib"] = render_s, page.stat().st_size / 2 ** 20
                results[label] = r
        print(f"{args.cases} cases ({results['after']['size_mib']:.1f} MiB page), typing {needle!r} "
              f"({len(needle)} keystrokes, {args.rounds} rounds) then clearing; in-page time from the input "
              "event to the next painted frame after the table changed (debounce included); load average "
              + " ".join(f"{x:.1f}" for x in os.getloadavg()))
        for label, r in results.items():
            print(line(label, r) + f"   matched {r['shown']} of {r['total']}")
        if "before" in results:
            b, a = results["before"], results["after"]
            ratio = [statistics.median(painted(a[k])) / statistics.median(painted(b[k])) for k in ("typed", "cleared")]
            print(f"ratio after/before: type median {ratio[0]:.2f}, clear median {ratio[1]:.2f}, "
                  f"open {a['ready_s'] / b['ready_s']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
