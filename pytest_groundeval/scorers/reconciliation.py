"""Reconciliation scorer: per-verdict precision / recall / F1 by RxNorm code, micro over
(code, verdict) pairs, exact match, name accuracy.

Rules (each has a failing and a passing test in ``tests/test_reconciliation*.py``):

* An item is a (code, verdict) pair; the truth holds each code once.
* A code listed twice with the same verdict counts once (``details.duplicates``).
* A code listed with two or more different verdicts is a *contradiction*: it earns credit
  for none of them. Every claimed (code, verdict) of it is a false positive in that
  verdict's class, and its true pair (if any) is missed. So hedging never pays.
* A right code with the wrong verdict is a false positive in the claimed class and a miss
  in the true one (``details.wrong_verdict``).
* An item whose listing contradicts itself earns no credit either (the rules of
  ``scorers/extraction.py``, shared): a display that does not denote its code
  (:func:`extraction.display_faults`: another drug, another strength, or no known drug), the
  same code under two displays, or a display saying "stopped" on an item the answer says is
  taken or active (every verdict but ``stopped-but-taking``).
* ``passed`` = exact match: the answer's pairs equal the truth's, with no contradiction.
* ``name_accuracy`` (over the truth items, a missed item counts as a wrong name: the display
  as written, compared with the record's) is reported apart and does not gate ``passed``.

The prose around the answer (read at parse, :func:`verdict_in_prose` and
``extraction.status_in_prose``) may repeat an item's own verdict, and says no other verdict of
it ("X could also be matched") and no stop of an item it lists as taken or active.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from pytest_groundeval.model import CaseResult, MetricSpec, UnscoredCounts, metric, prf_specs
from pytest_groundeval.scorers.aggregate import code_set_specs, code_set_summary, counts
from pytest_groundeval.scorers.base import Score, prf
from pytest_groundeval.scorers.extraction import (case_vocabulary, contradicted, display_faults, first_fault,
                                                  sentences, status_in_prose)

VERDICTS = ("matched", "unreported", "unrecorded", "stopped-but-taking")


def slug(verdict: str) -> str:
    return verdict.replace("-", "_")


SLUGS = tuple(slug(v) for v in VERDICTS)

PER_CASE = ("precision", "recall", "f1", "exact_match", "name_accuracy")


#: a verdict named in prose ("matched", "stopped but taking")
VERDICT_WORDS = re.compile(r"\b(matched|unreported|unrecorded|stopped[\s_-]+but[\s_-]+(?:still[\s_-]+)?taking)\b", re.I)


def _verdict(said: str) -> str:
    return re.sub(r"[\s_-]+", "-", said.casefold()).replace("-still-", "-")


def taken(item: dict[str, Any]) -> bool:
    """The answer says the record has it active or the patient takes it: a stop contradicts it."""
    return item["verdict"] != "stopped-but-taking"


def verdict_in_prose(prose: str, predicted: list[dict[str, Any]]) -> str | None:
    """A sentence of the text around the answer that gives a listed item a verdict other than
    its own ("Though Simvastatin 20 MG Oral Tablet could also be 'matched'."), or None: a verdict
    word is said of the drugs ``extraction.readings`` gives it, in every reading."""
    vocab = case_vocabulary(p.get("display") for p in predicted)
    for sentence in sentences(prose):
        hit = first_fault(sentence, VERDICT_WORDS, predicted, vocab, lambda said, p: p["verdict"] != _verdict(said.group(0)))
        if hit:
            return (f"{sentence.strip()!r} says {hit[0].group(0)!r} of {hit[1]['code']}, which the answer "
                    f"calls {hit[1]['verdict']!r}")
    return None


def prose_fault(prose: str, predicted: list[dict[str, Any]]) -> str | None:
    """What the prose says against the answer's items: another verdict, or a stop of an item it
    says is taken or active (a remark on the patient's taking is no stop of an ``unreported``
    item's order)."""
    return verdict_in_prose(prose, predicted) or status_in_prose(
        prose, predicted, active=taken, order_only=lambda p: p["verdict"] == "unreported", mask=VERDICT_WORDS)


def _norm(name: Any) -> str:
    return " ".join(str(name).split()).casefold() if name is not None else ""


def score_reconciliation(predicted: list[dict[str, Any]], truth: list[dict[str, str]]) -> Score:
    claims: dict[str, list[str]] = defaultdict(list)  # code -> verdicts claimed, in order
    names: dict[str, Any] = {}
    for p in predicted:
        claims[p["code"]].append(p["verdict"])
        names.setdefault(p["code"], p.get("display"))
    true_verdict = {t["code"]: t["verdict"] for t in truth}
    wrong_displays = display_faults(predicted, truth)
    faults = {**wrong_displays, **contradicted(predicted, active=taken)}
    contradictions = sorted(c for c, vs in claims.items() if len(set(vs)) > 1)
    duplicates = sorted(c for c, vs in claims.items() if len(vs) > len(set(vs)))
    tp = {v: 0 for v in VERDICTS}
    fp = {v: 0 for v in VERDICTS}
    fn = {v: 0 for v in VERDICTS}
    wrong_verdict, extra, missed = [], [], []
    for code, vs in claims.items():
        claimed = set(vs)
        truth_v = true_verdict.get(code)
        if len(claimed) == 1 and truth_v in claimed and code not in faults:
            tp[truth_v] += 1
            continue
        for v in claimed:
            fp[v] += 1
        if truth_v is None:
            extra.append({"code": code, "verdict": sorted(claimed)[0] if len(claimed) == 1 else sorted(claimed)})
        else:
            fn[truth_v] += 1
            if len(claimed) == 1 and truth_v not in claimed:
                wrong_verdict.append({"code": code, "said": vs[0], "truth": truth_v})
    for code, v in true_verdict.items():
        if code not in claims:
            fn[v] += 1
            missed.append({"code": code, "verdict": v})
    TP, FP, FN = sum(tp.values()), sum(fp.values()), sum(fn.values())
    precision, recall, f1 = prf(TP, FP, FN)
    exact = FP == 0 and FN == 0
    names_right = sum(1 for t in truth if t["code"] in names and _norm(names[t["code"]]) == _norm(t["display"]))
    name_accuracy = names_right / len(truth) if truth else (1.0 if not claims else 0.0)
    metrics: dict[str, float] = {"tp": TP, "fp": FP, "fn": FN, "precision": precision, "recall": recall,
                                 "f1": f1, "exact_match": 1.0 if exact else 0.0, "name_accuracy": name_accuracy}
    for v in VERDICTS:
        metrics.update({f"{slug(v)}_tp": tp[v], f"{slug(v)}_fp": fp[v], f"{slug(v)}_fn": fn[v]})
    reasons = []
    if wrong_verdict:
        reasons.append("wrong verdict " + ", ".join(f"{w['code']} said {w['said']} (is {w['truth']})" for w in wrong_verdict))
    if contradictions:
        reasons.append(f"contradictory verdicts for {contradictions}")
    if faults:
        reasons.append("no credit for " + "; ".join(f"{c}: {why}" for c, why in sorted(faults.items())))
    if missed:
        reasons.append("missed " + ", ".join(f"{m['code']} ({m['verdict']})" for m in missed))
    if extra:
        reasons.append("extra " + ", ".join(f"{e['code']} ({e['verdict']})" for e in extra))
    return Score(
        passed=exact,
        metrics=metrics,
        details={"wrong_verdict": wrong_verdict, "missed": missed, "extra": extra,
                 "contradictions": contradictions, "duplicates": duplicates, "faults": faults,
                 "wrong_names": sorted(t["code"] for t in truth if t["code"] in names
                                       and _norm(names[t["code"]]) != _norm(t["display"]))},
        reason="; ".join(reasons) or "exact match",
    )


def _missed_counts(truth: Any) -> dict[str, int]:
    """Per-verdict counts of the truth items (all missed), and at least one overall."""
    by_v = {v: 0 for v in VERDICTS}
    for t in truth or []:
        if isinstance(t, dict) and t.get("verdict") in by_v:
            by_v[t["verdict"]] += 1
    return by_v


def unparsed(truth: list[dict[str, str]], reason: str) -> Score:
    """An answer that cannot be parsed: failed, every metric 0; its truth items count as
    missed (in their verdict class, and at least one overall)."""
    by_v = _missed_counts(truth)
    metrics: dict[str, float] = {"tp": 0, "fp": 0, "fn": max(len(truth), 1), "precision": 0.0, "recall": 0.0,
                                 "f1": 0.0, "exact_match": 0.0, "name_accuracy": 0.0}
    for v in VERDICTS:
        metrics.update({f"{slug(v)}_tp": 0, f"{slug(v)}_fp": 0, f"{slug(v)}_fn": by_v[v]})
    return Score(passed=False, metrics=metrics, details={"parse_error": reason}, reason=f"parse error: {reason}")


def summarize(results: list[CaseResult], *, seed: int = 0) -> dict[str, Any]:
    """Aggregates over this task's results. Skipped cases are counted apart; an errored case
    scores 0 everywhere and its truth items (at least one) count as missed."""
    run, summary = counts(results)
    tot = {k: 0 for k in ("tp", "fp", "fn")}
    per_v = {s: {k: 0 for k in ("tp", "fp", "fn")} for s in SLUGS}
    per_case: dict[str, list[float]] = {k: [] for k in PER_CASE}
    for r in run:
        if r.score is None:  # an error: 0 everywhere, its truth missed
            by_v = _missed_counts(r.ground_truth)
            tot["fn"] += max(len(r.ground_truth or []), 1)
            for v, n in by_v.items():
                per_v[slug(v)]["fn"] += n
            for vals in per_case.values():
                vals.append(0.0)
            continue
        m = r.score.metrics
        for k in tot:
            tot[k] += int(m[k])
        for s in SLUGS:
            for k in ("tp", "fp", "fn"):
                per_v[s][k] += int(m[f"{s}_{k}"])
        for k, vals in per_case.items():
            vals.append(float(m[k]))
    summary.update(code_set_summary(tot["tp"], tot["fp"], tot["fn"], per_case, len(run), seed=seed))
    for s in SLUGS:
        c = per_v[s]
        vp, vr, vf = prf(c["tp"], c["fp"], c["fn"]) if run else (0.0, 0.0, 0.0)
        summary.update({f"{s}_precision": round(vp, 6), f"{s}_recall": round(vr, 6), f"{s}_f1": round(vf, 6)})
    for s in SLUGS:  # the per-verdict counts the figures above come from
        summary.update({f"{s}_{k}": per_v[s][k] for k in ("tp", "fp", "fn")})
    return summary


def specs() -> list[MetricSpec]:
    """What :func:`summarize`'s figures are: the code-set figures, then per verdict its P/R/F1
    of its summed counts (shown together under the verdict) and the counts (an errored case's
    truth items of that verdict are missed)."""
    out = code_set_specs()
    for v in VERDICTS:
        s = slug(v)
        out += prf_specs(s, (f"{s}_tp", f"{s}_fp", f"{s}_fn"), group=v)
    for v in VERDICTS:
        s = slug(v)
        out += [metric(f"{s}_tp", "count"), metric(f"{s}_fp", "count"),
                metric(f"{s}_fn", "count", unscored=UnscoredCounts(where={"verdict": v}))]
    return out
