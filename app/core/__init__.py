"""The bottom floor: vocabulary every other part of zapverify shares, importing nothing else
from ``app`` (docs/architecture.md, "Layout"): the scheme registry (:mod:`.schemes`), items and
columnar batches (:mod:`.batch`), signature encodings (:mod:`.encoding`) and the error
hierarchy (:mod:`.errors`)."""
