"""Which drug a free text names, read against the site RxNorm catalog.

A MedicationStatement says what drug it is in more places than its RxNorm coding: codings of
other systems (SNOMED, NDC) with their displays, ``medicationCodeableConcept.text``, and a
contained Medication's ``code``, ``ingredient`` and ``form``. Each must agree with the product
the case documents. This module reads a text the way the catalog reads a query (the catalog's
own tokenizer, ``hc_tools._tokenize``: ``HCTZ`` is hydrochlorothiazide, ``XL`` extended
release, ``10 mg/5 mL`` is 2 mg/mL) and compares what it states with the expected product:

* **drug names**: every ingredient or brand name the catalog knows (ingredient words of every
  display; brands in ``[...]``, each mapped to its product's ingredients). A text naming a
  known drug that is not the product's ingredient, not its brand and not a brand of the same
  ingredient(s) contradicts it ("clopidogrel" on warfarin; "Vicodin" on plain acetaminophen).
  Words the catalog does not know ("Coumadin", "Advil" when no display carries them) are not
  read: they neither contradict nor confirm.
* **strength**: every mass strength the text states (``10 mg``, ``90 mcg/actuation``,
  ``10 mg/5 mL``) is one of the product's strengths ("Warfarin 10 mg" on a 5 mg tablet fails);
  a product whose display has no strength ("Clonazepam [Klonopin]") is not compared.
* **salt**, **release**, **dose form**: a salt the text names differs from one the display
  names (tartrate on succinate); extended / delayed release on a product that is neither, or
  immediate release on one that is; a dose form (tablet, capsule, solution, ...) the display
  does not have.

:func:`conflicts` lists the contradictions of a text; :func:`names_product` says whether it
positively names the product's drug; :func:`same_product` whether it is a full name of the
product (a display that is a different but correct name of the same RxNorm concept).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from pytest_groundeval.fhir.hc_tools.catalog import _tokenize

SALTS = frozenset({
    "acetate", "besylate", "bitartrate", "bromide", "calcium", "citrate", "dipropionate", "fumarate",
    "furoate", "hyclate", "hydrobromide", "hydrochloride", "hydrocholoride", "magnesium", "maleate",
    "mesylate", "phosphate", "potassium", "propionate", "sodium", "succinate", "sulfate", "tartrate",
    "valerate", "xinafoate",
})
# dose-form words (the catalog's tokenizer already maps tab/caps/soln/susp/inj/mdi)
FORMS = {
    "tablet": "tablet", "capsule": "capsule", "solution": "solution", "suspension": "suspension",
    "inhaler": "inhaler", "injection": "injection", "syringe": "injection", "patch": "patch",
    "transdermal": "patch", "cream": "cream", "gel": "gel", "spray": "spray", "powder": "powder",
    "implant": "implant", "ring": "ring",
}
RELEASE = frozenset({"er", "dr", "ir"})
# words of catalog displays that name no drug: routes, forms' qualifiers, pack and device words
NOT_NAMES = frozenset({
    "abuse", "deterrent", "auto", "injector", "chewable", "day", "dose", "drug", "dry", "hr", "inert",
    "ingredients", "metered", "mucosal", "ophthalmic", "oral", "pack", "per", "prefilled", "sublingual",
    "system", "topical", "vaginal", "intrauterine", "nda", "regular", "human", "isophane", "porcine",
    "acid", "v", "b", "fe", "tri", "ortho", "vitamin", "extended", "release", "delayed", "immediate",
    "actuat", "unt", "ml", "mg", "g", "ug", "mcg", "and", "with", "of", "the", "a", "an", "in", "for",
    "by", "mouth", "take", "tablets", "units", "unit", "x",
})
_STRENGTH = re.compile(r"^(\d+(?:\.\d+)?)mg(?:/(ml|actuat|mg|hr|h))?$")
_BRACKET = re.compile(r"\[([^\]]*)\]")


@dataclass(frozen=True)
class Reading:
    """What one text states: drug-name words, salts, strengths (mg, per), release, forms."""

    names: frozenset[str]
    salts: frozenset[str]
    strengths: tuple[tuple[float, str | None], ...]
    release: frozenset[str]  # release words the text states ("er", "dr", "ir")
    forms: frozenset[str]


def read(text: str) -> Reading:
    primary, _derived = _tokenize(text)
    names, salts, release, forms = set(), set(), set(), set()
    strengths: list[tuple[float, str | None]] = []
    for tok in primary:
        m = _STRENGTH.match(tok)
        if m:
            strengths.append((float(m.group(1)), m.group(2)))
        elif not tok.isalpha():
            continue
        elif tok in SALTS:
            salts.add(tok)
        elif tok in RELEASE:
            release.add(tok)
        elif tok in FORMS:
            forms.add(FORMS[tok])
        elif tok not in NOT_NAMES and len(tok) > 1:
            names.add(tok)
    return Reading(frozenset(names), frozenset(salts), tuple(strengths), frozenset(release), frozenset(forms))


@dataclass(frozen=True)
class Product:
    """The documented product: its display's reading, brand words, and ingredient words."""

    display: str
    reading: Reading
    brands: frozenset[str]
    ingredients: frozenset[str]

    @property
    def release(self) -> str:
        r = self.reading.release
        return "er" if "er" in r else "dr" if "dr" in r else "ir"

    def shown(self) -> str:
        return " / ".join(sorted(self.ingredients)) or self.display


def _split_brand(display: str) -> tuple[str, frozenset[str]]:
    brands = {w for part in _BRACKET.findall(display) for w in read(part).names}
    return _BRACKET.sub(" ", display), frozenset(brands)


def product(display: str, ingredient: str | None = None) -> Product:
    """The product a display names; ``ingredient`` (the case's ingredient, when it has one)
    says what a display that is only a brand ("Lasix 40mg") contains."""
    body, brands = _split_brand(display)
    reading = read(body)
    ingredients = read(ingredient).names if ingredient else frozenset()
    return Product(display, reading, brands, ingredients or reading.names)


@dataclass(frozen=True)
class Vocabulary:
    names: frozenset[str]  # every drug-name word of the catalog (ingredients and brands)
    brand_ingredients: dict[str, frozenset[str]]
    displays: dict[str, str]  # normalised display -> code


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


@functools.lru_cache(maxsize=4)
def _vocabulary(entries: tuple[tuple[str, str], ...]) -> Vocabulary:
    names: set[str] = set()
    brand_ingredients: dict[str, set[str]] = {}
    displays: dict[str, str] = {}
    for code, display in entries:
        body, brands = _split_brand(display)
        ingredients = read(body).names
        names |= ingredients | brands
        for b in brands:
            brand_ingredients.setdefault(b, set()).update(ingredients)
        displays.setdefault(_norm(display), code)
    return Vocabulary(frozenset(names), {b: frozenset(i) for b, i in brand_ingredients.items()}, displays)


def vocabulary() -> Vocabulary:
    """The site catalog's drug vocabulary (``hc_tools.get_catalog()``, read once per catalog)."""
    from pytest_groundeval.fhir.hc_tools import get_catalog

    return _vocabulary(tuple((e["code"], e["display"]) for e in get_catalog().entries))


def _denotes(word: str, prod: Product, vocab: Vocabulary) -> bool:
    """Does a drug-name word denote the product's drug (its ingredient, its brand, a brand of
    exactly its ingredients, or a display word of the product itself)?"""
    if word in prod.ingredients or word in prod.brands or word in prod.reading.names:
        return True
    return vocab.brand_ingredients.get(word) == prod.ingredients


def _fmt(mg: float, per: str | None) -> str:
    return f"{mg:g} mg" + (f"/{per}" if per else "")


def conflicts(text: str, prod: Product, vocab: Vocabulary | None = None) -> list[str]:
    """What ``text`` states that contradicts the product (empty: nothing it states does)."""
    vocab = vocab or vocabulary()
    r, p = read(text), prod.reading
    out: list[str] = []
    others = sorted(w for w in r.names if w in vocab.names and not _denotes(w, prod, vocab))
    if others:
        out.append(f"names {', '.join(others)}, not {prod.shown()}")
    if p.strengths:
        wrong = []
        for mg, per in r.strengths:
            if not any(math.isclose(mg, pm, rel_tol=1e-6) and (per is None or pp is None or per == pp)
                       for pm, pp in p.strengths):
                wrong.append(_fmt(mg, per))
        if wrong:
            out.append(f"states {', '.join(wrong)}; the product is {', '.join(_fmt(m, q) for m, q in p.strengths)}")
    if r.salts and p.salts and not r.salts <= p.salts:
        out.append(f"names the salt {', '.join(sorted(r.salts - p.salts))}; the product is {', '.join(sorted(p.salts))}")
    release = prod.release
    if ("er" in r.release and release != "er") or ("dr" in r.release and release != "dr"):
        out.append(f"says {'extended' if 'er' in r.release else 'delayed'} release; the product is not")
    elif "ir" in r.release and release != "ir":
        out.append(f"says immediate release; the product is {'extended' if release == 'er' else 'delayed'} release")
    if r.forms and p.forms and not r.forms <= p.forms:
        out.append(f"names the dose form {', '.join(sorted(r.forms - p.forms))}; the product is "
                   f"{', '.join(sorted(p.forms))}")
    return out


def names_product(text: str, prod: Product, vocab: Vocabulary | None = None) -> bool:
    """Does ``text`` name the product's drug (an ingredient or brand word that denotes it)?"""
    vocab = vocab or vocabulary()
    return any(_denotes(w, prod, vocab) for w in read(text).names)


def same_product(text: str, prod: Product, vocab: Vocabulary | None = None) -> tuple[bool, str]:
    """Is ``text`` a full name of the product: another correct display of the same concept?

    It names every ingredient (or the product's brand), every strength, the dose form and the
    release the display has, contradicts nothing, names the brand exactly when the product is
    a branded one, and is not the display of another catalog concept.
    """
    vocab = vocab or vocabulary()
    if _norm(text) == _norm(prod.display):
        return True, "the display"
    other = vocab.displays.get(_norm(text))
    if other is not None:
        return False, f"is the display of RxNorm {other}, another concept"
    bad = conflicts(text, prod, vocab)
    if bad:
        return False, "; ".join(bad)
    r, p = read(text), prod.reading
    body, brands = _split_brand(text)
    named = r.names | brands
    missing = []
    if prod.brands:
        if not named & prod.brands:
            missing.append(f"the brand {', '.join(sorted(prod.brands))}")
    elif any(w in vocab.brand_ingredients for w in named):
        return False, f"names a brand ({', '.join(sorted(w for w in named if w in vocab.brand_ingredients))}); " \
                      "the product is not a branded one"
    if not prod.brands and not (prod.ingredients <= named or p.names <= named):
        missing.append(f"the ingredient(s) {', '.join(sorted(prod.ingredients))}")
    for mg, per in p.strengths:
        if not any(math.isclose(mg, m, rel_tol=1e-6) for m, _ in r.strengths):
            missing.append(_fmt(mg, per))
    if p.forms - r.forms:
        missing.append(f"the dose form {', '.join(sorted(p.forms - r.forms))}")
    if prod.release != "ir" and prod.release not in r.release:
        missing.append("extended release" if prod.release == "er" else "delayed release")
    if missing:
        return False, f"does not name {', '.join(missing)}"
    return True, "another name of the same product"


# ---------------------------------------------------------------- the lexicon and spelling
# Brand and lay / class names the catalog lacks ("Coumadin", "your water pill", "statin"):
# ``drug_lexicon.json``, built by ``scripts/make_drug_lexicon.py`` and shipped in the package.
@functools.lru_cache(maxsize=1)
def lexicon() -> dict[str, Any]:
    """``{"brands": {brand: [ingredient words]}, "classes": {phrase: [...]}, "drugs": [...]}``."""
    import json
    from importlib.resources import files

    return json.loads(files("pytest_groundeval.scorers").joinpath("drug_lexicon.json").read_text(encoding="utf-8"))


_LEXICON_VOCABS: dict[int, tuple[Vocabulary, Vocabulary]] = {}  # id(base) -> (base, with the lexicon)


def _with_lexicon(base: Vocabulary) -> Vocabulary:
    kept = _LEXICON_VOCABS.get(id(base))
    if kept is not None and kept[0] is base:
        return kept[1]
    lex = lexicon()
    brands = {b: frozenset(read(" ".join(i)).names) for b, i in lex["brands"].items()}
    brands.update(base.brand_ingredients)  # the catalog's own word wins
    names = base.names | frozenset(lex["drugs"]) | frozenset(brands)
    out = Vocabulary(names, brands, base.displays)
    if len(_LEXICON_VOCABS) > 8:
        _LEXICON_VOCABS.clear()
    _LEXICON_VOCABS[id(base)] = (base, out)
    return out


def lexicon_vocabulary(base: Vocabulary | None = None) -> Vocabulary:
    """The catalog's vocabulary with the lexicon's brands and drug words added (a letter's
    reader: a brand outside the catalog names its ingredients' product, or a drug the record
    does not have)."""
    return _with_lexicon(base or vocabulary())


@functools.lru_cache(maxsize=1)
def _class_pattern() -> re.Pattern[str]:
    phrases = sorted(lexicon()["classes"], key=len, reverse=True)
    body = "|".join(re.escape(p).replace(r"\ ", r"[\s-]+").replace(r"\-", r"[\s-]*") for p in phrases)
    return re.compile(rf"\b({body})(?:e?s)?\b", re.I)


def class_names(text: str) -> list[tuple[str, frozenset[str]]]:
    """The lay / class names a text uses ("your water pills"), each with the ingredient words
    of its class (a class word names every drug of the class)."""
    classes = lexicon()["classes"]
    out = []
    for m in _class_pattern().finditer(text):
        key = re.sub(r"[\s-]+", " ", m.group(1).casefold())
        ings = classes.get(key) or classes.get(key.replace(" ", "-")) or classes.get(key.replace(" ", ""))
        if ings:
            out.append((m.group(0), frozenset(ings)))
    return out


# Spelling a reader still reads as the drug (:func:`fold_spelling`): digits and signs for
# letters ("s3rtral1ne"), letters spaced or dotted apart ("s e r t r a l i n e"), a word broken
# by a hyphen at a line's end ("sertra-\nline"), and a misspelling within two edits of a name
# of six letters or more with the same first letter ("setraline"), unless it is an English
# word the lexicon lists as near a name ("meantime" is not memantine, "active" not Activase).
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "!": "i",
                       "|": "l"})
_TOKEN = re.compile(r"(?<![\w@$])[A-Za-z0-9@$]*[A-Za-z][A-Za-z0-9@$!|]*")
_SPACED = re.compile(r"(?<![\w@$])(?:[A-Za-z0-9@$][ .\u00b7*_-]){3,}[A-Za-z0-9@$](?![\w@$])")
_HYPHENATED = re.compile(r"\b([A-Za-z0-9@$]{2,})-[ \t]*\r?\n[ \t]*([A-Za-z0-9@$]{2,})\b")
_UNIT_TOKEN = re.compile(r"^\d+(?:mg|mcg|ml|g|hr|h|x|st|nd|rd|th|am|pm)?$", re.I)


def _edits(a: str, b: str, limit: int = 2) -> int:
    """Levenshtein distance of ``a`` and ``b`` (``limit + 1`` once it is over ``limit``)."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        if min(row) > limit:
            return limit + 1
    return row[-1]


def spelled_as(word: str, names: Iterable[str], known: frozenset[str] = frozenset()) -> str | None:
    """The drug name ``word`` spells (comment above), or None; ``known``: words that are words
    in their own right (the catalog's, English ones) and are never read as another."""
    return _spelled_as(word.casefold(), frozenset(names), known)


@functools.lru_cache(maxsize=65536)
def _spelled_as(w: str, names: frozenset[str], known: frozenset[str]) -> str | None:
    if _UNIT_TOKEN.match(w):
        return None
    plain = w.translate(_LEET) if any(not c.isalpha() for c in w) else w
    if not plain.isalpha():
        return None
    if plain in names:
        return plain
    if len(plain) < 6 or w in known or plain in known:
        return None
    near = [(d, n) for n in sorted(names) if len(n) >= 6 and n[0] == plain[0] and (d := _edits(plain, n)) <= 2]
    best = sorted(near)
    if best and (len(best) == 1 or best[0][0] < best[1][0]):
        return best[0][1]
    return None


def fold_spelling(text: str, names: Iterable[str], known: frozenset[str] = frozenset()) -> str:
    """``text`` with each spelling of a drug name in ``names`` (lower-case drug words) written as
    the name (comment above); every other character as it was."""
    names = frozenset(names)
    known = known | _words()  # English words near a name ("meantime", "hearing") stay themselves

    def joined(m: re.Match[str]) -> str:
        word = re.sub(r"[^A-Za-z0-9@$]", "", m.group(0))
        return spelled_as(word, names, known) or m.group(0)

    text = _HYPHENATED.sub(lambda m: spelled_as(m.group(1) + m.group(2), names, known) or m.group(0), text)
    text = _SPACED.sub(joined, text)
    text = _split_names(text, names)
    return _TOKEN.sub(lambda m: spelled_as(m.group(0), names, known) or m.group(0), text)


@functools.lru_cache(maxsize=1)
def _words() -> frozenset[str]:
    return frozenset(lexicon().get("words", ()))


_GAP = re.compile(r"[ \t]+|[ \t]*-[ \t]*")


def _split_names(text: str, names: frozenset[str]) -> str:
    """Two to four adjacent words (spaces or hyphens between) that together spell a name exactly
    ("galan tamine", "gal-ant-amine"), none a name alone, joined."""
    tokens = list(_TOKEN.finditer(text))
    out, pos, i = [], 0, 0
    while i < len(tokens):
        for k in (4, 3, 2):
            run = tokens[i:i + k]
            if len(run) < k or any(t.group(0).casefold() in names for t in run) or not all(
                    _GAP.fullmatch(text, x.end(), y.start()) for x, y in zip(run, run[1:])):
                continue
            joined = "".join(t.group(0) for t in run).casefold().translate(_LEET)
            if joined in names:
                out += [text[pos:run[0].start()], joined]
                pos, i = run[-1].end(), i + k - 1
                break
        i += 1
    return "".join(out) + text[pos:]


def texts_of(concept: Any) -> Iterable[tuple[str, Any]]:
    """(field, value) of a CodeableConcept's text and its codings' displays."""
    if not isinstance(concept, dict):
        return
    yield "text", concept.get("text")
    for i, c in enumerate(concept.get("coding") or [] if isinstance(concept.get("coding"), list) else []):
        if isinstance(c, dict):
            yield f"coding[{i}].display", c.get("display")


__all__ = ["Product", "Reading", "class_names", "conflicts", "fold_spelling", "lexicon", "lexicon_vocabulary",
           "names_product", "product", "read", "same_product", "spelled_as", "vocabulary"]
