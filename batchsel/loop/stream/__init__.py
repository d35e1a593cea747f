"""Batches chosen from a stream: :class:`~batchsel.loop.stream.stream.StreamBatches`, a
torch ``IterableDataset`` that reads a stream (shards, a Hugging Face
``IterableDataset``, a generator) in pools of a bounded size and makes each pool's
batches by a shuffle, loss-rank or InfoBatch-style skipping by example id, optionally
grouped by cost; split across ranks and DataLoader workers by shard; resumable mid-epoch
(torchdata's ``StatefulDataLoader`` included).

The parts: where examples come from and how readers split them
(:mod:`~batchsel.loop.stream.sources`), how a pool becomes batches
(:mod:`~batchsel.loop.stream.pools`), the dataset itself
(:mod:`~batchsel.loop.stream.stream`). Docs: guide/streaming.md.
"""

from batchsel.loop.stream.stream import StreamBatch, StreamBatches

__all__ = ["StreamBatch", "StreamBatches"]
