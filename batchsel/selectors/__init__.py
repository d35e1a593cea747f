"""Selectors: from embeddings, graphs and scores to each rank's batches (an EpochPlan)."""
from .base import RandomSelector, Selector

__all__ = ["Selector", "RandomSelector"]
