"""The Engine that routes each batch to a backend, and its start-up work: grouping rows into
batches, calibration, the known-answer self-test, fault injection and the status it shows.
The CPU reference verifiers it checks backends against live in :mod:`app.engine.reference`."""
