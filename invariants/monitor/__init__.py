"""The monitor's record and its rules: ``record`` (the record, its fields and invariants),
``messages`` (the notifications and receiver answers it accepts)."""
