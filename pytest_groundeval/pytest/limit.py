"""``--groundeval-limit N``: the first N eval cases of each task (the seed's ``--limit N``).

After ``-k`` / ``-m`` and the shard chose the run's selection, each task keeps its first N eval
items in collection order (the order its cases are listed: by case id); the others are
deselected through pytest's own ``pytest_deselected`` hook, so the record says the run is a
subset and how many were left out. Every process that collects (an xdist worker too) computes
the same items. Items that are not eval cases are left alone.
"""

from __future__ import annotations

import pytest


class Limit:
    """Registered (``plugin.py``) in every process of a session run with ``--groundeval-limit``."""

    froze = False  # (plugin.py asks every groundeval plugin whether it froze the collector)

    def __init__(self, n: int) -> None:
        self.n = n

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        from pytest_groundeval.pytest.items import case_ref

        seen: dict[str, int] = {}
        dropped = set()
        for item in items:
            ref = case_ref(item)
            if ref is None:
                continue
            seen[ref.task] = seen.get(ref.task, 0) + 1
            if seen[ref.task] > self.n:
                dropped.add(id(item))
        if dropped:
            config.hook.pytest_deselected(items=[item for item in items if id(item) in dropped])
            items[:] = [item for item in items if id(item) not in dropped]


def register_limit(config: pytest.Config, n: int | None) -> None:
    if n is not None:
        config.pluginmanager.register(Limit(n), "groundeval-limit")
