"""Checks of a data set before training: near-duplicate removal (:mod:`~batchsel.data.dedup`)
and the data audit (:mod:`~batchsel.data.audit`); the public names are exported by
:mod:`batchsel`."""
