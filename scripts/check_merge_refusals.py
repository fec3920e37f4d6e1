"""Break each of ``groundeval merge``'s refusals in turn and check that its row of
``tests/store/test_shard_merge.py`` fails (a refusal table that still passes with a refusal gone
does not test it). Edits the source in place, one refusal at a time, and restores it.

    uv run python scripts/check_merge_refusals.py [NAME ...]

Prints one line per refusal: ``caught`` (its row failed, as it must) or ``MISSED``; exit 1
when any is missed. Slow (each row builds the shard fixture: four pytest runs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MERGE = ROOT / "pytest_groundeval" / "store" / "merge.py"
FILES = ROOT / "pytest_groundeval" / "store" / "files.py"
REFUSES = "test_merge_refuses_shards_that_are_not_one_run"
OTHERS = "test_merge_refuses_a_missing_or_duplicated_shard_a_journal_and_a_whole_run"

# name: (file, the text to change, what it becomes, the test (row) that must then fail)
BREAKS = {
    "requested": (MERGE, '_differ("the agent and model asked for', 'None and _differ("the agent and model asked for',
                  f"{REFUSES}[another agent]"),
    "agent answered": (MERGE, '_differ("the agent that answered"', 'None and _differ("the agent that answered"',
                       f"{REFUSES}[another answering agent]"),
    "model answered": (MERGE, '_differ("the model that answered"', 'None and _differ("the model that answered"',
                       f"{REFUSES}[another model]"),
    "commit": (MERGE, '_differ("commit (git_sha)"', 'None and _differ("commit (git_sha)"', f"{REFUSES}[another commit]"),
    "package versions": (MERGE, '_differ("package versions"', 'None and _differ("package versions"',
                         f"{REFUSES}[another package version]"),
    "price table": (MERGE, '_differ("price table"', 'None and _differ("price table"', f"{REFUSES}[another price table]"),
    "shard count": (MERGE, '_differ("shard count N"', 'None and _differ("shard count N"',
                    f"{REFUSES}[another shard count]"),
    "case set": (MERGE, '_differ("case set', 'None and _differ("case set', f"{REFUSES}[another case set]"),
    "deselected": (MERGE, '_differ("eval items deselected', 'None and _differ("eval items deselected',
                   f"{REFUSES}[other items deselected]"),
    "options": (MERGE, 'problems += _differing_keys("option"', 'problems += [] and _differing_keys("option"',
                f"{REFUSES}[other options]"),
    "thresholds option": (MERGE, 'problems += _differing_keys("option"', 'problems += [] and _differing_keys("option"',
                          f"{REFUSES}[other thresholds]"),
    "selection": (MERGE, 'problems += _differing_keys("selection"', 'problems += [] and _differing_keys("selection"',
                  f"{REFUSES}[another selection]"),
    "older format": (FILES, '    raise StoreError(f"{path}: {what} written by another',
                     '    return None; raise StoreError(f"{path}: {what} written by another',
                     f"{REFUSES}[another record format]"),
    "newer format": (FILES, '        raise StoreError(f"{path}: {what} written by a newer',
                     '        return None; raise StoreError(f"{path}: {what} written by a newer',
                     f"{REFUSES}[a newer record format]"),
    "foreign": (FILES, '        raise StoreError(f"{path} is not a groundeval run record or journal (no record',
                '        return None; raise StoreError(f"{path} is not a groundeval run record or journal (no record',
                f"{REFUSES}[not a groundeval file]"),
    "invalid": (FILES, 'raise _invalid(path, "the record", e) from None', 'return None',
                f"{REFUSES}[not a valid record]"),
    "not JSON": (FILES, '        raise StoreError(f"{path} is not a JSON run record',
                 '        return None; raise StoreError(f"{path} is not a JSON run record', f"{REFUSES}[not JSON]"),
    "overlap": (MERGE, 'problems.append(f"case {c.task}:{c.case_id}{again} is in',
                'None and problems.append(f"case {c.task}:{c.case_id}{again} is in', f"{REFUSES}[overlapping shards]"),
    "other content": (MERGE, 'problems.append(f"case {c.task}:{c.case_id}{again} is in',
                      'None and problems.append(f"case {c.task}:{c.case_id}{again} is in',
                      f"{REFUSES}[the same case with other content]"),
    "wrong shard": (MERGE, 'problems.append(f"{p} (shard {index}/{count}) holds case',
                    'None and problems.append(f"{p} (shard {index}/{count}) holds case',
                    f"{REFUSES}[a case in the wrong shard]"),
    "counts": (MERGE, "problems.append(f\"the shards' selected cases add up to",
               "None and problems.append(f\"the shards' selected cases add up to",
               f"{REFUSES}[selected cases that do not add up]"),
    "selection digest": (MERGE, "_refuse([f\"their cases (", "None and _refuse([f\"their cases (",
                         f"{REFUSES}[cases that are not the selection]"),
    "task not installed": (MERGE, 'raise MergeError(f"task {name!r} of the shards',
                           'continue; raise MergeError(f"task {name!r} of the shards', f"{REFUSES}[a task not installed]"),
    "bad threshold": (MERGE, 'raise MergeError(f"{where}: {e}") from None', 'parsed = []',
                      f"{REFUSES}[a recorded threshold of no task]"),
    "journal": (MERGE, '        raise MergeError(f"{path}: a journal, not a run record',
                '        return record; raise MergeError(f"{path}: a journal, not a run record', OTHERS),
    "not a shard": (MERGE, '        raise MergeError(f"{path}: not a shard record',
                    '        return record; raise MergeError(f"{path}: not a shard record', OTHERS),
    "path twice": (MERGE, 'raise MergeError(f"{path} is given twice")', 'pass', OTHERS),
    "shard twice": (MERGE, 'problems = [f"shard {k}/{count} is given twice', 'problems = [] and [f"shard {k}/{count} is given twice',
                    OTHERS),
    "shard missing": (MERGE, '        problems.append(f"shard(s) {', '        None and problems.append(f"shard(s) {', OTHERS),
}


def main(names: list[str]) -> int:
    missed = []
    for name in names or list(BREAKS):
        path, old, new, test = BREAKS[name]
        source = path.read_text()
        if source.count(old) != 1:
            print(f"{name}: the text to break is not in {path.name} exactly once: fix this script")
            return 2
        path.write_text(source.replace(old, new))
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", f"tests/store/test_shard_merge.py::{test}", "-q",
                                   "-p", "no:randomly", "-x"], cwd=ROOT, capture_output=True, text=True)
        finally:
            path.write_text(source)
        caught = proc.returncode == 1
        print(f"{name:20} {'caught' if caught else 'MISSED'} ({test})", flush=True)
        if not caught:
            missed.append(name)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
