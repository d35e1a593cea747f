"""Irreducible losses for RHO-LOSS (Mindermann et al., ICML 2022).

A small model *not* trained on an example gives its irreducible loss; ``training loss -
irreducible loss`` is the reducible loss the filter ranks by. :class:`IrreducibleLoss` fits
that model on embeddings (k-NN, logistic regression or an MLP), cross-fitted so that no
example is lost to a holdout (or on a holdout, as in the paper), corrects for class priors
and reports how decisive and how accurate it is.

The estimator is in ``irreducible_loss``; its parts are this package's other modules: the
split into folds (``folds``), fitting a fold's model (``models``, the torch ones in ``net``)
and reading its class probabilities (``outcomes``).
The models, the guard and the measurements: docs/design/irreducible.md.
"""

from batchsel.loop.irreducible.irreducible_loss import IrreducibleLoss
from batchsel.loop.irreducible.models import MODELS
from batchsel.loop.irreducible.outcomes import DECISIVE_RATIO

__all__ = ["IrreducibleLoss", "MODELS", "DECISIVE_RATIO"]
