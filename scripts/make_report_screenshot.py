"""The README's screenshot of the HTML report, made from a real run in headless Chromium.

Runs the bundled suites with the offline baseline agent (``pytest evals``, the README's own
command, into a temporary folder), opens the run's HTML report in headless Chromium (the same
DevTools-over-a-pipe driver the report's browser tests use, ``scripts/_chromium.py``) at
1280 x 900 with one failed write case opened, and writes the PNG::

    uv run python scripts/make_report_screenshot.py            # -> docs/assets/html-report.png
    uv run python scripts/make_report_screenshot.py --out x.png -m write

Needs ``chromium`` on PATH (``.ci/run`` installs it); exits 2 without it.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _chromium import CHROMIUM, Chromium  # noqa: E402


def run_suites(folder: Path, marker: str) -> tuple[Path, dict]:
    """A real run of the bundled suites with the baseline: its record and HTML report."""
    record, html = folder / "run.json", folder / "report.html"
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "evals"), "-q", "-p", "no:cacheprovider", "-m", marker,
           "--run-record", str(record), "--groundeval-html", str(html)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1) or not html.is_file():
        raise SystemExit(f"the run failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return html, json.loads(record.read_text(encoding="utf-8"))


def first_failed(record: dict, task: str) -> str | None:
    failed = sorted(c["case_id"] for c in record["cases"] if c["task"] == task and c["outcome"] == "failed")
    return failed[0] if failed else None


def screenshot(html: Path, fragment: str, out: Path, width: int = 1280, height: int = 900) -> None:
    with Chromium() as browser:
        page = browser.open(html, fragment, width=width, height=height)
        page.evaluate("window.scrollTo(0, 0)")  # the summary strip above the opened case
        page.wait_for("window.scrollY === 0")
        shot = page.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(shot["data"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "html-report.png")
    ap.add_argument("-m", dest="marker", default="extraction or write or reconciliation or letter",
                    help="which suites to run (a pytest -m expression; default: the four that need no FHIR server)")
    args = ap.parse_args(argv)
    if not CHROMIUM:
        print("no chromium on PATH: install it (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        html, record = run_suites(Path(tmp), args.marker)
        case = first_failed(record, "write")
        screenshot(html, f"outcome=failed&case=write:{case}" if case else "", args.out)
    print(f"{args.out}: the report of run {record['run_id']} ({len(record['cases'])} cases)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
