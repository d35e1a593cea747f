"""Epoch plans (every rank's batches of an epoch: :mod:`~batchsel.plans.plan`), their files,
reports (:mod:`~batchsel.plans.report`) and plots (:mod:`~batchsel.plans.plotting`); the
public names are exported by :mod:`batchsel`."""
