"""The pytest layer: options, collection and items, fixtures, the evaluator (worker side), the controller-only reporter, shards."""
