"""The bottom floor: vocabulary every other part of zapverify shares, importing nothing else
from ``app`` (docs/architecture.md, "Layout"): the scheme registry (:mod:`.schemes`), items and
columnar batches (:mod:`.batch`), what a backend returns for a batch (:mod:`.result`),
signature encodings (:mod:`.encoding`), byte counts for people (:mod:`.units`), the error
hierarchy (:mod:`.errors`) and the Merkle leaf and inclusion check that server and client share
(:mod:`.commitment`)."""
