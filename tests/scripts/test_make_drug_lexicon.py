"""scripts/make_drug_lexicon.py rebuilds the committed lexicon byte for byte from the catalog and
the bundles, and every class and brand it keeps names ingredients the reader reads as one word."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "pytest_groundeval" / "scorers" / "drug_lexicon.json"
SEED = REPO.parent / "shared" / "data" / "groundeval-seed"


def _script():
    spec = importlib.util.spec_from_file_location("make_drug_lexicon", REPO / "scripts" / "make_drug_lexicon.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_drug_lexicon"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not SEED.is_dir(), reason="the seed data (../shared/data/groundeval-seed) is not here")
def test_rebuilds_the_committed_lexicon_byte_for_byte(tmp_path):
    out = tmp_path / "lexicon.json"
    assert _script().main(["--out", str(out)]) == 0
    assert out.read_bytes() == COMMITTED.read_bytes()


def test_every_entry_reads_as_drug_words():
    lex = json.loads(COMMITTED.read_text(encoding="utf-8"))
    drugs = set(lex["drugs"])
    assert all(set(v) <= drugs for v in [*lex["brands"].values(), *lex["classes"].values()])
    assert "allegra" not in lex["brands"] and "bayer" not in lex["brands"]  # first names and surnames
