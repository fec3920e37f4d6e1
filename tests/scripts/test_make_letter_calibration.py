"""scripts/make_letter_calibration.py rebuilds the committed calibration set byte for byte, every
letter's labels follow from its planted defect, and the checkable items agree with the plants
(a stopped drug under "keep taking" and an invented drug fail them; jargon's "Cont." and "D/C"
are no instruction the stance check reads; the other defects are for the judges only)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "fixtures" / "letter_calibration" / "letters.json"


def _script():
    spec = importlib.util.spec_from_file_location("make_letter_calibration",
                                                  REPO / "scripts" / "make_letter_calibration.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_letter_calibration"] = module
    spec.loader.exec_module(module)
    return module


def test_rebuilds_the_committed_set_byte_for_byte(tmp_path):
    out = tmp_path / "letters.json"
    assert _script().main(["--cases", str(REPO / "fixtures" / "reconciliation"), "--out", str(out)]) == 0
    assert out.read_bytes() == COMMITTED.read_bytes()


def test_labels_follow_the_defects_and_the_checks_agree():
    from pytest_groundeval.tasks.letter import LetterTask

    script = _script()
    task = LetterTask(REPO / "fixtures" / "reconciliation")
    cases = {r.case_id: r for r in task.discover()}
    for letter in json.loads(COMMITTED.read_text()):
        assert letter["labels"] == {**script.CLEAN, **script.CHANGES.get(letter["defect"], {})}
        case = task.load(cases[letter["case_id"]])
        from pytest_groundeval.scorers.letter import score_letter

        score = score_letter(letter["text"], case.truth)
        failed = {k for k, d in score.dimensions.items() if not d.passed}
        if letter["defect"] in ("stopped_continued", "invented_drug"):
            assert failed & {"no_contradiction", "stance", "named", "no_invented_drug"}, letter["id"]
        elif letter["defect"] == "jargon":  # "Cont.", "D/C" are no instruction a patient can read
            assert failed <= {"stance"}, (letter["id"], failed)
        else:
            assert not failed, (letter["id"], score.reason)
