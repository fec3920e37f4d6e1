"""Build the letter reader's drug lexicon: brand names and lay / class names of the drugs the
site catalog and the Synthea bundles carry.

(Brand words that are also common first names or surnames, "Allegra", "Bayer", are left out:
a letter addressed to one would name a drug.)

Usage::

    uv run python scripts/make_drug_lexicon.py \\
        --catalog fixtures/terminology/rxnorm.json \\
        --catalog ../shared/data/groundeval-seed/terminology/rxnorm_medications.json \\
        --bundles fixtures/synthea --bundles ../shared/data/groundeval-seed/synthea \\
        --out pytest_groundeval/scorers/drug_lexicon.json

(those are the defaults, resolved against the repository root; a missing source is skipped
with a note on stderr).

The catalog's displays name ingredients and a few brands; patients and models also write
brands the catalog lacks ("Coumadin", "Lipitor") and lay or class names ("your water pill",
"your blood thinner", "statin"). :data:`BRANDS` and :data:`CLASSES` below are the hand-kept
knowledge (US brand names; lay and pharmacological class names); the script keeps every class
and brand whose ingredients it can name in the reader's own words (``scorers/drugtext.read``
of the catalog's displays), adds the ingredient words of the catalog and the bundles that no
class lists (so a reader knows them as drugs), and writes them sorted:

* ``brands``: brand word -> its ingredient words (a brand of a product the data have, or of a
  drug outside them: naming it names a drug the record may not have);
* ``classes``: class phrase -> the ingredient words of the class (a class word names every
  recorded drug of the class; a class named by a dose form, "inhaler", also every ingredient of
  the data's products of that form: :data:`FORM_CLASSES`);
* ``drugs``: every ingredient word known (the data's, and the classes' members outside them);
* ``words``: English words never read as a misspelt drug (:data:`WORDS`, and the words of the
  ``--prose`` files, default the frozen word list ``scripts/drug_lexicon_words.txt`` and the calibration letters, within two edits of a name).

Deterministic: the same inputs give the same bytes. Ingredient words of the data that no
class lists are reported on stderr (a prompt to extend :data:`CLASSES`, not an error).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.scorers import drugtext  # noqa: E402
from pytest_groundeval.tasks.letter import record_medications  # noqa: E402

# brand -> ingredient words (as the catalog's tokenizer reads the ingredient's name)
BRANDS: dict[str, tuple[str, ...]] = {
    "coumadin": ("warfarin",), "jantoven": ("warfarin",), "plavix": ("clopidogrel",), "effient": ("prasugrel",),
    "eliquis": ("apixaban",), "xarelto": ("rivaroxaban",), "pradaxa": ("dabigatran",), "lovenox": ("enoxaparin",),
    "lipitor": ("atorvastatin",), "zocor": ("simvastatin",), "crestor": ("rosuvastatin",), "pravachol": ("pravastatin",),
    "mevacor": ("lovastatin",), "norvasc": ("amlodipine",), "zestril": ("lisinopril",), "prinivil": ("lisinopril",),
    "cozaar": ("losartan",), "lopressor": ("metoprolol",), "toprol": ("metoprolol",), "microzide": ("hydrochlorothiazide",),
    "lasix": ("furosemide",), "bumex": ("bumetanide",), "demadex": ("torsemide",), "capoten": ("captopril",),
    "calan": ("verapamil",), "isoptin": ("verapamil",), "lanoxin": ("digoxin",), "cordarone": ("amiodarone",),
    "pacerone": ("amiodarone",), "nitrostat": ("nitroglycerin",), "glucophage": ("metformin",),
    "zoloft": ("sertraline",), "prozac": ("fluoxetine",), "lexapro": ("escitalopram",), "advil": ("ibuprofen",),
    "motrin": ("ibuprofen",), "aleve": ("naproxen",), "naprosyn": ("naproxen",), "anaprox": ("naproxen",),
    "tylenol": ("acetaminophen",), "panadol": ("acetaminophen",), "ecotrin": ("aspirin",),
    "valium": ("diazepam",), "klonopin": ("clonazepam",), "xanax": ("alprazolam",), "ativan": ("lorazepam",),
    "ambien": ("zolpidem",), "aricept": ("donepezil",), "namenda": ("memantine",),
    "namzaric": ("donepezil", "memantine"), "razadyne": ("galantamine",), "cognex": ("tacrine",),
    "ventolin": ("albuterol",), "proair": ("albuterol",), "proventil": ("albuterol",),
    "advair": ("fluticasone", "salmeterol"), "flovent": ("fluticasone",), "flonase": ("fluticasone",),
    "zyloprim": ("allopurinol",), "colcrys": ("colchicine",), "deltasone": ("prednisone",),
    "cortef": ("hydrocortisone",), "augmentin": ("amoxicillin", "clavulanate"), "amoxil": ("amoxicillin",),
    "ceftin": ("cefuroxime",), "ceclor": ("cefaclor",), "macrobid": ("nitrofurantoin",),
    "macrodantin": ("nitrofurantoin",), "pyridium": ("phenazopyridine",), "zyrtec": ("cetirizine",),
    "claritin": ("loratadine",), "benadryl": ("diphenhydramine",),
    "unisom": ("doxylamine",), "robitussin": ("dextromethorphan",), "ritalin": ("methylphenidate",),
    "concerta": ("methylphenidate",), "oxycontin": ("oxycodone",), "roxicodone": ("oxycodone",),
    "percocet": ("oxycodone", "acetaminophen"), "norco": ("hydrocodone", "acetaminophen"),
    "vicodin": ("hydrocodone", "acetaminophen"), "demerol": ("meperidine",), "ultram": ("tramadol",),
    "trexall": ("methotrexate",), "fosamax": ("alendronic",), "epipen": ("epinephrine",),
    "nicorette": ("nicotine",), "nicoderm": ("nicotine",), "sandimmune": ("cyclosporine",),
    "neoral": ("cyclosporine",), "lupron": ("leuprolide",), "taxotere": ("docetaxel",), "eloxatin": ("oxaliplatin",),
    "hismanal": ("astemizole",), "seldane": ("terfenadine",), "activase": ("alteplase",),
    "humulin": ("insulin",), "novolin": ("insulin",), "lantus": ("insulin",), "humalog": ("insulin",),
    "novolog": ("insulin",), "synthroid": ("levothyroxine",), "prilosec": ("omeprazole",), "nexium": ("esomeprazole",),
    "neurontin": ("gabapentin",), "lyrica": ("pregabalin",), "flomax": ("tamsulosin",),
    # more of the most prescribed US brands: heart and blood pressure
    "coreg": ("carvedilol",), "tenormin": ("atenolol",), "inderal": ("propranolol",), "zebeta": ("bisoprolol",),
    "bystolic": ("nebivolol",), "diovan": ("valsartan",), "benicar": ("olmesartan",), "avapro": ("irbesartan",),
    "micardis": ("telmisartan",), "atacand": ("candesartan",), "altace": ("ramipril",), "vasotec": ("enalapril",),
    "lotensin": ("benazepril",), "accupril": ("quinapril",), "procardia": ("nifedipine",), "adalat": ("nifedipine",),
    "cardizem": ("diltiazem",), "aldactone": ("spironolactone",), "hygroton": ("chlorthalidone",),
    "hyzaar": ("losartan", "hydrochlorothiazide"), "lotrel": ("amlodipine", "benazepril"),
    "exforge": ("amlodipine", "valsartan"), "entresto": ("sacubitril", "valsartan"),
    "dyazide": ("triamterene", "hydrochlorothiazide"), "maxzide": ("triamterene", "hydrochlorothiazide"),
    "catapres": ("clonidine",), "cardura": ("doxazosin",), "hytrin": ("terazosin",), "apresoline": ("hydralazine",),
    "imdur": ("isosorbide",), "ranexa": ("ranolazine",), "brilinta": ("ticagrelor",), "multaq": ("dronedarone",),
    "zetia": ("ezetimibe",), "tricor": ("fenofibrate",), "lopid": ("gemfibrozil",), "livalo": ("pitavastatin",),
    "lescol": ("fluvastatin",), "savaysa": ("edoxaban",),
    # diabetes
    "januvia": ("sitagliptin",), "janumet": ("sitagliptin", "metformin"), "jardiance": ("empagliflozin",),
    "farxiga": ("dapagliflozin",), "invokana": ("canagliflozin",), "victoza": ("liraglutide",),
    "ozempic": ("semaglutide",), "trulicity": ("dulaglutide",), "mounjaro": ("tirzepatide",),
    "amaryl": ("glimepiride",), "glucotrol": ("glipizide",), "actos": ("pioglitazone",), "levemir": ("insulin",),
    "tresiba": ("insulin",), "toujeo": ("insulin",), "basaglar": ("insulin",), "apidra": ("insulin",),
    # lungs and allergy
    "singulair": ("montelukast",), "spiriva": ("tiotropium",), "symbicort": ("budesonide", "formoterol"),
    "pulmicort": ("budesonide",), "qvar": ("beclomethasone",), "xopenex": ("levalbuterol",),
    "atrovent": ("ipratropium",), "combivent": ("ipratropium", "albuterol"), "breo": ("fluticasone", "vilanterol"),
    "xyzal": ("levocetirizine",), "clarinex": ("desloratadine",), "nasonex": ("mometasone",),
    "mucinex": ("guaifenesin",), "sudafed": ("pseudoephedrine",),
    # mind and nerves
    "wellbutrin": ("bupropion",), "effexor": ("venlafaxine",), "cymbalta": ("duloxetine",), "paxil": ("paroxetine",),
    "celexa": ("citalopram",), "remeron": ("mirtazapine",), "desyrel": ("trazodone",), "elavil": ("amitriptyline",),
    "pamelor": ("nortriptyline",), "abilify": ("aripiprazole",), "seroquel": ("quetiapine",),
    "zyprexa": ("olanzapine",), "risperdal": ("risperidone",), "haldol": ("haloperidol",), "lamictal": ("lamotrigine",),
    "depakote": ("divalproex",), "keppra": ("levetiracetam",), "tegretol": ("carbamazepine",),
    "dilantin": ("phenytoin",), "topamax": ("topiramate",), "imitrex": ("sumatriptan",), "buspar": ("buspirone",),
    "restoril": ("temazepam",), "lunesta": ("eszopiclone",), "adderall": ("amphetamine",),
    "vyvanse": ("lisdexamfetamine",), "strattera": ("atomoxetine",), "sinemet": ("carbidopa", "levodopa"),
    "requip": ("ropinirole",), "mirapex": ("pramipexole",), "exelon": ("rivastigmine",), "chantix": ("varenicline",),
    # pain, muscles, joints
    "celebrex": ("celecoxib",), "mobic": ("meloxicam",), "voltaren": ("diclofenac",), "flexeril": ("cyclobenzaprine",),
    "robaxin": ("methocarbamol",), "dilaudid": ("hydromorphone",), "duragesic": ("fentanyl",),
    "suboxone": ("buprenorphine", "naloxone"), "narcan": ("naloxone",), "plaquenil": ("hydroxychloroquine",),
    "uloric": ("febuxostat",), "medrol": ("methylprednisolone",),
    # stomach, thyroid, bladder, bones, hormones, infections
    "protonix": ("pantoprazole",), "pepcid": ("famotidine",), "zantac": ("ranitidine",), "prevacid": ("lansoprazole",),
    "aciphex": ("rabeprazole",), "zofran": ("ondansetron",), "reglan": ("metoclopramide",), "imodium": ("loperamide",),
    "levoxyl": ("levothyroxine",), "unithroid": ("levothyroxine",), "cytomel": ("liothyronine",),
    "detrol": ("tolterodine",), "ditropan": ("oxybutynin",), "vesicare": ("solifenacin",), "proscar": ("finasteride",),
    "avodart": ("dutasteride",), "boniva": ("ibandronate",), "actonel": ("risedronate",), "evista": ("raloxifene",),
    "premarin": ("estrogens",), "provera": ("medroxyprogesterone",), "keflex": ("cephalexin",),
    "zithromax": ("azithromycin",), "cipro": ("ciprofloxacin",), "levaquin": ("levofloxacin",),
    "bactrim": ("sulfamethoxazole", "trimethoprim"), "flagyl": ("metronidazole",), "diflucan": ("fluconazole",),
    "valtrex": ("valacyclovir",), "tamiflu": ("oseltamivir",), "viagra": ("sildenafil",), "cialis": ("tadalafil",),
}

_OPIOIDS = ("codeine", "hydrocodone", "oxycodone", "meperidine", "tramadol", "morphine", "fentanyl",
            "hydromorphone", "methadone", "tapentadol", "buprenorphine")
_BENZOS = ("diazepam", "clonazepam", "alprazolam", "lorazepam", "temazepam", "chlordiazepoxide")
_STATINS = ("atorvastatin", "simvastatin", "simvistatin", "rosuvastatin", "pravastatin", "lovastatin", "fluvastatin",
            "pitavastatin")
_DIURETICS = ("furosemide", "hydrochlorothiazide", "bumetanide", "torsemide", "chlorthalidone", "spironolactone",
              "indapamide", "triamterene")
_ANTIDEPRESSANTS = ("sertraline", "fluoxetine", "escitalopram", "citalopram", "paroxetine", "venlafaxine", "duloxetine",
                    "bupropion", "mirtazapine", "trazodone", "amitriptyline", "nortriptyline")
_THYROID = ("levothyroxine", "liothyronine")
_DIABETES_ORAL = ("metformin", "glipizide", "glimepiride", "glyburide", "sitagliptin", "empagliflozin", "dapagliflozin",
                  "canagliflozin", "pioglitazone")
_HEART = ("digoxin", "amiodarone", "metoprolol", "verapamil", "nitroglycerin", "carvedilol", "isosorbide", "ranolazine",
          "dronedarone")
_PPI = ("omeprazole", "esomeprazole", "pantoprazole", "lansoprazole", "rabeprazole")
_SEIZURE = ("levetiracetam", "lamotrigine", "phenytoin", "carbamazepine", "topiramate", "divalproex", "valproate")
# inhaled drugs ("your inhaler", "puffer"); the script adds every ingredient of the data's inhaler products
_INHALED = ("albuterol", "levalbuterol", "fluticasone", "budesonide", "beclomethasone", "mometasone", "salmeterol",
            "formoterol", "vilanterol", "tiotropium", "ipratropium", "umeclidinium")
_ANTICOAGULANTS = ("warfarin", "heparin", "apixaban", "rivaroxaban", "dabigatran", "edoxaban", "enoxaparin")
_ANTIPLATELETS = ("clopidogrel", "prasugrel", "ticagrelor", "aspirin")
_BP = ("amlodipine", "lisinopril", "losartan", "metoprolol", "captopril", "verapamil", "hydrochlorothiazide",
       "furosemide", "valsartan", "ramipril", "enalapril", "atenolol", "carvedilol", "nifedipine", "diltiazem",
       "chlorthalidone", "spironolactone")
_NSAIDS = ("ibuprofen", "naproxen", "aspirin", "diclofenac", "celecoxib", "meloxicam")
_PAIN = _NSAIDS + ("acetaminophen",) + _OPIOIDS
_ANTIBIOTICS = ("amoxicillin", "ampicillin", "penicillin", "cefaclor", "cefuroxime", "nitrofurantoin", "clavulanate",
                "doxycycline", "azithromycin", "ciprofloxacin", "cephalexin", "clarithromycin")
_ANTIHISTAMINES = ("cetirizine", "loratadine", "fexofenadine", "diphenhydramine", "chlorpheniramine", "doxylamine",
                   "astemizole", "terfenadine")
_DEMENTIA = ("donepezil", "galantamine", "memantine", "tacrine", "rivastigmine")
_STEROIDS = ("prednisone", "hydrocortisone", "fluticasone", "prednisolone", "dexamethasone", "methylprednisolone")
_SEDATIVES = _BENZOS + ("zolpidem", "diphenhydramine", "doxylamine")
_CONTRACEPTIVES = ("levonorgestrel", "norethindrone", "norgestimate", "ethinyl", "mestranol", "norethynodrel",
                   "dienogest", "etonogestrel", "norelgestromin", "medroxyprogesterone", "drospirenone", "camila",
                   "errin", "jolivette", "levora", "norinyl", "yaz", "estrostep", "cyclen", "liletta", "mirena",
                   "nuvaring")

# lay and class phrase -> ingredient words (a phrase is read with "s" for the plural too)
CLASSES: dict[str, tuple[str, ...]] = {
    "water pill": _DIURETICS, "water tablet": _DIURETICS, "diuretic": _DIURETICS, "fluid pill": _DIURETICS,
    "blood thinner": _ANTICOAGULANTS + _ANTIPLATELETS, "blood-thinner": _ANTICOAGULANTS + _ANTIPLATELETS,
    "anticoagulant": _ANTICOAGULANTS, "antiplatelet": _ANTIPLATELETS,
    "statin": _STATINS, "cholesterol pill": _STATINS, "cholesterol medicine": _STATINS,
    "cholesterol medication": _STATINS, "cholesterol tablet": _STATINS,
    "blood pressure pill": _BP, "blood pressure medicine": _BP, "blood pressure medication": _BP,
    "blood pressure tablet": _BP, "bp pill": _BP, "bp medicine": _BP,
    "beta blocker": ("metoprolol", "atenolol", "carvedilol", "propranolol", "bisoprolol"),
    "ace inhibitor": ("lisinopril", "captopril", "ramipril", "enalapril"),
    "calcium channel blocker": ("amlodipine", "verapamil", "nifedipine", "diltiazem"),
    "heart pill": _HEART,
    "nitro": ("nitroglycerin",), "nitro spray": ("nitroglycerin",),
    "painkiller": _PAIN, "pain killer": _PAIN, "pain pill": _PAIN, "pain medicine": _PAIN,
    "pain medication": _PAIN, "pain reliever": _PAIN, "nsaid": _NSAIDS, "anti-inflammatory": _NSAIDS,
    "opioid": _OPIOIDS, "narcotic": _OPIOIDS, "opiate": _OPIOIDS,
    "benzodiazepine": _BENZOS, "benzo": _BENZOS, "nerve pill": _BENZOS, "anxiety pill": _BENZOS,
    "anxiety medicine": _BENZOS, "sleeping pill": _SEDATIVES, "sleeping tablet": _SEDATIVES, "sleep aid": _SEDATIVES,
    "sedative": _SEDATIVES, "tranquilizer": _BENZOS, "tranquilliser": _BENZOS,
    "antidepressant": _ANTIDEPRESSANTS, "depression pill": _ANTIDEPRESSANTS, "depression medicine": _ANTIDEPRESSANTS,
    "diabetes pill": _DIABETES_ORAL, "diabetes medicine": _DIABETES_ORAL + ("insulin",),
    "diabetes medication": _DIABETES_ORAL + ("insulin",), "sugar pill": _DIABETES_ORAL,
    "blood sugar pill": _DIABETES_ORAL, "blood sugar medicine": _DIABETES_ORAL + ("insulin",),
    "heart medicine": _HEART, "heart medication": _HEART, "heart tablet": _HEART,
    "reflux medicine": _PPI, "reflux pill": _PPI, "acid reflux pill": _PPI, "acid reflux medicine": _PPI,
    "proton pump inhibitor": _PPI, "ppi": _PPI,
    "seizure medicine": _SEIZURE, "seizure pill": _SEIZURE, "seizure medication": _SEIZURE,
    "epilepsy medicine": _SEIZURE, "anticonvulsant": _SEIZURE,
    "bladder pill": ("oxybutynin", "tolterodine", "solifenacin"),
    "prostate pill": ("tamsulosin", "finasteride", "dutasteride"),
    "bone pill": ("alendronic", "ibandronate", "risedronate"),
    "osteoporosis pill": ("alendronic", "ibandronate", "risedronate"),
    "antipsychotic": ("aripiprazole", "quetiapine", "olanzapine", "risperidone", "haloperidol"),
    "anxiety medication": _BENZOS + ("buspirone",), "sleep medicine": _SEDATIVES, "sleeping medicine": _SEDATIVES,
    "gout pill": ("allopurinol", "colchicine"), "gout medicine": ("allopurinol", "colchicine"),
    "antibiotic": _ANTIBIOTICS, "antihistamine": _ANTIHISTAMINES, "allergy pill": _ANTIHISTAMINES,
    "allergy medicine": _ANTIHISTAMINES, "allergy tablet": _ANTIHISTAMINES,
    "memory pill": _DEMENTIA, "memory medicine": _DEMENTIA, "dementia medicine": _DEMENTIA,
    "steroid": _STEROIDS, "blue inhaler": ("albuterol",), "reliever inhaler": ("albuterol",),
    "rescue inhaler": ("albuterol",), "brown inhaler": ("fluticasone",), "preventer inhaler": ("fluticasone",),
    "birth control": _CONTRACEPTIVES, "contraceptive": _CONTRACEPTIVES,
    "iron pill": ("ferrous",), "iron tablet": ("ferrous",), "thyroid pill": _THYROID, "thyroid tablet": _THYROID,
    "thyroid medicine": _THYROID, "thyroid medication": _THYROID,
    "inhaler": _INHALED, "puffer": _INHALED, "asthma inhaler": _INHALED, "asthma medicine": _INHALED,
    "stomach pill": _PPI, "heartburn pill": _PPI, "heartburn medicine": _PPI,
    "nicotine patch": ("nicotine",), "chemo": ("docetaxel", "oxaliplatin", "methotrexate", "leucovorin"),
    "chemotherapy": ("docetaxel", "oxaliplatin", "methotrexate", "leucovorin"),
}


def _word(name: str) -> str:
    """An ingredient name as the reader reads it (one word)."""
    words = sorted(drugtext.read(name).names) or [name]
    if len(words) != 1:
        raise ValueError(f"{name!r} reads as {words}, not one drug word")
    return words[0]


def data_displays(catalogs: Iterable[Path], bundles: Iterable[Path]) -> list[str]:
    """Every display of the catalogs and of the bundles' medications."""
    displays: list[str] = []
    for path in catalogs:
        if not path.is_file():
            print(f"note: no catalog {path}, skipped", file=sys.stderr)
            continue
        displays += [e["display"] for e in json.loads(path.read_text(encoding="utf-8"))]
    for folder in bundles:
        if not folder.is_dir():
            print(f"note: no bundle folder {folder}, skipped", file=sys.stderr)
            continue
        for f in sorted(folder.glob("*.json")):
            displays += [m["display"] for m in record_medications(json.loads(f.read_text(encoding="utf-8")), str(f))]
    return displays


def data_ingredients(catalogs: Iterable[Path], bundles: Iterable[Path]) -> set[str]:
    """The ingredient words of every display of the catalogs and of the bundles' medications."""
    return {w for d in data_displays(catalogs, bundles) for w in drugtext.product(d).ingredients}


#: classes named by a dose form: each also names every ingredient of the data's products of that form
FORM_CLASSES = {"inhaler": "inhaler", "puffer": "inhaler", "asthma inhaler": "inhaler"}


def form_ingredients(displays: Iterable[str]) -> dict[str, set[str]]:
    """Dose form -> the ingredient words of the displays of that form ("inhaler": albuterol, ...)."""
    out: dict[str, set[str]] = {}
    for d in displays:
        prod = drugtext.product(d)
        for form in prod.reading.forms:
            out.setdefault(form, set()).update(prod.ingredients)
    return out


# English words a misspelling must never be read as a drug: common words of letters within two
# edits of a drug or brand name ("meantime" / memantine, "hearing" / heparin, "concerns" /
# Concerta); the script adds the words of the repository's own English prose (``--prose``) that
# are as near
WORDS = ("meantime", "hearing", "concern", "concerns", "concerned", "clarity", "accept", "accepted", "aspiring",
         "insult", "insults", "efficient", "activate", "ambient", "lyrics", "augmenting", "general", "vacuum",
         "marina", "camels", "levers", "insular", "dioxin", "warring", "percent", "fluorine", "morning",
         "attack", "attacks", "proven", "regain", "detail", "details", "ability", "restore", "desire", "dilating",
         "lesson", "victory", "singular", "spiral", "spirals")


def near_words(prose: str, names: Iterable[str]) -> set[str]:
    """The words of ``prose`` (six letters or more) a misspelling reader would fold into a name."""
    names = frozenset(names)
    words = {w.casefold() for w in re.findall(r"[A-Za-z]{6,}", prose)} - names
    return {w for w in words if drugtext.spelled_as(w, names) is not None}


def build(known: set[str], prose: str = "", forms: dict[str, set[str]] | None = None) -> dict[str, Any]:
    brands = {b: sorted({_word(i) for i in ings}) for b, ings in sorted(BRANDS.items())}
    classes = {c: sorted({_word(i) for i in ings} | (forms or {}).get(FORM_CLASSES.get(c, ""), set()))
               for c, ings in sorted(CLASSES.items())}
    drugs = sorted(known | {i for v in [*brands.values(), *classes.values()] for i in v})
    words = sorted((set(WORDS) | near_words(prose, [*drugs, *brands])) - set(drugs) - set(brands))
    unclassed = sorted(known - {i for v in classes.values() for i in v})
    if unclassed:
        print(f"note: ingredient words no class lists: {', '.join(unclassed)}", file=sys.stderr)
    return {"about": "brand and lay/class names of drugs; built by scripts/make_drug_lexicon.py",
            "brands": brands, "classes": classes, "drugs": drugs, "words": words}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--catalog", action="append", type=Path)
    ap.add_argument("--bundles", action="append", type=Path)
    ap.add_argument("--prose", action="append", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "pytest_groundeval/scorers/drug_lexicon.json")
    args = ap.parse_args(argv)
    catalogs = args.catalog or [ROOT / "fixtures/terminology/rxnorm.json",
                                ROOT / "../shared/data/groundeval-seed/terminology/rxnorm_medications.json"]
    bundles = args.bundles or [ROOT / "fixtures/synthea", ROOT / "../shared/data/groundeval-seed/synthea"]
    # the frozen word list, not the docs themselves: editing a page must not change what a scorer accepts
    prose = args.prose or [ROOT / "scripts/drug_lexicon_words.txt", ROOT / "fixtures/letter_calibration/letters.json"]
    displays = data_displays(catalogs, bundles)
    lexicon = build({w for d in displays for w in drugtext.product(d).ingredients},
                    "\n".join(p.read_text(encoding="utf-8") for p in prose if p.is_file()), form_ingredients(displays))
    args.out.write_text(json.dumps(lexicon, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(lexicon['brands'])} brands, {len(lexicon['classes'])} classes, "
          f"{len(lexicon['drugs'])} drug words", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
