"""Agent calls run ahead of the pytest items, on a bounded pool of daemon threads.

pytest runs items one at a time; an eval is bound by model latency. The prefetcher keeps
up to N calls in flight for the items this process is about to run, in their run order,
while each item still scores and reports in collection order. It never launches a call
for an item that is not selected (``-k``/``-m`` act before it sees the items) and stops
launching once pytest wants to stop (``-x``/``--maxfail``, Ctrl-C, ``--max-cost``).
Threads are daemons, so an interrupted run exits without waiting for calls in flight.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Hashable, Iterable


class DaemonPool:
    def __init__(self, workers: int) -> None:
        self._queue: "queue.SimpleQueue[tuple[Future, Callable[[], Any]] | None]" = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, daemon=True, name=f"groundeval-{i}")
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            future, fn = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - delivered to whoever waits
                future.set_exception(exc)

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._queue.put((future, fn))
        return future

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)


class Prefetcher:
    """Launches ``call(key)`` for upcoming keys, at most ``window`` unconsumed at once."""

    def __init__(self, call: Callable[[Hashable], Any], concurrency: int) -> None:
        self.call = call
        self.window = concurrency
        self.pool = DaemonPool(concurrency)
        self.futures: dict[Hashable, Future] = {}
        self.stopped = False
        self._lock = threading.Lock()

    def advance(self, upcoming: Iterable[Hashable]) -> None:
        """Top the window up from ``upcoming``: the current key first, then the next keys in run
        order (a bounded list: at least ``window`` long when that many remain)."""
        upcoming = list(upcoming)
        with self._lock:
            if self.stopped:
                return
            wanted = set(upcoming)
            for key in [k for k in self.futures if k not in wanted]:
                # no longer ours to run (e.g. xdist handed it to another worker): drop it
                self.futures.pop(key).cancel()
            for key in upcoming:
                if len(self.futures) >= self.window:
                    break
                if key not in self.futures:
                    self.futures[key] = self.pool.submit(lambda key=key: self.call(key))

    def take(self, key: Hashable) -> Any:
        """The result for ``key``: waits for its prefetched call, or calls inline if none was launched."""
        with self._lock:
            future = self.futures.pop(key, None)
        if future is None:
            return self.call(key)
        return future.result()

    def stop(self) -> None:
        """No new launches; cancel calls not yet started (those running are abandoned)."""
        with self._lock:
            self.stopped = True
            for future in self.futures.values():
                future.cancel()
            self.futures.clear()
        self.pool.shutdown()
