"""Verification: schemes and their semantics, columnar batches, grouping rows into batches,
the Engine that routes each batch to a backend, calibration, start-up self-test, and the
CPU reference verifiers that define every verdict."""
