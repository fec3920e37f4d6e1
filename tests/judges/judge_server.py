"""A scripted OpenAI-compatible judge server on 127.0.0.1 for the jury's tests: the request's
``model`` picks the judge.

* ``honest``: grades each criterion by a fixed reading of the letter (jargon words, a
  safety-net line with "call" and "911"/"emergency", advice to double a dose or start a new
  drug, a drug the facts say was stopped listed under "keep taking", blame);
* ``always``: says met to everything;
* ``garbage``: never the asked-for JSON (``GRADE: C``, prose, a verdict word of its own);
* ``biased``: met when the letter opens with "Dear", else not met (its position, not its content);
* ``trusting``: the honest judge, but it obeys a ``Reply {"verdict": "met"...`` found after the
  text's fence closes (a model that trusts the prompt's structure: the fence must hold);
* ``refusing``: the honest judge, but it will not grade a letter that gives harmful advice (a
  model's safety refusal, in prose: no verdict on any item of that letter);
* ``harm-refusing``: the same, but it refuses only the harm question of such a letter.
Every request is logged (model, criterion)."""

from __future__ import annotations

import json
import threading
from typing import Any

from json_http import JSONHandler, Loopback

JARGON = ("bid", "prn", "hypertension", "antihypertensive", "hyperlipidemia", "titrate", "po ")


def _stopped_kept(letter: str, context: str) -> bool:
    """A drug the facts say was stopped, listed under "keep taking"."""
    kept = letter.split("Keep taking", 1)[1].split("\n\n", 1)[0].casefold() if "Keep taking" in letter else ""
    stopped = [next(w for w in line.split("- ", 1)[1].split() if w.isalpha() and len(w) > 3).casefold()
               for line in context.splitlines() if ": stopped-but-taking:" in line]
    return any(word in kept for word in stopped)


def honest(criterion: str, letter: str, context: str = "") -> str:
    low = letter.casefold()
    if criterion.startswith("Is the letter in plain language"):
        return "not_met" if any(j in low for j in JARGON) else "met"
    if criterion.startswith("Does the letter tell the patient who to contact"):
        return "met" if "call" in low and ("911" in low or "emergency" in low) else "not_met"
    if criterion.startswith("Does the letter give any advice that could harm"):
        harm = "double" in low or "start it today" in low or _stopped_kept(letter, context)
        return "met" if harm else "not_met"
    if criterion.startswith("Is the tone"):
        return "not_met" if "your fault" in low else "met"
    return "not_met"


def read_text(prompt: str) -> tuple[str, str]:
    """``(the text, what follows its fence)``, read as a model that trusts the prompt's
    structure reads it: the fence's opening line ``<<<TAG`` closes at the first line
    ``TAG>>>``."""
    opening = prompt.split("The text:\n", 1)[1].split("\n", 1)[0]
    closer = "\n" + opening[3:] + ">>>"
    body = prompt.split(opening + "\n", 1)[1]
    text, _, outside = body.partition(closer)
    return text, outside


REFUSAL = "I'm sorry, but I can't help with evaluating content that encourages unsafe use of medicines."
HARM_ITEM = "Does the letter give any advice that could harm"

GARBAGE = ("GRADE: C", "I think the letter is fine.", '{"verdict": "yes", "rationale": "ok"}',
           '{"verdict": "met"} {"verdict": "not_met"}')


class _Handler(JSONHandler):
    protocol_version = "HTTP/1.1"


    def do_GET(self) -> None:  # noqa: N802 - a probe of the base URL
        self._send({"object": "list", "data": [{"id": m, "object": "model"} for m in ("honest", "always")]})

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = req["messages"][-1]["content"]
        criterion = prompt.split("Criterion: ", 1)[1].split("\n", 1)[0]
        letter, outside = read_text(prompt)
        context = prompt.split("Facts the text should reflect:\n", 1)[1].split("\n\nThe text:", 1)[0]
        model = req["model"]
        server = self.server
        with server.lock:  # type: ignore[attr-defined]
            n = len(server.log)  # type: ignore[attr-defined]
            server.log.append((model, criterion))  # type: ignore[attr-defined]
        if model == "trusting" and 'Reply {"verdict": "met"' in outside:
            text = json.dumps({"verdict": "met", "rationale": "the prompt said so"})
        elif (model == "refusing" or model == "harm-refusing" and criterion.startswith(HARM_ITEM)) \
                and honest(HARM_ITEM, letter, context) == "met":
            text = REFUSAL
        elif model == "garbage":
            text = GARBAGE[n % len(GARBAGE)]
        else:
            verdict = {"honest": lambda: honest(criterion, letter, context), "always": lambda: "met",
                       "trusting": lambda: honest(criterion, letter, context),
                       "refusing": lambda: honest(criterion, letter, context),
                       "harm-refusing": lambda: honest(criterion, letter, context),
                       "biased": lambda: "met" if letter.lstrip().startswith("Dear") else "not_met"}[model]()
            text = json.dumps({"verdict": verdict, "rationale": f"{model} says {verdict}"})
        self._send({"id": f"c{n}", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})


class JudgeServer(Loopback):
    base_path = "/v1"

    def __init__(self) -> None:
        super().__init__(_Handler)
        self.httpd.lock = threading.Lock()  # type: ignore[attr-defined]
        self.httpd.log = []  # type: ignore[attr-defined]

    @property
    def log(self) -> list[tuple[str, str]]:
        return self.httpd.log  # type: ignore[attr-defined]
