"""Extraction scorer: precision / recall / F1 on RxNorm codes, exact match, name accuracy."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pytest_groundeval.model import CaseResult
from pytest_groundeval.scorers.aggregate import code_set_summary, counts
from pytest_groundeval.scorers.base import Score, prf

def _norm(name: Any) -> str:
    return " ".join(str(name).split()).casefold() if name is not None else ""


#: a display that states a status other than active ("(stopped)", "discontinued"): the item
#: says the medication is not active, against its being listed as active
NOT_ACTIVE = re.compile(r"\b(?:stopped|discontinued|completed|cancell?ed|on[- ]hold|held|paused|inactive|suspended|"
                        r"ended|expired|entered[- ]in[- ]error|historical|"
                        r"no longer|not (?:currently |being )?(?:active|taking|taken|used)|do not take|d/c|dc'?d)(?!\w)",
                        re.I)


def _name(display: Any) -> str | None:
    """The first word of a display that can name its drug (four letters or more)."""
    return next((w for w in re.findall(r"[a-z]{4,}", str(display or "").casefold())), None)


def status_in_prose(prose: str, predicted: list[dict[str, Any]]) -> str | None:
    """A sentence of the text around the answer that says a listed medication (its code, or the
    first word of its display) is not active ("aspirin was stopped"), or None. A status said of
    a medication the answer does not list ("simvastatin was stopped, so it is left out") is no
    contradiction."""
    for sentence in re.split(r"[.;!?\n]+", prose):
        said = NOT_ACTIVE.search(sentence)
        if said is None:
            continue
        words = set(re.findall(r"[a-z0-9]+", sentence.casefold()))
        for p in predicted:
            if p["code"] in words or _name(p.get("display")) in words:
                return f"{sentence.strip()!r} says {said.group(0)!r} of {p['code']}, which the answer lists as active"
    return None


def contradicted(predicted: list[dict[str, Any]]) -> dict[str, str]:
    """The codes whose listing contradicts itself, with why: listed under two different
    (non-blank) displays, or with a display that states a status other than active."""
    out: dict[str, str] = {}
    names: dict[str, set[str]] = {}
    for p in predicted:
        if _norm(p.get("display")):
            names.setdefault(p["code"], set()).add(_norm(p.get("display")))
        said = NOT_ACTIVE.search(p.get("display") or "")
        if said:
            out.setdefault(p["code"], f"its display {p.get('display')!r} says {said.group(0)!r}, not active")
    for code, shown in names.items():
        if len(shown) > 1:
            out.setdefault(code, f"listed under {len(shown)} different displays {sorted(shown)}")
    return out


def score_extraction(predicted: list[dict[str, Any]], truth: list[dict[str, str]]) -> Score:
    """A code listed more than once with the same display counts once (sets of codes; its first
    non-blank display is its name) and is reported in ``details.duplicates`` and the reason. A
    code whose listing contradicts itself (:func:`contradicted`: two displays, or a display that
    says "stopped") earns no credit: a false positive and, if active, a miss (so hedging never
    pays). A missing or blank display is a wrong name; where the bundle's own coding has no
    display there is nothing to check a name against, and any non-blank display counts as right."""
    counts = Counter(p["code"] for p in predicted)
    pred_names: dict[str, Any] = {}
    for p in predicted:
        if not _norm(pred_names.get(p["code"])):
            pred_names[p["code"]] = p.get("display")
    truth_names = {t["code"]: t["display"] for t in truth}
    conflicts = contradicted(predicted)
    pred_codes, truth_codes = set(counts), set(truth_names)
    credited = pred_codes - set(conflicts)
    tp = len(credited & truth_codes)
    fp, fn = len(pred_codes) - tp, len(truth_codes) - tp
    precision, recall, f1 = prf(tp, fp, fn)
    exact = not conflicts and pred_codes == truth_codes
    # name accuracy is over the truth items: a missed item (or a contradicted one) is a wrong name
    wrong_names = sorted(c for c in truth_codes & pred_codes if c in conflicts or not _norm(pred_names[c])
                         or (_norm(truth_names[c]) and _norm(pred_names[c]) != _norm(truth_names[c])))
    names_right = len(truth_codes & pred_codes) - len(wrong_names)
    name_accuracy = names_right / len(truth_names) if truth_names else (1.0 if not pred_codes else 0.0)
    hallucinated, missed = sorted(pred_codes - truth_codes), sorted(truth_codes - pred_codes)
    duplicates = sorted(c for c, n in counts.items() if n > 1)
    reasons = []
    if conflicts:
        reasons.append("contradictory " + "; ".join(f"{c}: {why}" for c, why in sorted(conflicts.items())))
    if hallucinated:
        reasons.append(f"hallucinated {hallucinated}")
    if missed:
        reasons.append(f"missed {missed}")
    reason = "; ".join(reasons) or "exact match"
    if duplicates:
        reason += f" (listed more than once, counted once: {duplicates})"
    return Score(
        passed=exact,
        metrics={
            "tp": tp, "fp": fp, "fn": fn,
            "precision": precision, "recall": recall, "f1": f1,
            "exact_match": 1.0 if exact else 0.0,
            "name_accuracy": name_accuracy,
        },
        details={
            "hallucinated": hallucinated,
            "missed": missed,
            "duplicates": duplicates,
            "contradictions": sorted(conflicts),
            "wrong_names": wrong_names,
        },
        reason=reason,
    )


def unparsed(truth: list[dict[str, str]], reason: str) -> Score:
    """An answer that cannot be parsed: failed, every metric 0; for the micro figures its
    truth items (at least one) count as missed, so it never drops out of a denominator."""
    return Score(
        passed=False,
        metrics={"tp": 0, "fp": 0, "fn": max(len(truth), 1), "precision": 0.0, "recall": 0.0,
                 "f1": 0.0, "exact_match": 0.0, "name_accuracy": 0.0},
        details={"parse_error": reason},
        reason=f"parse error: {reason}",
    )


PER_CASE = ("precision", "recall", "f1", "exact_match", "name_accuracy")


def summarize(results: list[CaseResult], *, seed: int = 0) -> dict[str, Any]:
    """Aggregates over this task's results. Skipped cases are counted apart; an errored
    case scores 0 everywhere and, for the micro figures, counts its truth items (at least
    one) as missed, so it never drops out of a denominator."""
    run, summary = counts(results)
    tp = fp = fn = 0
    per_case: dict[str, list[float]] = {k: [] for k in PER_CASE}
    for r in run:
        if r.score is None:  # an error: 0 everywhere
            fn += max(len(r.ground_truth or []), 1)
            for v in per_case.values():
                v.append(0.0)
            continue
        m = r.score.metrics
        tp, fp, fn = tp + int(m["tp"]), fp + int(m["fp"]), fn + int(m["fn"])
        for k, v in per_case.items():
            v.append(float(m[k]))
    summary.update(code_set_summary(tp, fp, fn, per_case, len(run), seed=seed))
    return summary
