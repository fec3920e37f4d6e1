"""scripts/make_report_screenshot.py: the README's screenshot is a 1280 x 900 PNG, and the case the
script opens in it is the task's first failed case by id."""

from __future__ import annotations

import importlib
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHOT = REPO / "docs" / "assets" / "html-report.png"


def _script():
    if str(REPO / "scripts") not in sys.path:
        sys.path.insert(0, str(REPO / "scripts"))
    return importlib.import_module("make_report_screenshot")


def test_the_committed_screenshot_is_the_window_the_script_captures():
    data = SHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (1280, 900)
    assert "docs/assets/html-report.png" in (REPO / "README.md").read_text(encoding="utf-8")


def test_it_opens_the_first_failed_case_of_the_task():
    record = {"cases": [{"task": "write", "case_id": "b", "outcome": "failed"},
                        {"task": "write", "case_id": "a", "outcome": "passed"},
                        {"task": "extraction", "case_id": "0", "outcome": "failed"},
                        {"task": "write", "case_id": "c", "outcome": "failed"}]}
    assert _script().first_failed(record, "write") == "b"
    assert _script().first_failed({"cases": []}, "write") is None
