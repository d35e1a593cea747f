"""The bottom floor: what every other floor uses and nothing here imports from above.

Argument checks (:mod:`~batchsel.core.checks`), file reading and atomic writing
(:mod:`~batchsel.core.io`), resume state, the counter-based RNG, heaps, graph utilities,
BLAS thread control, and the :class:`~batchsel.core.communicator.Communicator` protocol that
the distributed code is written against.
"""
