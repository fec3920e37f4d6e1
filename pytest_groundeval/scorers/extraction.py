"""Extraction scorer: precision / recall / F1 on RxNorm codes, exact match, name accuracy.

Also the rules of a listed medication item that reconciliation shares (imported, not copied):
a display must denote its code (:func:`display_faults`), a listing must not contradict itself
(:func:`contradicted`: two displays, or a display saying "stopped" on an active item), and the
prose around the answer must not say a listed active item is not (:func:`status_in_prose`);
a remark in prose is said of the drugs :func:`readings` finds beside it."""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from pytest_groundeval.model import CaseResult
from pytest_groundeval.scorers.aggregate import code_set_summary, counts
from pytest_groundeval.scorers import drugtext
from pytest_groundeval.scorers.base import Score, prf


def _norm(name: Any) -> str:
    return "" if name is None else _norm_text(name if isinstance(name, str) else str(name))


@functools.lru_cache(maxsize=65536)  # (the same displays, item after item and case after case)
def _norm_text(name: str) -> str:
    return " ".join(name.split()).casefold()


#: a display that states a status other than active ("(stopped)", "discontinued"): the item
#: says the medication is not active, against its being listed as active
NOT_ACTIVE = re.compile(r"\b(?:stopped|discontinued|completed|cancell?ed|on[- ]hold|held|paused|inactive|suspended|"
                        r"ended|expired|entered[- ]in[- ]error|historical|ceased|halted|withdrawn|terminated|"
                        r"deprescribed|tapered off|(?:taken|came|come|coming) off|any ?more|"
                        r"no longer|not (?:currently |being )?(?:active|taking|taken|used)|do not take|d/c|dc'?d)(?!\w)",
                        re.I)
#: a status word that qualifies the work or the record, not a drug ("the completed list", "the
#: historical entries", "ended up"): no status remark
NOT_A_STATUS = re.compile(r"\b(?:completed|historical|ended|held)\s+(?:up|list|lists|review|reconciliation|summary|"
                          r"table|answer|extraction|records?|data|entries|search|check|notes?)\b", re.I)


# ---------------------------------------------------------------- what a listed item's display names
# A display is an element of the answer: it is verified against the code it stands beside, or
# the item fails (default deny). Read with ``drugtext`` (the catalog's drug words, the lexicon's
# brands, spelling folded): it must positively name the product of the code (its ingredient, a
# brand of exactly its ingredients, or the record's / catalog's display of the code, in any
# letter case) and state nothing against it (another drug, another strength, salt, release or
# dose form). A display that names no drug the catalog, the lexicon or the case knows ("heart
# pill", an unknown brand) is unverifiable and fails; a missing display is no claim (the key is
# optional) and passes.
@functools.lru_cache(maxsize=1)
def catalog_displays() -> dict[str, str]:
    """``{code: display}`` of the site RxNorm catalog (a code's second reference name)."""
    from pytest_groundeval.fhir.hc_tools import get_catalog

    return {e["code"]: e["display"] for e in get_catalog().entries}


def case_vocabulary(displays: Iterable[Any]) -> drugtext.Vocabulary:
    """The lexicon's vocabulary with the drug words of the case's own displays, spelling folded
    (a drug of the record the catalog lacks is still a drug: naming it on another code is naming
    another drug)."""
    return _vocabulary(frozenset(str(d) for d in displays if _norm(d)))


@functools.lru_cache(maxsize=4096)  # (the same patient's displays, case after case and task after task)
def _vocabulary(displays: frozenset[str]) -> drugtext.Vocabulary:
    base = drugtext.lexicon_vocabulary()
    extra = frozenset(w for d in displays for w in _product(d, base.names).ingredients)
    return drugtext.Vocabulary(base.names | extra, base.brand_ingredients, base.displays) if extra - base.names \
        else base


@functools.lru_cache(maxsize=65536)  # (a pure reading of a display: drug names recur across patients)
def _product(display: str, names: frozenset[str]) -> drugtext.Product:
    """The product a reference display names, its spelling folded as an answer's is (Synthea's
    "Simvistatin 10 MG" is simvastatin)."""
    return drugtext.product(drugtext.fold_spelling(display, names))


def references(code: str, display: Any) -> list[str]:
    """The names a code is known by: the record's display of it (``display``) and the catalog's."""
    return [d for d in (display, catalog_displays().get(code)) if _norm(d)]


def display_fault(display: Any, refs: list[str], vocab: drugtext.Vocabulary) -> str | None:
    """Why ``display`` does not denote the product the reference names ``refs`` name, or None
    when it does (or is absent: no claim). See the comment above."""
    if not _norm(display):
        return None
    if any(_norm(display) == _norm(r) for r in refs):
        return None
    if not refs:
        return f"display {display!r} cannot be checked: the code has no known name (unverifiable)"
    folded = drugtext.fold_spelling(str(display), vocab.names)
    against = []
    for ref in refs:
        prod = _product(ref, vocab.names)
        said = _own_typo(_acid_named(folded, prod), prod)
        bad = drugtext.conflicts(said, prod, vocab)
        if not bad and (drugtext.names_product(said, prod, vocab) or _says_nameless(display, prod)):
            return None
        against += bad
    if against:
        return f"display {display!r} {against[0]}"
    return f"display {display!r} names no drug known as {_product(refs[0], vocab.names).shown()} (unverifiable)"


def _one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one letter changed, added or dropped."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def _own_typo(text: str, prod: drugtext.Product) -> str:
    """``text`` with a word of eight letters or more one letter away from the product's own
    ingredient read as it: the record's spelling and the right one are the same drug (Synthea's
    "Simvistatin 10 MG" and "simvastatin"); two letters may be another drug (prednisone,
    prednisolone)."""
    def own(m: re.Match[str]) -> str:
        w = m.group(0).casefold()
        return next((i for i in sorted(prod.ingredients) if len(w) >= 8 and _one_edit(w, i)), m.group(0))
    return re.sub(r"[A-Za-z]+", own, text)


def _acid_named(text: str, prod: drugtext.Product) -> str:
    """``text`` with an anion's name read as the acid the product names ("alendronate" for
    "Alendronic acid", "valproate" for "valproic acid")."""
    return re.sub(r"\b([a-z]{4,})ate\b", lambda m: m.group(1) + "ic" if m.group(1).casefold() + "ic" in prod.ingredients
                  else m.group(0), text, flags=re.I)


def _says_nameless(display: Any, prod: drugtext.Product) -> bool:
    """A product whose display has no drug word the reader knows ("Vitamin B 12 5 MG/ML Injectable
    Solution") is named by the words before its first strength, spaces aside ("vitamin B12")."""
    if prod.ingredients:
        return False
    head = re.split(r"\d+(?:\.\d+)?\s*MG\b", prod.display, maxsplit=1, flags=re.I)[0]
    key = re.sub(r"\W+", "", head).casefold()
    return bool(key) and key in re.sub(r"\W+", "", str(display)).casefold()


def display_faults(predicted: list[dict[str, Any]], truth: list[dict[str, Any]]) -> dict[str, str]:
    """The truth codes the answer lists under a display that does not denote them, with why."""
    names = {t["code"]: t.get("display") for t in truth}
    vocab = case_vocabulary(names.values())
    out: dict[str, str] = {}
    for p in predicted:
        if p["code"] in names and p["code"] not in out:
            why = display_fault(p.get("display"), references(p["code"], names[p["code"]]), vocab)
            if why:
                out[p["code"]] = why
    return out


# ---------------------------------------------------------------- what the prose says of a listed item
#: a sentence ends at ; ! ? a line break, or a full stop that is not a decimal point ("0.125 MG")
_SENTENCE = re.compile(r"[;!?\n]+|\.(?!\d)")
_WORD = re.compile(r"[A-Za-z0-9@$]*[A-Za-z][A-Za-z0-9@$!|]*|\d+")


@dataclass(frozen=True)
class Mention:
    """A drug named in a sentence, at ``start`` to ``end``: the listed items it names (none: a
    drug the answer does not list)."""

    start: int
    end: int
    items: tuple[int, ...]


def mentions(sentence: str, predicted: list[dict[str, Any]], vocab: drugtext.Vocabulary) -> list[Mention]:
    """The drugs a sentence names, in order: a listed display written out (any letter case; the
    words inside it name nothing else), a listed code, or a drug word (spelling folded) naming
    listed items' products (those of that one ingredient first: "acetaminophen" is the plain
    tablet, not the combination) or another drug the vocabulary knows."""
    products = [drugtext.product(p["display"]) if _norm(p.get("display")) else None for p in predicted]
    names = vocab.names | {w for prod in products if prod for w in prod.ingredients}
    known = _english() | {w for p in predicted for w in re.findall(r"[a-z]+", str(p.get("display") or "").casefold())}
    out, covered = [], []
    for i, p in enumerate(predicted):  # a display names its item, drug words or not ("Vitamin B 12")
        if _norm(p.get("display")):
            said = r"\s+".join(map(re.escape, str(p["display"]).split()))
            for m in re.finditer(rf"(?<!\w){said}(?!\w)", sentence, re.I):
                out.append(Mention(m.start(), m.end(), (i,)))
                covered.append(m.span())
    for m in _WORD.finditer(sentence):
        if any(a <= m.start() < b for a, b in covered):
            continue
        tok = m.group(0)
        listed = tuple(i for i, p in enumerate(predicted) if p["code"] == tok)
        word = drugtext.spelled_as(tok, names, known) if not tok.isdigit() else None
        if word and not listed:
            listed = _named_by(word, products, vocab)
        if listed or word:
            out.append(Mention(m.start(), m.end(), listed))
    return sorted(out, key=lambda x: x.start)


def _named_by(word: str, products: list[drugtext.Product | None], vocab: drugtext.Vocabulary) -> tuple[int, ...]:
    named = [i for i, prod in enumerate(products)
             if prod and drugtext.names_product(_own_typo(_acid_named(word, prod), prod), prod, vocab)]
    alone = [i for i in named if products[i].ingredients == {word}]
    return tuple(alone or named)


Reading = list[tuple[re.Match[str], set[int]]]
#: where a clause begins: a remark is not said across it ("digoxin is active, but simvastatin
#: was stopped")
CLAUSE = re.compile(r"\b(?:but|while|whereas|although|though|however|yet|so|since|because|except|"
                    r"instead|rather than)\b", re.I)


def readings(sentence: str, claim: re.Pattern[str], predicted: list[dict[str, Any]],
             vocab: drugtext.Vocabulary) -> list[Reading]:
    """The ways a sentence's claims can be read as said of the listed items: each claim of the
    drugs named between it and the claim before ("aspirin and digoxin were stopped"), or each of
    those named between it and the next ("2 matched (lisinopril, amlodipine) and 1 unreported
    (metformin)"); a claim with no drug on its side takes the other side's ("Stopped:
    aspirin"; "Simvastatin could also be matched"), and one with no drug on either side is said
    of the drugs of the claim before it ("Simvastatin: matched, or possibly unreported"). A claim said of a drug the answer does not
    list says nothing of the listed ones ("simvastatin was stopped, so amlodipine is the only
    one"), nor across the start of a clause (:data:`CLAUSE`) or a verb between two drugs
    (:data:`VERB`: "digoxin is matched and simvastatin was stopped"). A sentence contradicts the answer
    only when every reading does."""
    said = list(claim.finditer(sentence))
    if not said:
        return []
    named = mentions(sentence, predicted, vocab)
    cuts = [b.start() for b in CLAUSE.finditer(sentence)]

    def drugs(lo: int, hi: int) -> list[Mention]:
        return [x for x in named if lo <= x.start < hi]

    out = []
    for after_first in (False, True):
        reading = []
        for k, m in enumerate(said):
            lo = max([said[k - 1].end() if k else 0, *(c for c in cuts if c < m.start())])
            hi = min([said[k + 1].start() if k + 1 < len(said) else len(sentence), *(c for c in cuts if c > m.end())])
            before, after = _run(sentence, drugs(lo, m.start()), last=True), _run(sentence, drugs(m.end(), hi))
            side = (after or before) if after_first else (before or after)
            items = {i for x in side for i in x.items} if side else (reading[-1][1] if reading else set())
            reading.append((m, items))
        out.append(reading)
    return out


#: a verb between two drugs: they are in two statements ("digoxin is matched and simvastatin was
#: stopped"), not one list ("amlodipine and digoxin were stopped")
VERB = re.compile(r"\b(?:is|are|was|were|has|have|had|remains?|stays?|continues?|takes?|reports?|says?|said)\b", re.I)


def _run(sentence: str, named: list[Mention], last: bool = False) -> list[Mention]:
    """The drugs of ``named`` a claim beside them is said of: the list next to it (the last run
    before it, or the first after it), up to a verb between two drugs."""
    seq = named[::-1] if last else named
    out = seq[:1]
    for x in seq[1:]:
        a, b = (x, out[-1]) if last else (out[-1], x)
        if VERB.search(sentence[a.end:b.start]):
            break
        out.append(x)
    return out


def first_fault(sentence: str, claim: re.Pattern[str], predicted: list[dict[str, Any]], vocab: drugtext.Vocabulary,
                fault: Callable[[re.Match[str], dict[str, Any]], bool]) -> tuple[re.Match[str], dict[str, Any]] | None:
    """The claim and item of the first reading's first ``fault``, when every reading of the
    sentence (:func:`readings`) has one; None when some reading says nothing against the answer."""
    found = []
    for reading in readings(sentence, claim, predicted, vocab):
        hit = next(((m, predicted[i]) for m, items in reading for i in sorted(items) if fault(m, predicted[i])), None)
        if hit is None:
            return None
        found.append(hit)
    return found[0] if found else None


@functools.lru_cache(maxsize=1)
def _english() -> frozenset[str]:
    """Words that are words, never a misspelt drug (the lexicon's list of words near a name)."""
    return frozenset(drugtext.lexicon().get("words", ()))


def sentences(prose: str) -> list[str]:
    return [s for s in _SENTENCE.split(prose) if s.strip()]


#: a remark on the patient's taking ("stopped taking", "is not taking"): about the patient, not the order
TAKING = re.compile(r"\b(?:stopped|quit|no longer|not|n't|never)\s+(?:currently\s+|been\s+|being\s+)?"
                    r"(?:tak(?:e|es|ing|en)|using|used)\b", re.I)


def status_in_prose(prose: str, predicted: list[dict[str, Any]], *, active: Callable[[dict[str, Any]], bool] =
                    lambda p: True, order_only: Callable[[dict[str, Any]], bool] = lambda p: False,
                    mask: re.Pattern[str] | None = None) -> str | None:
    """A sentence of the text around the answer that says a listed medication it lists as active
    (``active``) is not ("Digoxin 0.125 MG Oral Tablet was stopped last month."), or None. The
    remark is said of the drugs :func:`readings` gives it, in every reading; a status said of a
    drug the answer does not list is no contradiction, nor is a status word that qualifies the
    work (:data:`NOT_A_STATUS`). ``order_only``: items of which only the order's status is
    asserted (a remark on the patient's taking, :data:`TAKING`, is no contradiction of them);
    ``mask``: phrases that are not status remarks (a verdict's name, "stopped-but-taking")."""
    vocab = None
    for sentence in sentences(prose):
        if vocab is None:  # (no text around the answer: no sentence, no vocabulary to build)
            vocab = case_vocabulary(p.get("display") for p in predicted)
        text = NOT_A_STATUS.sub(_blank, mask.sub(_blank, sentence) if mask else sentence)
        taking = {m.start() for m in TAKING.finditer(text)}
        hit = first_fault(text, NOT_ACTIVE, predicted, vocab, lambda said, p: active(p) and not (
            order_only(p) and said.start() in taking))
        if hit:
            return f"{sentence.strip()!r} says {hit[0].group(0)!r} of {hit[1]['code']}, which the answer lists as active"
    return None


def _blank(m: re.Match[str]) -> str:
    return " " * len(m.group(0))


@functools.lru_cache(maxsize=65536)  # (the same displays, item after item and case after case)
def _status_said(display: str) -> str | None:
    """The words of ``display`` that state a status other than active (:data:`NOT_ACTIVE`), or None."""
    said = NOT_ACTIVE.search(display)
    return said.group(0) if said else None


def contradicted(predicted: list[dict[str, Any]],
                 active: Callable[[dict[str, Any]], bool] = lambda p: True) -> dict[str, str]:
    """The codes whose listing contradicts itself, with why: listed under two different
    (non-blank) displays, or, where the answer lists the item as active (``active``), with a
    display that states a status other than active ("Aspirin (stopped)")."""
    out: dict[str, str] = {}
    names: dict[str, set[str]] = {}
    for p in predicted:
        if _norm(p.get("display")):
            names.setdefault(p["code"], set()).add(_norm(p.get("display")))
        said = _status_said(p.get("display") or "") if active(p) else None
        if said:
            out.setdefault(p["code"], f"its display {p.get('display')!r} says {said!r}, not active")
    for code, shown in names.items():
        if len(shown) > 1:
            out.setdefault(code, f"listed under {len(shown)} different displays {sorted(shown)}")
    return out


def score_extraction(predicted: list[dict[str, Any]], truth: list[dict[str, str]]) -> Score:
    """A code listed more than once with the same display counts once (sets of codes; its first
    non-blank display is its name) and is reported in ``details.duplicates`` and the reason. A
    code whose listing contradicts itself (:func:`contradicted`: two displays, or a display that
    says "stopped") earns no credit: a false positive and, if active, a miss (so hedging never
    pays). So does a right code under a display that does not denote it (:func:`display_faults`:
    another drug's name, another strength, or no drug known at all). A missing or blank display
    is a wrong name (the key is optional: no credit is lost)."""
    counts = Counter(p["code"] for p in predicted)
    pred_names: dict[str, Any] = {}
    for p in predicted:
        if not _norm(pred_names.get(p["code"])):
            pred_names[p["code"]] = p.get("display")
    truth_names = {t["code"]: t["display"] for t in truth}
    wrong_displays = display_faults(predicted, truth)
    contradictions = contradicted(predicted)
    conflicts = {**wrong_displays, **contradictions}
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
    if wrong_displays:
        reasons.append("display not of its code " + "; ".join(f"{c}: {why}" for c, why in sorted(wrong_displays.items())))
    if contradictions:
        reasons.append("contradictory " + "; ".join(f"{c}: {why}" for c, why in sorted(contradictions.items())))
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
            "contradictions": sorted(contradictions),
            "wrong_displays": wrong_displays,
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
