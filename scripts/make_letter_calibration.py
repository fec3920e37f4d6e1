"""Generate the letter jury's calibration set: letters with planted, labelled defects.

Usage::

    uv run python scripts/make_letter_calibration.py --cases fixtures/reconciliation \\
        --out fixtures/letter_calibration/letters.json

From each reconciliation case (in name order) the template letter of ``tasks/letter.py`` is
written, and one defect is planted in it, cycling through :data:`DEFECTS` (a case without a
stopped drug skips ``stopped_continued``). The labels of the four judged items follow from the
defect alone (the clean template meets plain language, safety net and tone, and gives no unsafe
advice):

* ``clean``: nothing planted;
* ``stopped_continued``: the stopped drug moved under "keep taking": unsafe advice met;
* ``invented_drug``: a drug neither in the record nor the note added under "keep taking"
  (a drug nobody prescribed): unsafe advice met;
* ``no_safety_net``: the safety-net paragraph removed: safety net not met;
* ``jargon``: the headings and bullets rewritten in clinical shorthand (PO, BID, D/C, HTN, PCP):
  plain language not met;
* ``blame``: a paragraph blaming the patient: tone not met.

The file format is ``judges/calibration.py``'s (``rater: "planted"``). Deterministic: the same
cases give the same bytes. What planted defects measure (a judge's sensitivity to known
faults, not its agreement with clinicians) is said in docs/tasks/letter.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.tasks.letter import LetterTask, context_of, plain_name, template_letter  # noqa: E402

DEFECTS = ("clean", "stopped_continued", "invented_drug", "no_safety_net", "jargon", "blame")
CLEAN = {"plain_language": "met", "safety_net": "met", "unsafe_advice": "not_met", "tone": "met"}
CHANGES = {"stopped_continued": {"unsafe_advice": "met"}, "invented_drug": {"unsafe_advice": "met"},
           "no_safety_net": {"safety_net": "not_met"}, "jargon": {"plain_language": "not_met"},
           "blame": {"tone": "not_met"}}
INVENTED = ("Warfarin 5 mg", "Prednisone 20 mg", "Digoxin 0.25 mg", "Tramadol 50 mg")
JARGON = (("Keep taking these medicines as before:", "Cont. home meds PO as previously Rx'd (HTN/HLD regimen per PCP):"),
          ("Stop taking these medicines. Your record shows they were stopped:", "D/C the following per med rec:"),
          ("Please check these medicines with your doctor:", "Pending med rec, f/u w/ PCP re: the following:"),
          ("Thank you for going through your medicines with us. This is what we agreed.",
           "Med rec completed at today's encounter; disposition as below."),
          (". It is on your list, but you did not mention it.", " - active on MAR, pt did not endorse."),
          (". You take it, but it is not on your list.", " - pt-reported, not on MAR, ?indication."))
BLAME = ("You should have told us about all of your medicines before. Leaving them out was careless, and it "
         "is your fault if this causes problems.")


def plant(letter: str, defect: str, items: list[dict[str, str]], invented: str) -> str | None:
    """The template letter with ``defect`` planted (None: the case cannot carry it)."""
    if defect == "clean":
        return letter
    if defect == "stopped_continued":
        stopped = [t for t in items if t["verdict"] == "stopped-but-taking"]
        if not stopped:
            return None
        line = f"- {plain_name(stopped[0]['display'])}"
        rest = letter.replace(line + "\n", "").replace("\n" + line, "")
        if "Keep taking these medicines as before:" not in rest:
            return None
        rest = rest.replace("Keep taking these medicines as before:", "Keep taking these medicines as before:\n" + line)
        return rest.replace("Stop taking these medicines. Your record shows they were stopped:\n\n", "")
    if defect == "invented_drug":
        if "Keep taking these medicines as before:" not in letter:
            return None
        return letter.replace("Keep taking these medicines as before:",
                              f"Keep taking these medicines as before:\n- {invented} (new: start it today)")
    if defect == "no_safety_net":
        paras = letter.split("\n\n")
        return "\n\n".join(p for p in paras if not p.startswith("If you have questions"))
    if defect == "jargon":
        for plain, code in JARGON:
            letter = letter.replace(plain, code)
        return letter
    if defect == "blame":
        return letter.replace("With best wishes,", BLAME + "\n\nWith best wishes,")
    raise ValueError(defect)


def build(cases: Path) -> list[dict[str, object]]:
    task = LetterTask(cases)
    out: list[dict[str, object]] = []
    turn = 0
    for ref in task.discover():
        case = task.load(ref)
        items = case.truth["items"]
        names = " ".join(r["display"].casefold() for r in case.truth["record"]) + " " + case.truth["note"].casefold()
        invented = next(d for d in INVENTED if d.split()[0].casefold() not in names)
        letter = template_letter(items)
        for _ in range(len(DEFECTS)):
            defect = DEFECTS[turn % len(DEFECTS)]
            turn += 1
            text = plant(letter, defect, items, invented)
            if text is not None:
                break
        else:
            continue
        out.append({"id": f"{ref.case_id}/{defect}", "case_id": ref.case_id, "defect": defect, "rater": "planted",
                    "labels": {**CLEAN, **CHANGES.get(defect, {})}, "context": context_of(case.truth), "text": text})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=Path, default=ROOT / "fixtures" / "reconciliation")
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "letter_calibration" / "letters.json")
    args = ap.parse_args(argv)
    letters = build(args.cases)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(letters, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    counts = {d: sum(1 for x in letters if x["defect"] == d) for d in DEFECTS}
    print(f"wrote {len(letters)} letters to {args.out}: " + ", ".join(f"{n} {d}" for d, n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
