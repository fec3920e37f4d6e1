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
        self.closed = False
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
        """Each thread ends once the jobs queued before this are done (the first call only)."""
        if self.closed:
            return
        self.closed = True
        for _ in self._threads:
            self._queue.put(None)


class Prefetcher:
    """Keeps up to ``concurrency`` calls running for the next keys of the plan.

    The plan is the run order from the current item on, at most ``lookahead`` keys (so
    finished-but-unconsumed results stay bounded, and a stop wastes little). A finished
    call immediately starts the next planned one, so the pool never idles while the main
    thread is busy scoring and reporting an earlier item.
    """

    #: agent calls this fast gain nothing from threads (the GIL serialises the work around them)
    INSTANT_S = 0.002
    PROBE = 8

    def __init__(self, call: Callable[[Hashable], Any], concurrency: int, lookahead: int | None = None,
                 latency: Callable[[Any], float | None] | None = None) -> None:
        self.call = call
        self.latency = latency
        self._latencies: list[float] = []
        self.instant = False  # set once the first PROBE calls answered within INSTANT_S (median)
        self.window = concurrency
        self.lookahead = lookahead or 4 * concurrency
        self.pool = DaemonPool(concurrency)
        self.futures: dict[Hashable, Future] = {}
        self.plan: list[Hashable] = []
        self.in_flight = 0
        self.stopped = False
        self._lock = threading.RLock()

    @property
    def idle(self) -> bool:
        """The agent answered instantly and no call is left in flight or unconsumed: every
        call runs inline from now on, and no plan is needed."""
        return self.instant and not self.futures

    def advance(self, upcoming: Iterable[Hashable]) -> None:
        """Set the plan: the current key first, then the next keys in run order."""
        with self._lock:
            if self.stopped or self.idle:
                return
            self.plan = list(upcoming)[: self.lookahead]
            wanted = set(self.plan)
            for key in [k for k in self.futures if k not in wanted]:
                # no longer ours to run (e.g. xdist handed it to another worker): drop it
                self.futures.pop(key).cancel()
            self._fill()

    def _fill(self) -> None:  # with the lock held
        if self.instant:
            return
        for key in self.plan:
            if self.in_flight >= self.window:
                return
            if key not in self.futures:
                future = self.pool.submit(lambda key=key: self._timed(key))
                self.futures[key] = future
                self.in_flight += 1
                future.add_done_callback(self._finished)

    def _timed(self, key: Hashable) -> Any:
        value = self.call(key)
        seconds = self.latency(value) if self.latency is not None else None
        if seconds is not None:
            with self._lock:
                if len(self._latencies) < self.PROBE:
                    self._latencies.append(seconds)
                    # the median: one call delayed by a GIL switch must not hide an instant agent
                    if len(self._latencies) == self.PROBE and sorted(self._latencies)[self.PROBE // 2] < self.INSTANT_S:
                        self.instant = True  # no more launches: take() calls inline from now on
                        self.pool.shutdown()  # (its threads end once their running call is done)
        return value

    def _finished(self, future: Future) -> None:
        with self._lock:
            self.in_flight -= 1
            if not self.stopped:
                self._fill()

    def take(self, key: Hashable) -> Any:
        """The result for ``key``: waits for its prefetched call, or calls inline if none was launched."""
        if self.idle:
            return self.call(key)
        with self._lock:
            future = self.futures.pop(key, None)
            if key in self.plan:
                self.plan.remove(key)
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
