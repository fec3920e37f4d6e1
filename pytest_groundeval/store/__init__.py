"""Run records and journals on disk: reading, writing, redaction, merge, the run lock."""
