"""Submodular set functions and their maximizers: greedy optimizers, GreeDi, sieve
streaming and submodular partitioning.

Set functions live in :mod:`batchsel.submodular.functions`, apart from the optimizers that
maximize them (:mod:`batchsel.submodular.optimizers`), as in apricot; the public names are
exported by :mod:`batchsel`.
"""
