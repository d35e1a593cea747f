"""The training loop's side: the batch sampler (the DistributedSampler contract), feedback
exchange across ranks, prefetching, batches from a stream (``stream``), candidate filters,
the irreducible-loss model and the graph-regularized loss.

Imports torch only where a module needs it (the sampler, the losses).
"""
