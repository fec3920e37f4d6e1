"""With Anthropic prompt caching on, a patient's cases run next to each other.

The prompt cache keeps a prefix for 5 minutes after its last read: a patient's record pasted
by several tasks (and every repeat of a case) is read from the cache only when those requests
come within minutes of each other. pytest runs items in collection order (task by task); this
plugin reorders the eval items so each patient's items (every task, case and repeat) are
together, in the order the patients first appear, keeping the order within a patient and the
place of every other item. Under xdist each eval item also gets an ``xdist_group`` mark named
after its patient, so ``-n N --dist loadgroup`` (pytest-xdist's public grouping) sends a
patient's items to one worker, where its first request writes the record and the others wait
for it (``run/prompt_cache.PrefixGate``). The patient is read from the case id
(``run/prompt_cache.patient_key``); only the order depends on it.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_groundeval.pytest.items import case_ref
from pytest_groundeval.run.prompt_cache import patient_key


def caches_prompts(spec: Any) -> bool:
    """Does this session's agent ask Anthropic to cache prompts (``--no-prompt-cache`` not given)?"""
    if not spec.prompt_cache:
        return False
    return spec.name == "claude" or (spec.name == "langgraph" and (spec.model or "anthropic:").startswith("anthropic:")
                                     and not spec.base_url)


def by_patient(items: list[Any]) -> list[Any]:
    """``items`` with each patient's eval items together, at the place of its first one."""
    slots: list[Any] = []
    groups: dict[str, list[Any]] = {}
    for item in items:
        ref = case_ref(item)
        if ref is None:
            slots.append(item)
            continue
        key = patient_key(ref.case_id)
        if key not in groups:
            groups[key] = []
            slots.append(groups[key])
        groups[key].append(item)
    return [x for slot in slots for x in (slot if isinstance(slot, list) else [slot])]


class PatientGroup:
    @pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks (--dist loadgroup)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if getattr(config, "workerinput", None) is None:
            return
        for item in items:
            ref = case_ref(item)
            if ref is not None and item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(name=patient_key(ref.case_id)))


class PatientSequence:
    @pytest.hookimpl(trylast=True)  # after -k / -m and the sharder chose the selection
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = by_patient(items)


def register_patient_order(config: pytest.Config, spec: Any) -> None:
    if caches_prompts(spec):
        config.pluginmanager.register(PatientGroup(), "groundeval-patient-group")
        config.pluginmanager.register(PatientSequence(), "groundeval-patient-order")
