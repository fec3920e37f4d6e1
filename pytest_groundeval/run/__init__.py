"""Running cases as values: the runner (the only producer of results), the call policy, budget, prefetcher, cache, usage and prices."""
