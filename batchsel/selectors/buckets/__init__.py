"""Cost-balanced batches for examples of different sizes: per-example costs
(:mod:`~batchsel.selectors.buckets.costs`), the bucketing kernels
(:mod:`~batchsel.selectors.buckets.kernels`), :class:`~batchsel.BucketSelector` (token-budget
batches of similar cost, balanced across ranks) and :class:`~batchsel.CostGroupedSelector`
(another selector's batches regrouped by cost)."""
