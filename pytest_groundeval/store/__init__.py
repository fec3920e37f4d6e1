"""Run records and journals on disk: the one reader (:func:`read`) and writer (:func:`write`),
the resume/rescore rule (``resume.py``), redaction, merge, the run lock."""

from pytest_groundeval.store.files import Journal, StoreError, read, read_record, write

__all__ = ["Journal", "StoreError", "read", "read_record", "write"]
