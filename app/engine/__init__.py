"""The in-process verification engine, one package per pipeline stage (docs/architecture.md):
host → memory → ingest → verify (backends, kernels) → commit → receipts, joined by
:mod:`app.engine.pipeline`.  Nothing here imports the web stack or :mod:`app.api`."""
