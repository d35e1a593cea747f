"""Streaming selection: sieve-streaming (Badanidiyuru, Mirzasoleiman, Karbasi, Krause, KDD 2014).

One pass over chunks of an ``.npy`` file, a memmap or any iterator of arrays, in memory
O(k d) plus one chunk; apricot calls it ``partial_fit``. The best sieve is a
``(1/2 - eps)``-approximation of the best k rows of the stream; ``refine=True`` (default)
runs lazy greedy on the union of the sieves' rows at the end. Feature-based functions are
exact; facility location is evaluated against a reference sample
(:class:`ReferenceFacilityLocation`). Resumable through ``state_dict``.

The estimator (:mod:`~batchsel.submodular.streaming.sieve_streaming`) keeps its sieves in
:mod:`~batchsel.submodular.streaming.sieves`, scores rows with an objective of
:mod:`~batchsel.submodular.streaming.scoring` through the compiled loops of
:mod:`~batchsel.submodular.streaming.kernels`, and reads its rows through
:mod:`~batchsel.submodular.streaming.chunks`.

The method and its measurements: docs/guide/streaming.md.
"""

from batchsel.submodular.streaming.chunks import DEFAULT_CHUNK_ROWS, read_npy_chunks
from batchsel.submodular.streaming.scoring import METRICS, ReferenceFacilityLocation
from batchsel.submodular.streaming.sieve_streaming import DEFAULT_REFERENCE_SIZE, OBJECTIVES, SieveStreaming

__all__ = [
    "SieveStreaming",
    "ReferenceFacilityLocation",
    "read_npy_chunks",
    "OBJECTIVES",
    "METRICS",
    "DEFAULT_CHUNK_ROWS",
    "DEFAULT_REFERENCE_SIZE",
]
