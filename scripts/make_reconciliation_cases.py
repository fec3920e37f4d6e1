"""Generate the medication-reconciliation cases from the committed Synthea bundles.

Usage::

    uv run python scripts/make_reconciliation_cases.py --fixtures fixtures/synthea \\
        --catalog fixtures/terminology/rxnorm.json --out fixtures/reconciliation --seed 7

For every living patient with at least one active MedicationRequest, 2 cases (3 for a
patient with >= 4 active codes and an ended medication a patient could still be taking).
Each case is an intake note in a nurse's words of what the patient reports taking, and the
choices behind it. Every case reports at least one active medication; the generator adds
per case zero or more of three discrepancies, stratified across cases:

* ``unreported``: active medications the patient does not mention (``omitted_active``);
* ``unrecorded``: a medication from the catalog that no MedicationRequest of the patient
  names, whose ingredients the record does not have in any form (``source: catalog``);
* ``stopped``: a medication the record has only as stopped or completed, that the patient
  still takes (``source: stopped``).

A wording comes from the coded drug's own RxNorm display: its ingredients (or the brand the
display carries: ``[Tylenol]``, ``Lasix``, pill packs, ``Mirena``), its strength, its dose form
("levonorgestrel 19.5 MG Intrauterine System" -> "levonorgestrel IUD", "levonorgestrel 19.5 mg
IUD"), never from a lookup that could pick another concept. Every wording is checked twice to
identify its medication unambiguously: by the generator's own model of the drug
(``compatible``: among the record's medications for a record medication, among the record and
the catalog for a catalog one) and by an independent reader of the words (``resolve``: the
display words, strength numbers and form a mention says, against the record's displays, then
the catalog's). A record medication with no such wording is never reported. Deceased patients
are left out (an intake note needs a living patient).

Self-check: every written note is split back into its items (``note_items``) and each item is
resolved on its own, among the record's medications and then the catalog entries the
single-call prompt lists for that note (``tasks.reconciliation.catalog_candidates``); it must
give exactly the recorded code. A case that does not round-trip is refused: the script names
each refused case and mention on stderr, writes and deletes nothing, and exits 1.

Ground truth is not written here: the task derives it at load from the bundle and the
recorded choices. Same inputs + seed -> byte-identical files (seeded per case).
Prints the stratification table. Importable: ``main(argv)`` returns the exit code (1: a case
was refused).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.fhir.codes import MEDICATION_REQUEST_STATUSES, REQUEST_ACTIVE, REQUEST_ENDED  # noqa: E402
from pytest_groundeval.fhir.medications import distinct_codes, medication_requests  # noqa: E402
from pytest_groundeval.tasks.datasets import bundle_files, load_json, no_bundles  # noqa: E402
from pytest_groundeval.tasks.datasets import case_id_for as bundle_stem  # noqa: E402

KINDS = ("unreported", "unrecorded", "stopped")
STRATA = [tuple(k for k, on in zip(KINDS, bits) if on) for bits in
          [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 0, 1), (0, 1, 1), (1, 1, 1)]]
ENDED = REQUEST_ENDED
CONTRACEPTIVE = "hormonal contraceptive"

# ------------------------------------------------------------------ reading a display
SALTS = {"hydrochloride", "hcl", "succinate", "tartrate", "sodium", "potassium", "calcium", "bitartrate",
         "phosphate", "hydrobromide", "maleate", "acetate", "sulfate", "hydrocholoride", "human,", "porcine"}
#: full ingredient name (lower case) -> how a nurse writes it
SPOKEN = {
    "metoprolol succinate": "metoprolol succinate", "metoprolol tartrate": "metoprolol tartrate",
    "alendronic acid": "alendronate", "penicillin v potassium": "penicillin VK",
    "vitamin b 12": "vitamin B12", "simvistatin": "simvastatin", "heparin sodium, porcine": "heparin",
    "ferrous sulfate": "ferrous sulfate", "sodium fluoride": "fluoride", "naproxen sodium": "naproxen sodium",
    "amiodarone hydrocholoride": "amiodarone", "fluticasone propionate": "fluticasone",
}
#: displays whose product a nurse names by brand (and, for ambiguity checks, their ingredients)
BRAND_ONLY = {"Lasix 40mg": ("Lasix", ("furosemide",), ("40 mg",))}
FORMS = [  # (display suffix, category, how it is said)
    ("Extended Release Oral Tablet", "oral", ""), ("Extended Release Oral Capsule", "oral", ""),
    ("Chewable Tablet", "chewable", "chewable"), ("Oral Tablet", "oral", ""), ("Oral Capsule", "oral", ""),
    ("Oral Solution", "liquid", "liquid"), ("Oral Suspension", "liquid", "liquid"),
    ("Metered Dose Inhaler", "inhaler", "inhaler"), ("Dry Powder Inhaler", "inhaler", "inhaler"),
    ("Prefilled Syringe", "injection", "injections"), ("Injectable Solution", "injection", "injections"),
    ("Injectable Suspension", "injection", "injections"), ("Auto-Injector", "injection", "auto-injector"),
    ("Injection", "injection", "injections"), ("Topical Cream", "cream", "cream"),
    ("Mucosal Spray", "spray", "spray"), ("Sublingual Tablet", "sublingual", "SL tablets"),
    ("Oral Gel", "gel", "gel"), ("Ophthalmic Solution", "eye drops", "eye drops"),
    ("Transdermal System", "patch", "patch"), ("transdermal patch", "patch", "patch"),
    ("Intrauterine System", "iud", "IUD"), ("Drug Implant", "implant", "implant"),
]
#: contraceptive hormones: a contraceptive display that starts with one names its ingredients, not a brand
HORMONES = {"levonorgestrel", "etonogestrel", "norelgestromin", "ethinyl", "estradiol", "norethindrone",
            "drospirenone", "norgestimate", "desogestrel", "medroxyprogesterone", "dienogest", "mestranol",
            "norethynodrel", "norgestrel", "segesterone", "ulipristal"}
#: may be reported by or for a child (the parent speaks for a patient under 16)
PEDIATRIC = {"amoxicillin", "acetaminophen", "ibuprofen", "loratadine", "cetirizine", "albuterol", "fluticasone",
             "penicillin", "cefuroxime", "cefaclor", "chlorpheniramine", "diphenhydramine", "nitrofurantoin"}
#: dementia drugs: offered as "unrecorded" only to patients 60 or older
GERIATRIC = {"donepezil", "memantine", "galantamine", "tacrine"}
#: taken as needed when the record gives no regimen
PRN = {"acetaminophen", "ibuprofen", "naproxen", "diphenhydramine", "loratadine", "cetirizine", "hydrocodone",
       "oxycodone", "codeine", "nitroglycerin", "albuterol", "epinephrine", "chlorpheniramine", "hydrocortisone"}
ANTIBIOTICS = {"amoxicillin", "clavulanate", "penicillin", "cefuroxime", "cefaclor", "nitrofurantoin", "ampicillin"}
HOME_FORMS = {"oral", "chewable", "liquid", "inhaler", "cream", "spray", "sublingual", "patch", None}
#: not offered as an "unrecorded" medication: withdrawn from the market, or given only in clinic
NOT_PATIENT_REPORTED = {"astemizole", "terfenadine", "tacrine", "mestranol", "meperidine", "alteplase",
                        "tropicamide", "leucovorin", "oxaliplatin", "docetaxel", "atropine", "ampicillin",
                        "amiodarone", "heparin", "epinephrine", "leuprolide", "furosemide", "fluoride",
                        "cycloSPORINE".lower(), "methotrexate"}


@dataclass
class Med:
    code: str
    display: str
    bases: frozenset  # ingredient base names; {CONTRACEPTIVE} for hormonal contraceptives
    names: tuple  # spoken ingredient names, display order
    strengths: tuple  # sayable strengths, e.g. ("325", "7.5") with unit in `unit`
    unit: str | None
    er: bool
    form: str | None
    form_said: str
    brand: str | None
    timing: dict | None = None
    statuses: set = field(default_factory=set)


def _ingredient(text: str) -> tuple[str, str, str | None, str | None]:
    """'Metformin hydrochloride 500 MG' -> (base, spoken, strength number, unit)."""
    m = re.match(r"^(?P<name>.*?)\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>MG|UNT|ML)(?:/(?P<per>[A-Z]+))?$",
                 text.strip(), re.IGNORECASE)
    name, num, unit = (m.group("name"), m.group("num"), m.group("unit").lower()) if m else (text.strip(), None, None)
    if m and m.group("per"):
        num = unit = None  # concentrations (mg/mL, mg/actuat) are not what a patient says
    low = " ".join(name.lower().split())
    spoken = SPOKEN.get(low) or " ".join(w for w in low.split() if w not in SALTS) or low
    base = spoken.split()[0] if spoken not in ("vitamin B12", "ferrous sulfate") else spoken
    return base.lower(), spoken, num, unit


def parse_display(code: str, display: str) -> Med:
    d = display
    if d in BRAND_ONLY:
        brand, bases, strengths = BRAND_ONLY[d]
        return Med(code, display, frozenset(bases), (), tuple(s.split()[0] for s in strengths), "mg",
                   False, "oral", "", brand)
    brand = None
    m = re.search(r"\[([^\]]+)\]\s*$", d)
    if m:
        brand = re.sub(r"\s+\d+ Day$", "", m.group(1)).strip()
        d = d[: m.start()].strip()
    contraceptive = bool(re.search(r"\bPack\b|Intrauterine|Vaginal Ring|Drug Implant|norelgestromin", d, re.IGNORECASE)
                         or d.startswith("{"))
    cform, csaid = None, ""
    if contraceptive:
        cform = "iud" if "Intrauterine" in d else "patch" if "Transdermal" in d else "ring" if "Ring" in d \
            else "implant" if "Implant" in d else "pill pack"
        csaid = {"iud": "IUD", "patch": "patch", "ring": "ring", "implant": "implant", "pill pack": ""}[cform]
        cstrengths: tuple = ()
        if brand is None:
            m = re.match(r"^(.*?)\s+(?:\d+(?:\.\d+)?(?:/[\d.]+)?\s+)?(?:\d+ Day Pack|(\d+(?:\.\d+)?) MG "
                         r"(?:Intrauterine|Drug Implant)|0\.12/0\.015)", d)
            if m:
                brand = m.group(1).strip()
                cstrengths = (m.group(2),) if m.group(2) else ()
        if brand is not None and brand.split()[0].lower() in HORMONES:
            brand = None  # an ingredient, not a brand: named from the display's ingredients below
        if brand is not None:
            if csaid and csaid.lower() in brand.lower():
                csaid = ""  # "NuvaRing", not "NuvaRing ring"
            return Med(code, display, frozenset({CONTRACEPTIVE}), (), cstrengths, "mg" if cstrengths else None,
                       False, cform, csaid, brand)
        if d.startswith("{"):  # a pack with no brand: no wording a patient would use
            return Med(code, display, frozenset({CONTRACEPTIVE}), (), (), None, False, cform, csaid, None)
    er = bool(re.search(r"Extended Release|^\d+\s*HR\b|^24hr\b", d, re.IGNORECASE))
    d = re.sub(r"^(?:NDA\d+\s+)?(?:Abuse-Deterrent\s+)?(?:\d+(?:\.\d+)?\s+(?:HR|ML|ACTUAT)\s+)?", "", d)
    d = re.sub(r"^24hr\s+", "", d)
    form, said = None, ""
    for suffix, cat, how in FORMS:
        if d.lower().endswith(suffix.lower()):
            form, said, d = cat, how, d[: -len(suffix)].strip()
            break
    parts = [p for p in re.split(r"\s+/\s+|(?<=[a-z])/(?=[A-Za-z])", d) if p.strip()]
    bases, names, strengths, units = [], [], [], set()
    for part in parts:
        base, spoken, num, unit = _ingredient(part)
        bases.append(base)
        names.append(spoken)
        if num is not None:
            strengths.append(num)
            units.add(unit)
    if len(strengths) != len(parts) or len(units) != 1:
        strengths, unit = [], None
    else:
        unit = units.pop()
    if contraceptive:  # e.g. "levonorgestrel 19.5 MG Intrauterine System" -> levonorgestrel, 19.5 mg, IUD
        return Med(code, display, frozenset({CONTRACEPTIVE}), tuple(names), tuple(strengths), unit, False,
                   cform, csaid, None)
    return Med(code, display, frozenset(bases), tuple(names), tuple(strengths), unit, er, form, said, brand)


# ------------------------------------------------------------------ wordings
@dataclass(frozen=True)
class Wording:
    text: str
    bases: frozenset
    brand: str | None
    strengths: tuple | None
    er: bool
    form: str | None
    name: str = ""  # the brand or the ingredients said, lower case


def _name_of(med: Med) -> str:
    return (med.brand or "-".join(med.names)).lower()


def _contraceptive_compatible(w: Wording, y: Med) -> bool:
    """Hormonal contraceptives: a brand and an ingredient name may be the same product (the
    record does not say what a brand holds), so only a form, a strength, two different
    brands or two different ingredient names tell them apart."""
    if w.form and y.form and w.form != y.form:
        return False
    if w.strengths and y.strengths and tuple(y.strengths) != tuple(w.strengths):
        return False
    yname = _name_of(y)
    if not w.name or not yname or w.name == yname:
        return True
    w_ingredient, y_ingredient = w.name.split()[0] in HORMONES, yname.split()[0] in HORMONES
    return w_ingredient != y_ingredient


def compatible(w: Wording, y: Med) -> bool:
    """Could a nurse's wording ``w`` mean medication ``y``? Conservative (says yes when unsure)."""
    if CONTRACEPTIVE in w.bases or CONTRACEPTIVE in y.bases:
        return CONTRACEPTIVE in w.bases and CONTRACEPTIVE in y.bases and _contraceptive_compatible(w, y)
    if w.brand is not None:
        if y.brand is not None and y.brand.lower() != w.brand.lower():
            return False
        if y.brand is None and (y.bases != w.bases or CONTRACEPTIVE in y.bases):
            return False
    elif not y.bases or y.bases != w.bases or (CONTRACEPTIVE in y.bases and not y.names):
        return False
    if w.strengths and y.strengths and tuple(y.strengths) != tuple(w.strengths):
        return False
    if w.er and not y.er:
        return False
    if w.form and y.form and w.form != y.form:
        return False
    return True


def _strength_text(med: Med) -> str:
    return "/".join(med.strengths) + f" {med.unit}" if med.strengths else ""


def wordings(med: Med) -> list[Wording]:
    """Every way this generator may write ``med``, plainest first."""
    out: list[Wording] = []
    name = "-".join(med.names) if med.names else ""
    form = med.form_said
    strength = _strength_text(med)

    def add(text: str, brand: str | None, with_strength: bool, er: bool) -> None:
        text = " ".join(text.split())
        # a contraceptive's brand says its form ("Camila" is a pill pack, never an implant)
        said_form = med.form if form or CONTRACEPTIVE in med.bases else None
        out.append(Wording(text, med.bases, brand, med.strengths if with_strength else None, er,
                           said_form, (brand or name).lower()))

    if name and med.code not in {"315971"}:
        for er in ([False, True] if med.er and med.form != "patch" else [False]):  # not a "nicotine ER patch"
            rel = " ER" if er else ""
            add(f"{name}{rel} {form}", None, False, er)
            if strength:
                add(f"{name}{rel} {strength} {form}", None, True, er)
    if med.brand:
        xl = " XL" if med.er and med.brand == "Toprol" else ""
        add(f"{med.brand}{xl} {form}", med.brand, False, bool(xl))
        if strength:
            add(f"{med.brand}{xl} {strength} {form}", med.brand, True, bool(xl))
    return out


def unambiguous(med: Med, record: list[Med], catalog: list[Med] | None = None) -> list[Wording]:
    """The wordings of ``med`` that no other medication of the record (and, for a catalog
    medication, of the catalog) could be (``compatible``), and that read back to ``med`` alone
    (:func:`resolve`: among the record's medications, then the catalog's)."""
    context = record + (catalog or [])
    on_record = {m.code: m.display for m in record}
    on_catalog = {m.code: m.display for m in catalog or []}
    return [w for w in wordings(med) if [y.code for y in context if compatible(w, y)] == [med.code]
            and resolve(w.text, on_record, on_catalog) == [med.code]]


# ------------------------------------------------------------------ reading a mention back (self-check)
# An independent reader of the note: it knows nothing of Med, wordings or compatible(); it
# matches the words of a mention against the words of the RxNorm displays the agent sees.
_FREQ = re.compile(r"\b(?:as needed|(?:once|twice|three times|four times) a (?:day|week)|daily|every morning|"
                   r"every \d+(?:\.\d+)? hours)\b")
#: what a nurse says for a dose form -> display words, one of which the display must have
_SAID_FORMS = (("sl tablets", {"sublingual"}), ("eye drops", {"ophthalmic"}), ("auto-injector", {"injector"}),
               ("iud", {"intrauterine"}), ("patch", {"transdermal", "patch"}), ("ring", {"ring"}),
               ("implant", {"implant"}), ("inhaler", {"inhaler"}),
               ("injections", {"injection", "injectable", "syringe", "injector"}), ("cream", {"cream"}),
               ("spray", {"spray"}), ("liquid", {"solution", "suspension"}), ("chewable", {"chewable"}),
               ("gel", {"gel"}))
#: how a nurse says a name -> the display words it stands for (all must be there), or its spellings
_SAID_NAMES = {"alendronate": ({"alendronic"},), "vk": ({"v", "potassium"},), "b12": ({"b"},),
               "simvastatin": ({"simvastatin"}, {"simvistatin"})}
_UNITS = {"mg", "ml", "unt", "units"}


#: each said form's pattern, compiled once (the generator matches ~200,000 mention/display pairs)
_SAID_FORM_PATTERNS = tuple((re.compile(rf"(?<![a-z]){re.escape(said)}(?![a-z])"), wanted)
                            for said, wanted in _SAID_FORMS)


@functools.lru_cache(maxsize=None)
def _display_terms(display: str) -> tuple[frozenset, frozenset, bool]:
    low = display.lower()
    er = bool(re.search(r"extended release|^(?:\d+ hr|24hr)\b", low))
    return frozenset(re.findall(r"[a-z]+", low)), frozenset(re.findall(r"\d+(?:\.\d+)?", low)), er


@functools.lru_cache(maxsize=None)  # a pure function of its two strings, asked again and again
def mention_matches(mention: str, display: str) -> bool:
    """Could ``mention`` (one item of the note, frequency and all) name the product ``display``?
    Every name word, stated strength number, dose form and release the mention says must be in
    the display."""
    text = _FREQ.sub(" ", mention.lower())
    words, numbers, er = _display_terms(display)
    for said, wanted in _SAID_FORM_PATTERNS:
        if said.search(text):
            if not wanted & words:
                return False
            text = said.sub(" ", text)
    said_numbers = re.findall(r"\d+(?:\.\d+)?", text)
    if any(n not in numbers for n in said_numbers):
        return False
    for word in re.findall(r"[a-z0-9]+", re.sub(r"\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)*", " ", text)):
        if word in _UNITS:
            continue
        if word in ("er", "xl"):
            if not er:
                return False
            continue
        if not any(alt <= words for alt in _SAID_NAMES.get(word, ({word},))):
            return False
    return True


def resolve(mention: str, record: dict[str, str], catalog: dict[str, str]) -> list[str]:
    """The codes ``mention`` can mean: the record's medications it matches, or, when it matches
    none, the catalog entries it matches (the task's rule: the record's code for a medication
    the record has). One code: the mention is unambiguous."""
    hits = [c for c, d in record.items() if mention_matches(mention, d)]
    return hits or [c for c, d in catalog.items() if c not in record and mention_matches(mention, d)]


_LEAD = re.compile(r"^(?:also takes|also on|states (?:she|he|they) also takes|also gives pt)\s+", re.IGNORECASE)


def note_items(note: str) -> list[str]:
    """The medication items of a note written by :func:`write_note`, in order."""
    body = note.split(": ", 1)[1]
    items = []
    for sentence in re.split(r"\.(?:\s+|$)", body):
        if not sentence.strip() or re.match(r"(?:denies|no other)\b", sentence.strip(), re.IGNORECASE):
            continue
        items += [i.strip() for i in _LEAD.sub("", sentence.strip()).split(";") if i.strip()]
    return items


class Refused(Exception):
    """A case whose note does not read back to its recorded codes."""


def check_round_trip(case: dict[str, Any], record: dict[str, str], catalog: dict[str, str]) -> None:
    """Every item of the note maps back, on its own, to the code recorded for it: among the
    record's medications, else among the catalog entries the single-call prompt lists for this
    note. Raises :class:`Refused` naming the case and the mention."""
    from pytest_groundeval.tasks.reconciliation import catalog_candidates

    candidates = dict(catalog_candidates(case["patient_report"], catalog))
    items = note_items(case["patient_report"])
    reported = case["reported"]
    if len(items) != len(reported):
        raise Refused(f"{case['case_id']}: the note has {len(items)} medication item(s), {len(reported)} reported")
    for item, r in zip(items, reported):
        codes = resolve(item, record, candidates)
        if codes != [r["code"]]:
            raise Refused(f"{case['case_id']}: the mention {item!r} reads back as {codes or 'nothing'}, "
                          f"not {r['code']} ({r['display']})")


# ------------------------------------------------------------------ frequencies
def timing_text(timing: dict | None) -> str | None:
    if not timing:
        return None
    if timing.get("asNeededBoolean"):
        return "as needed"
    rep = (timing.get("timing") or {}).get("repeat") or {}
    f, p, u = rep.get("frequency"), rep.get("period"), rep.get("periodUnit")
    if not f or not p or not u:
        return None
    words = {1: "once", 2: "twice", 3: "three times", 4: "four times"}
    if u == "d" and p == 1 and f in words:
        return f"{words[f]} a day"
    if u == "h" and f == 1:
        return f"every {p:g} hours"
    if u == "wk" and p == 1 and f == 1:
        return "once a week"
    return None


def frequency(med: Med, rng: random.Random) -> str:
    """How often, as the patient would say it (sometimes not said at all): as needed for
    rescue and pain/allergy medicines, else the record's regimen, else once daily."""
    if rng.random() < 0.4:
        return ""
    if med.form in ("inhaler", "cream", "spray", "sublingual") or med.bases & PRN:
        return "as needed"
    if CONTRACEPTIVE in med.bases or med.form in ("injection", "iud", "implant", "ring", "patch"):
        return "daily" if med.form == "pill pack" else ""
    if med.bases & ANTIBIOTICS:
        return rng.choice(["twice a day", "three times a day"])
    timing = dict(med.timing or {})
    timing.pop("asNeededBoolean", None)  # Synthea marks some daily tablets PRN; a patient would not
    return timing_text(timing) or rng.choice(["once a day", "daily", "every morning"])


# ------------------------------------------------------------------ patients
@dataclass
class Patient:
    stem: str
    path: Path
    adult: bool
    age: int
    gender: str
    meds: dict  # code -> Med (every code any MedicationRequest names)
    active: list  # codes
    ended: list  # codes stopped/completed and not active


def _age_years(birth: str, on: str) -> int:
    by, bm, bd = (int(x) for x in birth[:10].split("-"))
    y, m, d = (int(x) for x in on[:10].split("-"))
    return y - by - ((m, d) < (bm, bd))


def read_patient(path: Path) -> Patient | None:
    bundle, _ = load_json(path)  # .json or .json.gz, as the suites read them
    patient = next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")
    if patient.get("deceasedDateTime") or patient.get("deceasedBoolean"):
        return None
    # current, then ended, then the other MedicationRequest statuses (the order codes are first met in)
    statuses = REQUEST_ACTIVE + ENDED + tuple(s for s in MEDICATION_REQUEST_STATUSES if s not in REQUEST_ACTIVE + ENDED)
    meds: dict[str, Med] = {}
    for status in statuses:
        for code, display in distinct_codes(medication_requests(bundle, path.name, (status,))).items():
            med = meds.setdefault(code, parse_display(code, display))
            med.statuses.add(status)
    # the latest active request's dosage, for how often the patient takes it
    dates = []
    for e in bundle["entry"]:
        r = e["resource"]
        if r["resourceType"] != "MedicationRequest":
            continue
        dates.append(r.get("authoredOn", ""))
        coding = next((c for c in (r.get("medicationCodeableConcept") or {}).get("coding", [])
                       if c.get("system", "").endswith("rxnorm")), None)
        if coding and r["status"] == "active" and r.get("dosageInstruction"):
            meds[coding["code"]].timing = r["dosageInstruction"][0]
    active = [c for c, m in meds.items() if "active" in m.statuses]
    if not active:
        return None
    ended = [c for c, m in meds.items() if "active" not in m.statuses and m.statuses & set(ENDED)]
    age = _age_years(patient["birthDate"], max(dates))
    return Patient(bundle_stem(path), path, age >= 16, age, patient.get("gender", ""), meds, active, ended)


def case_id_for(stem: str, variant: str) -> str:
    name, _, uid = stem.rpartition("_")
    name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return f"{name}_{uid[:8]}_{variant}"


# ------------------------------------------------------------------ planning a patient's options
@dataclass
class Options:
    reportable: dict  # active code -> unambiguous wordings
    stopped: dict  # ended code -> wordings (home meds; no ingredient shared with an active one)
    catalog: dict  # catalog code -> wordings (ingredients the record lacks)


def options(p: Patient, catalog: list[Med]) -> Options:
    record = list(p.meds.values())
    reportable = {c: ws for c in p.active if (ws := unambiguous(p.meds[c], record))}
    active_bases = set().union(*(p.meds[c].bases for c in p.active))
    stopped = {}
    for c in p.ended:
        m = p.meds[c]
        if m.form in HOME_FORMS or CONTRACEPTIVE in m.bases:
            if not (m.bases & active_bases) and (ws := unambiguous(m, record)):
                stopped[c] = ws
    record_bases = set().union(*(m.bases for m in record))
    cat = {}
    for m in catalog:
        if m.code in p.meds or m.bases & record_bases or CONTRACEPTIVE in m.bases or not m.bases:
            continue
        if m.bases & NOT_PATIENT_REPORTED or m.form not in HOME_FORMS:
            continue
        if (not p.adult and not m.bases <= PEDIATRIC) or (m.bases & GERIATRIC and p.age < 60):
            continue
        if ws := unambiguous(m, record, catalog):
            cat[m.code] = ws
    return Options(reportable, stopped, cat)


def feasible(p: Patient, o: Options, stratum: tuple) -> bool:
    forced_u = any(c not in o.reportable for c in p.active)
    if forced_u and "unreported" not in stratum:
        return False
    if "unreported" in stratum and not forced_u and len(o.reportable) < 2:
        return False
    if not o.reportable:
        return False
    if "stopped" in stratum and not o.stopped:
        return False
    if "unrecorded" in stratum and not o.catalog:
        return False
    return True


# ------------------------------------------------------------------ writing a case
def _item(wording: Wording, med: Med, rng: random.Random) -> str:
    freq = frequency(med, rng)
    return f"{wording.text} {freq}".strip()


def write_note(items: list[str], p: Patient, rng: random.Random) -> str:
    adult = p.adult
    informant = "patient" if adult else "mother"
    opener = rng.choice([
        f"Medication history at intake, obtained from {informant}. "
        + ("Pt reports taking: " if adult else "Per mother, pt takes: "),
        f"Intake med list per {informant} (verbal). Current meds: ",
        ("Pt reports" if adult else "Mother reports pt is on") + " the following current medications: ",
    ])
    closer = rng.choice([
        "Denies other prescription or OTC medications.",
        "Denies any other meds, vitamins or supplements.",
        "No other medications reported.",
    ])
    if len(items) >= 3 and rng.random() < 0.5:
        head, tail = items[:-1], items[-1]
        pronoun = {"female": "she", "male": "he"}.get(p.gender, "they")
        also = rng.choice(["Also takes", "Also on", f"States {pronoun} also takes" if adult else "Also gives pt"])
        return f"{opener}{'; '.join(head)}. {also} {tail}. {closer}"
    return f"{opener}{'; '.join(items)}. {closer}"


def make_case(p: Patient, o: Options, stratum: tuple, variant: str, seed: int,
              catalog_by_code: dict, bundle_rel: str) -> dict[str, Any]:
    rng = random.Random(f"{seed}:{p.stem}:{variant}:{','.join(stratum)}")
    several = lambda n_avail: 2 if n_avail >= 2 and rng.random() < 0.35 else 1  # noqa: E731
    forced = [c for c in p.active if c not in o.reportable]
    omitted = list(forced)
    reportable = sorted(o.reportable)
    if "unreported" in stratum and not forced:
        k = several(len(reportable) - 1)
        omitted = rng.sample(reportable, k)
    reported_active = [c for c in reportable if c not in omitted]
    chosen: list[tuple[str, str]] = [(c, "active") for c in reported_active]
    if "stopped" in stratum:
        for c in rng.sample(sorted(o.stopped), several(len(o.stopped))):
            chosen.append((c, "stopped"))
    if "unrecorded" in stratum:
        k = several(len(o.catalog))
        picks: list[str] = []
        used_bases: set = set()
        for c in rng.sample(sorted(o.catalog), len(o.catalog)):
            if len(picks) < k and not (catalog_by_code[c].bases & used_bases):
                picks.append(c)
                used_bases |= catalog_by_code[c].bases
        chosen += [(c, "catalog") for c in picks]
    rng.shuffle(chosen)
    reported, items = [], []
    for code, source in chosen:
        med = catalog_by_code[code] if source == "catalog" else p.meds[code]
        pool = {"active": o.reportable, "stopped": o.stopped, "catalog": o.catalog}[source][code]
        w = rng.choice(pool)
        items.append(_item(w, med, rng))
        reported.append({"code": code, "display": med.display, "wording": w.text, "source": source})
    note = write_note(items, p, rng)
    additions = {"unreported": len(omitted), "unrecorded": sum(s == "catalog" for _, s in chosen),
                 "stopped": sum(s == "stopped" for _, s in chosen)}
    return {
        "case_id": case_id_for(p.stem, variant),
        "bundle": bundle_rel,
        "patient_report": note,
        "reported": reported,
        "omitted_active": sorted(omitted),
        "additions": additions,
        "seed": seed,
        "generator": "scripts/make_reconciliation_cases.py",
    }


def plan(patients: list[tuple[Patient, Options]], seed: int) -> list[tuple[Patient, Options, tuple, str]]:
    """Assign a stratum to every case slot: the feasible stratum used least so far."""
    rng = random.Random(f"{seed}:plan")
    slots = []
    for p, o in patients:
        n = 3 if len(p.active) >= 4 and o.stopped else 2
        slots += [(p, o, "abc"[i]) for i in range(n)]
    rng.shuffle(slots)
    used: Counter = Counter()
    taken: dict[str, set] = {}
    out = []
    for p, o, variant in slots:
        options_ = [s for s in STRATA if feasible(p, o, s) and s not in taken.get(p.stem, set())]
        options_ = options_ or [s for s in STRATA if feasible(p, o, s)]
        low = min(used[s] for s in options_)
        stratum = rng.choice([s for s in options_ if used[s] == low])
        used[stratum] += 1
        taken.setdefault(p.stem, set()).add(stratum)
        out.append((p, o, stratum, variant))
    return out


def dumps(case: dict[str, Any]) -> bytes:
    return (json.dumps(case, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", type=Path, default=ROOT / "fixtures" / "synthea")
    ap.add_argument("--catalog", type=Path, default=ROOT / "fixtures" / "terminology" / "rxnorm.json")
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "reconciliation")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--bundle-ref", default=None,
                    help="how a case file names the bundles' folder (default: --fixtures relative to --out)")
    args = ap.parse_args(argv)

    catalog = [parse_display(str(e["code"]), str(e["display"])) for e in json.loads(args.catalog.read_bytes())]
    catalog_by_code = {m.code: m for m in catalog}
    paths = bundle_files(args.fixtures)
    if not paths:  # never an empty run that deletes the --out folder's cases and says "0 cases"
        print(no_bundles(args.fixtures, "--fixtures", args.out), file=sys.stderr)
        return 2
    patients = []
    for path in paths:
        p = read_patient(path)
        if p is None:
            continue
        o = options(p, catalog)
        if o.reportable:
            patients.append((p, o))
    args.out.mkdir(parents=True, exist_ok=True)
    rel = args.bundle_ref or os.path.relpath(args.fixtures.resolve(), args.out.resolve())
    cases, refused = [], []
    site = {m.code: m.display for m in catalog}
    for p, o, stratum, variant in plan(patients, args.seed):
        bundle_rel = f"{rel.rstrip('/')}/{p.path.name}".replace(os.sep, "/")
        case = make_case(p, o, stratum, variant, args.seed, catalog_by_code, bundle_rel)
        try:
            check_round_trip(case, {c: m.display for c, m in p.meds.items()}, site)
        except Refused as e:
            refused.append(str(e))
            continue
        cases.append((case, stratum))
    if not cases:  # nothing to write: keep what --out holds
        print(f"no case could be made from the {len(paths)} bundle(s) in {args.fixtures} (none of a living patient "
              f"with an active medication to report); nothing written to (or deleted from) {args.out}",
              file=sys.stderr)
        return 1
    if refused:  # a note that does not say what its truth says: write nothing, delete nothing
        for reason in refused:
            print(f"refused: {reason}", file=sys.stderr)
        print(f"{len(refused)} case(s) refused: their notes do not read back to their codes; nothing written "
              f"to {args.out}. Fix the wording (parse_display / wordings) or the reader (resolve).",
              file=sys.stderr)
        return 1
    written = set()
    for case, _ in sorted(cases, key=lambda c: c[0]["case_id"]):
        target = args.out / f"{case['case_id']}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_bytes(dumps(case))
        os.replace(tmp, target)
        written.add(target.name)
    for stale in sorted(args.out.glob("*.json")):
        if stale.name not in written:
            stale.unlink()

    print(f"{len(cases)} cases from {len(patients)} patients -> {args.out}")
    table = Counter(" + ".join(s) or "none" for _, s in cases)
    print(f"{'stratum (additions)':32} cases")
    for s in STRATA:
        key = " + ".join(s) or "none"
        print(f"{key:32} {table[key]:5}")
    kinds = Counter()
    for case, _ in cases:
        for k, n in case["additions"].items():
            kinds[k] += n > 0
            kinds[f"{k}>=2"] += n >= 2
    print("cases with each addition: " + ", ".join(f"{k} {kinds[k]} (>=2: {kinds[k + '>=2']})" for k in KINDS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
