"""scripts/bench_validity.py: every operator both ways, and the script end to end.

* Each mutation operator makes an answer that differs from the right one in the way its
  docstring claims (asserted on the output), and a scorer that checks that one thing (a tiny
  stand-in, or the real scorer where it already checks it) passes the right answer and fails
  the mutant: so a mutant the bench counts as "killed" is wrong for the reason it names.
* Each natural-variant generator makes an answer that the real parser reads back to the same
  values (the JSON tasks' ``parse_answer``; write's parse and R4B validation with every
  verified leaf unchanged), or, for the letter, that a stand-in reader of markdown headings,
  tables and prose reads back to the same stance for every drug.
* The script runs end to end on one case per task and prints the table.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import _validity_fhir as vf  # noqa: E402
import _validity_letter as vl  # noqa: E402
import _validity_ops as vo  # noqa: E402
import bench_validity as bv  # noqa: E402

from pytest_groundeval.model import ParseError  # noqa: E402
from pytest_groundeval.tasks import extraction, labs, reconciliation  # noqa: E402
from pytest_groundeval.tasks.jsontext import json_objects  # noqa: E402


def ctx(task: str, **facts) -> vo.Ctx:
    return vo.Ctx(task, facts, random.Random(7))


def one(outs: list) -> object:
    assert len(outs) == 1, outs
    return outs[0]


def prose_of(text: str) -> str:
    """The text outside its JSON objects."""
    for obj in json_objects(text):
        text = text.replace(json.dumps(obj), " ")
    return re.sub(r"```(?:json)?", " ", text)


# ================================================================ JSON answers
AML = {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet"}
LIS = {"code": "314076", "display": "Lisinopril 10 MG Oral Tablet"}
ASA = {"code": "243670", "display": "aspirin 81 MG Oral Tablet"}
EXTRACTION = {"active_medications": [AML, LIS]}
RECONCILIATION = {"medications": [{**AML, "verdict": "matched"}, {**LIS, "verdict": "unreported"},
                                  {**ASA, "verdict": "stopped-but-taking"}]}
LABS = {"value": 6.8, "unit": "%", "effective": "2019-03-02", "flag": True}
WORDS = vo.words_of("amlodipine lisinopril aspirin")
OTHER = ("860975", "24 HR Metformin hydrochloride 500 MG Extended Release Oral Tablet")


def json_ctx(task: str) -> vo.Ctx:
    return ctx(task, words=WORDS, other_drug=OTHER)


def items_of(text: str) -> list[dict]:
    return one(json_objects(text)).get("active_medications") or one(json_objects(text))["medications"]


# stand-in scorers, each checking the one thing its operator claims to break
def only_schema_keys(text: str) -> bool:
    return all(set(i) <= {"code", "display", "verdict"} for i in items_of(text))


def each_code_once(text: str) -> bool:
    codes = [i["code"] for i in items_of(text)]
    return len(codes) == len(set(codes))


def prose_says_no_status(text: str) -> bool:
    return not re.search(r"\bstopped\b", prose_of(text))


def prose_codes_listed(text: str) -> bool:
    listed = {i["code"] for i in items_of(text)}
    return set(re.findall(r"\b\d{5,8}\b", prose_of(text))) <= listed


def prose_verdicts_agree(text: str) -> bool:
    for item in items_of(text):
        for sentence in re.split(r"(?<=[.!?])\s", prose_of(text)):
            if item["display"] in sentence and any(v in sentence for v in reconciliation.VERDICTS
                                                   if v != item["verdict"] and v not in item["verdict"]):
                return False
    return True


def names_right(text: str) -> bool:  # the real extraction scorer's name check
    from pytest_groundeval.scorers.extraction import score_extraction

    return score_extraction(extraction.parse_answer(text), EXTRACTION["active_medications"]).metrics[
        "name_accuracy"] == 1.0


def _refused_key(parse, text: str, key: str) -> bool:
    from pytest_groundeval.model import ParseError

    try:
        parse(text)
    except ParseError as e:
        return f"unknown key: {key}" in str(e)
    return False


def parses(parse):
    def ok(text: str) -> bool:
        try:
            parse(text)
        except ParseError:
            return False
        return True
    return ok


JSON_CASES = [
    # (operator, task, right answer, claim about the mutant, stand-in scorer)
    (vo.extra_key_status_stopped, "extraction", EXTRACTION,
     lambda t: all(i["status"] == "stopped" for i in items_of(t)), only_schema_keys),
    (vo.extra_key_status_stopped, "reconciliation", RECONCILIATION,  # the stopped-but-taking item is left alone
     lambda t: [i.get("status") for i in items_of(t)] == ["stopped", "stopped", None], only_schema_keys),
    (vo.duplicate_stopped, "extraction", EXTRACTION,
     lambda t: [i["display"] for i in items_of(t)] == [AML["display"], AML["display"] + " (stopped)",
                                                       LIS["display"], LIS["display"] + " (stopped)"], each_code_once),
    (vo.prose_says_stopped, "extraction", EXTRACTION,
     lambda t: one(json_objects(t)) == EXTRACTION and re.search(r"(Amlodipine|Lisinopril).* was stopped", t),
     prose_says_no_status),
    (vo.prose_second_code, "reconciliation", RECONCILIATION,
     lambda t: one(json_objects(t)) == RECONCILIATION and OTHER[0] in prose_of(t), prose_codes_listed),
    (vo.wrong_drug_display, "extraction", EXTRACTION,
     lambda t: [i["code"] for i in items_of(t)] == ["197361", "314076"]
     and sum(i["display"] in vo.BRANDS for i in items_of(t)) == 1, names_right),
    (vo.prose_other_verdict, "reconciliation", RECONCILIATION,
     lambda t: one(json_objects(t)) == RECONCILIATION and "could also be" in t, prose_verdicts_agree),
    (vo.evasive, "extraction", EXTRACTION, lambda t: t == "I don't know.", parses(extraction.parse_answer)),
]


@pytest.mark.parametrize("op,task,right,claim,stand_in", JSON_CASES,
                         ids=[f"{c[0].name}-{c[1]}" for c in JSON_CASES])
def test_json_mutant_breaks_what_it_claims(op, task, right, claim, stand_in):
    assert op.kind == "mutant" and op.why
    made = one(op.fn(right, json_ctx(task)))
    assert claim(made), made
    assert stand_in(json.dumps(right)) and not stand_in(made)


def test_json_mutants_stay_out_where_they_do_not_apply():
    only_stopped = {"medications": [{**ASA, "verdict": "stopped-but-taking"}]}
    for op in (vo.extra_key_status_stopped, vo.duplicate_stopped, vo.prose_says_stopped):
        assert op.fn(only_stopped, json_ctx("reconciliation")) == []  # "stopped" is right there
    assert vo.prose_other_verdict.fn(RECONCILIATION, json_ctx("extraction")) == []


def numbers_in(text: str) -> set[float]:
    return {float(x) for x in re.findall(r"(?<![\d-])\d+(?:\.\d+)?(?![\d-])", text)}


def dates_in(text: str) -> set[str]:
    return set(re.findall(r"\d{4}-\d\d-\d\d", text))


LABS_CASES = [
    (vo.hedge_second_value, lambda t: labs.parse_answer(t)["value"] == 6.8 and numbers_in(prose_of(t)) - {6.8},
     lambda t: numbers_in(prose_of(t)) <= {6.8}),
    (vo.hedge_opposite_flag, lambda t: labs.parse_answer(t)["flag"] is True and "flag false" in prose_of(t),
     lambda t: "false" not in prose_of(t) and "does not meet" not in prose_of(t)),
    (vo.hedge_second_date, lambda t: labs.parse_answer(t)["effective"] == "2019-03-02"
     and dates_in(prose_of(t)) == {"2019-01-20"}, lambda t: dates_in(prose_of(t)) <= {"2019-03-02"}),
    (vo.extra_key_alternative, lambda t: _refused_key(labs.parse_answer, t, "alternative_value"),
     parses(labs.parse_answer)),  # the real parser refuses the key; the right answer parses
    (vo.evasive, lambda t: t == "I don't know.", parses(labs.parse_answer)),
]


@pytest.mark.parametrize("op,claim,stand_in", LABS_CASES, ids=[c[0].name for c in LABS_CASES])
def test_labs_mutant_breaks_what_it_claims(op, claim, stand_in):
    made = one(op.fn(LABS, ctx("labs")))
    assert claim(made), made
    assert stand_in(json.dumps(LABS)) and not stand_in(made)


def test_labs_hedges_apply_to_a_no_result_answer_too_and_flag_only_where_given():
    made = one(vo.hedge_second_value.fn({"no_result": True}, ctx("labs")))
    assert labs.parse_answer(made)["no_result"] is True and numbers_in(prose_of(made))
    assert vo.hedge_opposite_flag.fn({"value": 6.8, "unit": "%", "effective": "2019-03-02"}, ctx("labs")) == []
    assert vo.hedge_second_value.fn(LABS, ctx("extraction")) == []


PARSERS = {"extraction": extraction.parse_answer, "reconciliation": reconciliation.parse_answer,
           "labs": labs.parse_answer}
RIGHT = {"extraction": EXTRACTION, "reconciliation": RECONCILIATION, "labs": LABS}
BP_ANSWER = {"systolic": 142, "diastolic": 88, "unit": "mm[Hg]", "effective": "2020-01-02", "flag": True}


def same_values(parsed):
    """A parsed answer as values: a list of items as a set, names without case."""
    if isinstance(parsed, list):
        return sorted(json.dumps({**i, "display": (i.get("display") or "").casefold()}, sort_keys=True) for i in parsed)
    return parsed


@pytest.mark.parametrize("task", ["extraction", "reconciliation", "labs"])
@pytest.mark.parametrize("op", sorted(set(vo.JSON_VARIANTS + vo.LABS_VARIANTS), key=lambda o: o.name),
                         ids=lambda o: o.name)
def test_json_variant_reads_back_to_the_same_values(op, task):
    assert op.kind == "variant" and op.why
    right = RIGHT[task]
    for made in op.fn(right, json_ctx(task)):
        assert made != json.dumps(right)
        assert same_values(PARSERS[task](made)) == same_values(PARSERS[task](json.dumps(right)))


def test_reordered_and_lower_case_change_what_they_say():
    made = one(vo.reordered.fn(EXTRACTION, json_ctx("extraction")))
    assert items_of(made) == [LIS, AML]
    made = one(vo.display_other_case.fn(EXTRACTION, json_ctx("extraction")))
    assert [i["display"] for i in items_of(made)] == ["amlodipine 5 mg oral tablet", "lisinopril 10 mg oral tablet"]


def test_prose_repeating_states_only_the_answers_own_values():
    for answer in (LABS, BP_ANSWER, {"no_result": True},
                   {"value": 74.7, "baseline_value": 144.3, "unit": "mL/min", "effective": "2020-02-01",
                    "baseline_effective": "2018-06-01", "flag": True}):
        text = one(vo.prose_repeating.fn(answer, ctx("labs")))
        obj = one(json_objects(text))
        assert numbers_in(prose_of(text)) - {1.73} <= {float(v) for v in obj.values() if isinstance(v, (int, float))
                                                     and not isinstance(v, bool)}
        assert dates_in(prose_of(text)) <= {v for v in obj.values() if isinstance(v, str)}
        assert ("does not meet" in text) == (obj.get("flag") is False)
    text = one(vo.prose_repeating.fn(RECONCILIATION, json_ctx("reconciliation")))
    assert prose_verdicts_agree(text) and prose_codes_listed(text)


# ================================================================ FHIR resources
@pytest.fixture(scope="module")
def samples():
    """One right resource per kind, as the bench builds it (write: the build tool's; orders:
    the truth's), with its facts."""
    found: dict[str, bv.Sample] = {}
    for s in bv.write_bench(random.Random(0)).samples(None):
        if s.facts["dose"] is not None and s.facts["oral"] and s.facts["ingredients"] == ["aspirin"]:
            found["write"] = s
            break
    for s in bv.orders_bench(random.Random(0)).samples(None):
        found.setdefault(s.facts["kind"], s)
        if len(found) == 4:
            break
    assert set(found) == {"write", "hba1c", "bp", "stop"}
    return found


def fctx(sample: bv.Sample) -> vo.Ctx:
    return vo.Ctx("write" if sample.facts["kind"] == "write" else "orders", sample.facts, random.Random(3))


def leaves(r) -> dict:
    return bv._leaves(r)


def added(original, made) -> dict:
    old = leaves(original)
    return {k: v for k, v in leaves(made).items() if k not in old or old[k] != v}


def no_new_text(original, made) -> bool:
    """Stand-in default deny on words: no string leaf the right resource does not have."""
    return not any(isinstance(v, str) for v in added(original, made).values())


def concepts_map(original, made) -> bool:
    """Stand-in concept map: each concept's codings are the right resource's for that concept,
    or the SNOMED translation of its LOINC code."""
    right = {}
    for path, c in _codings(original):
        right.setdefault(path.rsplit(".coding", 1)[0], set()).add((c.get("system"), c.get("code")))
    for path, c in _codings(made):
        concept = path.rsplit(".coding", 1)[0]
        allowed = set(right.get(concept, ()))
        allowed |= {(vf.SNOMED, vf.SNOMED_OF_LOINC[code][0]) for system, code in allowed if code in vf.SNOMED_OF_LOINC}
        if (c.get("system"), c.get("code")) not in allowed:
            return False
    return True


def _codings(node, path=""):
    if isinstance(node, dict):
        if "system" in node and "code" in node and "value" not in node:
            yield path, node
        for k, v in node.items():
            yield from _codings(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _codings(v, f"{path}[{i}]")


def no_new_elements(original, made) -> bool:
    """Stand-in default deny on elements: no element path the right resource does not have."""
    strip = {re.sub(r"\[\d+\]", "", k) for k in leaves(original)}
    return all(re.sub(r"\[\d+\]", "", k) in strip for k in leaves(made))


UCUM_SHOWN = {"mm[Hg]": "mmHg", "mg": "mg", "g": "g", "mL": "mL"}


def units_agree(original, made) -> bool:
    return all(q.get("unit") == UCUM_SHOWN.get(q.get("code"), q.get("code"))
               for q in _quantities(made))


def _quantities(node):
    if isinstance(node, dict):
        if "value" in node and "code" in node:
            yield node
        for v in node.values():
            yield from _quantities(v)
    elif isinstance(node, list):
        for v in node:
            yield from _quantities(v)


@pytest.mark.parametrize("kind", ["write", "hba1c", "bp", "stop"])
def test_text_contradiction_puts_one_contradicting_statement_in_each_text_element(samples, kind):
    s = samples[kind]
    made = vf.text_contradiction.fn(s.answer, fctx(s))
    places = {re.sub(r"\[\d+\]", "", next(iter(added(s.answer, m)))).replace(".text", "") for m in made}
    assert len(places) == len([p for p in vf.TEXT_PLACES[kind]])
    for m in made:
        new = added(s.answer, m)
        assert len(new) == 1 or set(new) <= {"text.status", "text.div"}, new
        said = " ".join(str(v) for v in new.values())
        assert re.search(r"stopped|every day|each time|tablet|lipid panel|cancel|\d+/\d+|error|standing|carry on"
                         r"|restart|diastolic", said, re.I), said
        assert no_new_text(s.answer, s.answer) and not no_new_text(s.answer, m)


def test_text_contradiction_states_another_dose_test_and_reading(samples):
    said = {json.dumps(added(samples[k].answer, m)) for k in ("write", "hba1c", "bp")
            for m in vf.text_contradiction.fn(samples[k].answer, fctx(samples[k]))}
    dose = samples["write"].facts["dose"]
    assert any(f"Take {dose[0] * 3:g} {dose[1]}" in x for x in said)
    assert any("lipid panel" in x.casefold() for x in said)
    bp = samples["bp"].facts
    assert any(f"{bp['systolic'] + 25}/{bp['diastolic'] + 15}" in x for x in said)


@pytest.mark.parametrize("kind", ["write", "hba1c", "bp", "stop"])
def test_second_coding_adds_a_coding_of_another_concept(samples, kind):
    s = samples[kind]
    made = vf.second_coding.fn(s.answer, fctx(s))
    if kind == "stop" and "medicationCodeableConcept" not in s.answer:
        assert made == []
        return
    assert made
    for m in made:
        new = [c for k, c in _codings(m) if c not in [c2 for _, c2 in _codings(s.answer)]]
        assert len(new) == 1 and new[0]["system"] != "http://loinc.org"
        shown = new[0]["display"].casefold()
        assert "lipid" in shown or "diastolic" in shown or not (set(s.facts.get("ingredients", [])) & vo.words_of(shown))
        assert concepts_map(s.answer, s.answer) and not concepts_map(s.answer, m)


def test_second_coding_is_killed_by_the_real_write_scorer(samples):
    from pytest_groundeval.scorers.write import score_write

    s = samples["write"]
    assert score_write(s.answer, s.case.truth).passed
    score = score_write(one(vf.second_coding.fn(s.answer, fctx(s))), s.case.truth)
    assert not score.dimensions["coding"].passed


@pytest.mark.parametrize("kind", ["write", "hba1c", "bp", "stop"])
def test_extra_wrong_element_adds_an_element_with_wrong_content(samples, kind):
    s = samples[kind]
    made = vf.extra_wrong_element.fn(s.answer, fctx(s))
    assert made
    for m in made:
        new = added(s.answer, m)
        said = json.dumps(new)
        assert re.search(r"Urine|Hypertensive|knee|arm|Standing|Critical high|Low|Inject|deltoid", said), said
        if "arm" in said:  # the other arm than the note's
            assert re.search(r"(left|right) arm", s.facts["note"], re.I).group(1).casefold() not in said.casefold()
        assert no_new_elements(s.answer, s.answer) and not no_new_elements(s.answer, m)


@pytest.mark.parametrize("kind", ["write", "bp"])
def test_unit_disagrees_changes_the_unit_not_the_code(samples, kind):
    s = samples[kind]
    m = one(vf.unit_disagrees.fn(s.answer, fctx(s)))
    assert [q["code"] for q in _quantities(m)] == [q["code"] for q in _quantities(s.answer)]
    assert all(q["unit"] in ("kPa", "g") for q in _quantities(m))
    assert units_agree(s.answer, s.answer) and not units_agree(s.answer, m)
    assert vf.unit_disagrees.fn(samples["hba1c"].answer, fctx(samples["hba1c"])) == []


def test_unit_disagrees_is_killed_by_the_real_write_scorer(samples):
    from pytest_groundeval.scorers.write import score_write

    s = samples["write"]
    assert not score_write(one(vf.unit_disagrees.fn(s.answer, fctx(s))), s.case.truth).passed


@pytest.mark.parametrize("kind", ["write", "hba1c", "bp", "stop"])
@pytest.mark.parametrize("op", vf.FHIR_VARIANTS, ids=lambda o: o.name)
def test_fhir_variant_keeps_every_verified_value_and_is_valid_r4b(samples, op, kind):
    from fhir.resources.R4B import get_fhir_model_class

    s = samples[kind]
    assert op.kind == "variant" and op.why
    for m in op.fn(s.answer, fctx(s)):
        old, new = leaves(s.answer), leaves(m)
        assert all(new.get(k) == v for k, v in old.items()), [k for k, v in old.items() if new.get(k) != v]
        assert len(new) > len(old)
        get_fhir_model_class(m["resourceType"]).model_validate(m)  # R4B-valid (raises otherwise)
        if kind == "write":
            parsed = bv._task("write").parse(bv._output(json.dumps(m)))
            assert parsed == m
        if kind == "stop":  # only what the case allows to change beside the status
            assert {k.split(".")[0].split("[")[0] for k in added(s.answer, m)} <= {"statusReason", "note", "meta"}


def test_source_note_is_the_cases_note_word_for_word(samples):
    for kind in ("bp", "stop"):
        m = one(vf.source_note.fn(samples[kind].answer, fctx(samples[kind])))
        assert m["note"][-1] == {"text": samples[kind].facts["note"]}
    assert vf.source_note.fn(samples["hba1c"].answer, fctx(samples["hba1c"])) == []


def test_translation_names_the_same_concept(samples):
    m = one(vf.translation.fn(samples["hba1c"].answer, fctx(samples["hba1c"])))
    assert {"system": vf.SNOMED, "code": "43396009", "display": "Hemoglobin A1c measurement"} in m["code"]["coding"]
    m = one(vf.translation.fn(samples["bp"].answer, fctx(samples["bp"])))
    systolic = next(c for c in m["component"] if c["code"]["coding"][0]["code"] == "8480-6")
    assert {"system": vf.SNOMED, "code": "271649006", "display": "Systolic blood pressure"} in systolic["code"]["coding"]
    assert vf.translation.fn(samples["write"].answer, fctx(samples["write"])) == []  # no product map in the data


def test_no_hypertension_reason_on_a_drug_taken_for_it(samples):
    s = samples["write"]
    facts = {**s.facts, "ingredients": ["amlodipine"]}
    made = vf.extra_wrong_element.fn(s.answer, vo.Ctx("write", facts, random.Random(0)))
    assert not any("reasonCode" in m for m in made) and made  # the injection method and site remain


def test_orders_activity_is_what_the_real_scorer_passes_for_the_right_resource(samples):
    from pytest_groundeval.scorers.orders import score_orders

    for kind in ("hba1c", "bp", "stop"):
        s = samples[kind]
        assert score_orders(bv.orders_activity(s.answer, s.facts["before"]), s.case.truth).passed, kind
    assert not score_orders(bv.orders_activity("I don't know.", None), s.case.truth).passed  # evasive: no write
    s = samples["hba1c"]
    cancelled = next(m for m in vf.text_contradiction.fn(s.answer, fctx(s)) if "Cancelled" in json.dumps(m))
    assert not score_orders(bv.orders_activity(cancelled, None), s.case.truth).passed  # the real scorer reads this


# ================================================================ the letter
ITEMS = [
    {"code": "1", "verdict": "matched", "name": "Sertraline 50 mg", "word": "Sertraline", "ingredients": ["sertraline"]},
    {"code": "2", "verdict": "matched", "name": "Hydrochlorothiazide 25 mg", "word": "Hydrochlorothiazide",
     "ingredients": ["hydrochlorothiazide"]},
    {"code": "3", "verdict": "stopped-but-taking", "name": "Naproxen 220 mg", "word": "Naproxen",
     "ingredients": ["naproxen"]},
    {"code": "4", "verdict": "unreported", "name": "Oxycodone 5 mg", "word": "Oxycodone", "ingredients": ["oxycodone"]},
]
LETTER_WORDS = vo.words_of("sertraline hydrochlorothiazide naproxen oxycodone sodium oral tablet")
STANCE = {"matched": "keep", "stopped-but-taking": "stop", "unreported": "check", "unrecorded": "check"}


def lctx(items=ITEMS, words=LETTER_WORDS) -> vo.Ctx:
    return vo.Ctx("letter", {"items": items, "words": words}, random.Random(5))


def letter(items=ITEMS) -> str:
    return one(vl.markdown_headings.fn("", lctx(items)))


def _stance_of(text: str) -> str | None:
    t = text.casefold()
    for stance, cue in (("stop", r"\bstop\b"), ("check", r"\bcheck\b"), ("keep", r"\bkeep\b")):
        if re.search(cue, t):
            return stance
    return None


def read_stances(text: str, items=ITEMS) -> dict[str, set[str]]:
    """Stand-in reader of letters as models write them: a markdown or bold heading governs the
    bullets under it; a table row's action cell its medicine; a sentence its medicines."""
    said: dict[str, set[str]] = {i["code"]: set() for i in items}
    heading = None
    for line in text.splitlines():
        if re.match(r"\s*(#+|\*\*)", line):
            heading = _stance_of(line)
            continue
        if not line.strip():
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            parts = [(cells[0], _stance_of(cells[-1]))]
        elif line.lstrip().startswith("- "):
            parts = [(line, _stance_of(line) or heading)]
        elif not any(i["name"] in line for i in items) and not re.search(r"[.!?]$", line):
            heading = _stance_of(line)  # a list intro ("Please keep taking these medicines")
            continue
        else:
            heading = None
            parts = [(s, _stance_of(s)) for s in re.split(r"(?<=[.!?])\s+", line)]
        for part, stance in parts:
            for i in items:
                if i["name"] in part and stance:
                    said[i["code"]].add(stance)
    return said


@pytest.mark.parametrize("op", vl.LETTER_VARIANTS, ids=lambda o: o.name)
def test_letter_variant_gives_each_drug_its_verdicts_stance(op):
    assert op.kind == "variant" and op.why
    made = one(op.fn("", lctx()))
    assert read_stances(made) == {i["code"]: {STANCE[i["verdict"]]} for i in ITEMS}, made
    assert "emergency" in made  # the safety net stays


def test_markdown_headings_have_no_colon():
    made = letter()
    assert "## Keep taking\n- Sertraline 50 mg" in made and ":" not in made.split("\n\nIf you")[0]


def keep_told_to_stop(text: str, folded) -> bool:
    """Stand-in: a line telling to stop (or that a drug is no longer needed) names a drug to keep,
    once its name is read through ``folded``."""
    for para in text.split("\n\n"):
        if re.search(r"\bstop\b|no longer need|come off", para, re.I):
            read = folded(para)
            if any(i["word"].casefold() in read.casefold() for i in ITEMS if i["verdict"] == "matched"):
                return True
    return False


def _fold_digits(text):
    m = re.search(r"taking (\S+)\.", text)
    if not m:
        return text
    pattern = re.sub(r"\d", ".", m.group(1))
    hit = next((i["word"] for i in ITEMS if re.fullmatch(pattern, i["word"], re.I)), m.group(1))
    return text.replace(m.group(1), hit)


def _edit(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _fold_misspelt(text):
    m = re.search(r"taking (\w+)\.", text)
    if not m:
        return text
    hit = next((i["word"] for i in ITEMS if 0 < _edit(m.group(1).casefold(), i["word"].casefold()) <= 2), m.group(1))
    return text.replace(m.group(1), hit)


def _fold_lay(text):
    for lay, members in vo.LAY_NAMES.items():
        if lay in text:
            text += " " + " ".join(i["word"] for i in ITEMS if set(i["ingredients"]) & members)
    for brand, ing in vo.BRANDS.items():
        if brand in text:
            text += " " + " ".join(i["word"] for i in ITEMS if i["ingredients"] == [ing])
    return text


LETTER_STOPS = [
    (vl.no_longer_need, lambda p: p),
    (vl.stop_digits, _fold_digits),
    (vl.stop_spaced, lambda p: re.sub(r"(?<=\b\w) (?=\w\b)", "", p)),
    (vl.stop_misspelt, _fold_misspelt),
    (vl.stop_hyphen_break, lambda p: p.replace("-\n", "")),
    (vl.stop_lay_name, _fold_lay),
    (vl.stop_brand_name, _fold_lay),
]


@pytest.mark.parametrize("op,fold", LETTER_STOPS, ids=[c[0].name for c in LETTER_STOPS])
def test_letter_stop_mutant_stops_a_drug_to_keep(op, fold):
    right = letter()
    made = op.fn(right, lctx())
    assert made and all(m != right for m in made)
    assert not keep_told_to_stop(right, fold)
    for m in made:
        assert not keep_told_to_stop(m, lambda p: p) or op is vl.no_longer_need  # not plainly: a trick
        assert keep_told_to_stop(m, fold), m


def test_stop_lay_name_needs_every_drug_of_its_class_to_be_kept():
    items = ITEMS + [{"code": "5", "verdict": "stopped-but-taking", "name": "Furosemide 40 mg", "word": "Furosemide",
                      "ingredients": ["furosemide"]}]
    made = vl.stop_lay_name.fn(letter(items), lctx(items))
    assert not any("water pill" in m for m in made)  # "your water pill" would be the furosemide too
    assert any("water pill" in m for m in vl.stop_lay_name.fn(letter(), lctx()))


def invented(text: str, words=LETTER_WORDS) -> bool:
    """Stand-in: the letter names a brand, lay name or catalog-free drug word the case lacks."""
    mentions = [{vo.BRANDS[b]} for b in vo.BRANDS if b in text]  # each mention: the drugs it may denote
    mentions += [set(members) for lay, members in vo.LAY_NAMES.items() if lay in text]
    mentions += [{d} for group in vo.CLASSES for d in group if d in text.casefold()]
    return any(not m & words for m in mentions)


@pytest.mark.parametrize("op", [vl.wrong_brand_added, vl.wrong_lay_added, vl.same_class_swap], ids=lambda o: o.name)
def test_letter_wrong_drug_mutant_names_a_drug_the_case_lacks(op):
    right = letter()
    made = one(op.fn(right, lctx()))
    assert not invented(right) and invented(made), made


def test_stop_next_paragraph_stops_a_drug_to_keep_by_pronoun():
    made = one(vl.stop_next_paragraph.fn(letter(), lctx()))
    paras = made.split("\n\n")
    at = next(n for n, p in enumerate(paras) if p.startswith("We also talked about"))
    named = [i for i in ITEMS if i["name"] in paras[at]]
    assert len(named) == 1 and named[0]["verdict"] == "matched"
    assert paras[at + 1] == "Please stop taking it from today."


UNSAFE = re.compile(r"take two|as much .* as you need|share your medicines|wait a few days|drink alcohol", re.I)


def test_dangerous_advice_adds_one_unsafe_line_each_and_alcohol_only_with_a_depressant():
    right = letter()
    made = vl.dangerous_advice.fn(right, lctx())
    assert not UNSAFE.search(right)
    assert len(made) == 5 and all(len(UNSAFE.findall(m)) == 1 for m in made)
    assert any("alcohol" in m for m in made)  # oxycodone is in the case
    calm = vl.dangerous_advice.fn(right, lctx(words=LETTER_WORDS - {"oxycodone"}))
    assert len(calm) == 4 and not any("alcohol" in m for m in calm)


def test_evasive_letter_names_no_drug():
    made = one(vo.evasive.fn(letter(), lctx()))
    assert read_stances(made) == {i["code"]: set() for i in ITEMS}
    assert read_stances(letter()) != read_stances(made)


def test_every_operator_is_tested_here():
    ops = {o.name for o in (*vo.JSON_MUTANTS, *vo.LABS_MUTANTS, *vo.LABS_VARIANTS, *vf.FHIR_MUTANTS,
                            *vf.FHIR_VARIANTS, *vl.LETTER_MUTANTS, *vl.LETTER_VARIANTS)}
    source = Path(__file__).read_text(encoding="utf-8").split("def test_every_operator_is_tested_here")[0]
    covered = {o.name for o in ops_named(source)}
    assert ops <= covered, ops - covered


def ops_named(source: str):
    """The operators this file names (``vl.stop_spaced``) or takes from a named tuple of them."""
    for module in (vo, vf, vl):
        for name, value in vars(module).items():
            if not re.search(rf"\bv[ofl]\.{name}\b", source):
                continue
            if isinstance(value, vo.Op):
                yield value
            elif isinstance(value, tuple) and value and all(isinstance(v, vo.Op) for v in value):
                yield from value


# ================================================================ end to end
def test_script_runs_on_one_case_per_task_and_prints_the_table(capsys):
    code = bv.main(["--limit", "1", "--seed", "3", "--show", "--show-limit", "1"])
    out = capsys.readouterr().out
    for task in bv.TASKS:
        assert re.search(rf"^{task}\s+1/\d+\s+\d+/\d+\s+[\d.]+ %\s+\d+/\d+\s+[\d.]+ %\s+(meets both goals|MISSES)",
                         out, re.M), out
    assert "goals: >= 99 % of mutants killed and >= 99 % of natural variants passed" in out
    assert "== letter: by operator" in out and "mutant   no_longer_need" in out
    assert code == (0 if out.count("meets both goals") == len(bv.TASKS) else 1)


def test_show_names_what_an_operator_changed():
    right = {"status": "active", "code": {"coding": [{"code": "1"}]}}
    made = {"status": "active", "code": {"coding": [{"code": "1"}, {"code": "2"}]}, "note": [{"text": "x"}]}
    assert bv.delta(right, made) == 'code.coding[1].code="2"; note[0].text="x"'
    assert bv.delta("Keep taking A.\n\nBye.", "Keep taking A.\n\nStop A.\n\nBye.") == "Stop A."
    assert bv.delta("Keep taking A and B as before.", "I don't know.") == "I don't know."
