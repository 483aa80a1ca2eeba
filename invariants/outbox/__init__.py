"""The outbox's record and its rules: ``record`` (the record, its fields and invariants)."""
