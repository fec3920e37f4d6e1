"""LangSmith: tracing and experiments, when ``LANGSMITH_API_KEY`` is set.

``worker.py`` acts where items run (datasets, experiments, each case's root run, examples,
per-case feedback); ``controller.py`` where the record is made (the run id for xdist
workers, experiment-level feedback and metadata, the record's ``langsmith``, the terminal);
``register.py`` gives a process its halves; ``common.py`` is what both share."""
