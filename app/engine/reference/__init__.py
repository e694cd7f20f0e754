"""The CPU reference: the library calls that define every verdict (:mod:`.reference`), BLS
batch verification by random linear combination (:mod:`.bls_batch`) and BLS aggregate
verification (:mod:`.bls_aggregate`), and the known answers every backend must reproduce
(:mod:`.kat`, ``known_answers.json``).  Below the backends and the engine: it imports only
:mod:`app.core` and :mod:`app.engine.commit` (an aggregate item's leaf)."""
