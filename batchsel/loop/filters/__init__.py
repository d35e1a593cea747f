"""Online batch selection inside the training loop: score a candidate batch, train on the best B.

The sampler yields ``ratio x B`` candidates, the loop runs a no-grad forward on them and
:class:`CandidateFilter` returns the positions of the B to train on: by training loss
(Loshchilov & Hutter 2015), a gradient-norm bound (Katharopoulos & Fleuret 2018), RHO-LOSS's
reducible loss (Mindermann et al. 2022) or Selective-Backprop's loss percentile (Jiang et al.
2019), optionally diverse (facility location) and mixed with a uniform share. Every rank
filters its own candidates and keeps as many as the others, so DDP stays in lock-step.

The filter is in ``candidate_filter``; its parts are this package's other modules: the input
checks (``checks``), the selection rules (``rules``), the diversity pick (``diversity``),
RHO-LOSS's irreducible term and guard (``rho``), the checkpoint (``state``) and the torch
path for logits on an accelerator (``device``).
The scores, the RHO-LOSS guard, costs and measurements: docs/design/filters.md.
"""

from batchsel.core.state import STATE_VERSION as STATE_VERSION
from batchsel.loop.filters.candidate_filter import SCORES, CandidateFilter
from batchsel.loop.filters.rules import PICKS as PICKS  # (the module's constants before it was a package)
from batchsel.selectors.scores import gradnorm_scores, loss_scores

__all__ = ["CandidateFilter", "loss_scores", "gradnorm_scores", "SCORES"]
