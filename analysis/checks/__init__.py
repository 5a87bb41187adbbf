"""Checks of fresh results against references: `regress` (CI bands and invariants against a
baseline) and `reproduce` (bit for bit)."""
