"""A DataLoader ``collate_fn`` for variable-length examples: :func:`pad_collate` pads each
batch to its longest member and returns the mask of the real positions.

Batches of examples of similar length (:class:`~batchsel.BucketSelector`) waste little on
padding only if each batch is padded to its own longest member, not to a global maximum:
that is what this collate does. torch is imported when a batch is collated, so
``import batchsel`` stays light. The function is module-level, so it pickles for DataLoader
workers; settings go through :func:`functools.partial`.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

#: the key :func:`pad_collate` adds to dict batches (the tokenizers' name for it)
MASK_KEY = "attention_mask"


def _is_number(value: Any) -> bool:
    return isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, (str, bytes))


def _is_sequence(item: Any, dims: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)) -> bool:
    """Whether ``item`` is one example's sequence: a tensor or array with ``dims`` dimensions
    (more than one is refused later, naming the shape), or a list / tuple of numbers (an
    empty one included)."""
    import torch

    if isinstance(item, (torch.Tensor, np.ndarray)):
        return item.ndim in dims
    return isinstance(item, (list, tuple)) and all(_is_number(v) for v in item)


def _as_1d(item: Any, where: str, python_floats: Any = None) -> Any:
    """``item`` as a 1-D tensor (``ValueError`` naming ``where`` for any other shape); a
    list of Python floats takes ``python_floats`` as its dtype where one is given."""
    import torch

    if isinstance(item, torch.Tensor):
        tensor = item
    elif isinstance(item, np.ndarray):
        if item.dtype == object:
            raise TypeError(f"{where} is a numpy array of objects; pad_collate pads arrays of numbers")
        tensor = torch.as_tensor(item)
    elif isinstance(item, (list, tuple)) and all(_is_number(v) for v in item):
        tensor = torch.tensor(item) if item else torch.zeros(0, dtype=torch.long)
        if python_floats is not None and tensor.is_floating_point():
            tensor = torch.tensor(item, dtype=python_floats)
    else:
        raise TypeError(
            f"{where} is a {type(item).__name__}; pad_collate pads 1-D tensors, numpy arrays or lists of numbers"
        )
    if tensor.dim() != 1:
        raise ValueError(
            f"{where} has shape {tuple(tensor.shape)}; pad_collate pads 1-D sequences (one value per position)"
        )
    return tensor


def _pad(items: list[Any], pad_value: Any, where: str, always_checked: bool = True) -> tuple[Any, Any]:
    """``(padded [B, L], mask [B, L] bool)`` of the 1-D tensors ``items``. The pad value
    is checked against their dtype in every batch (so a bad one fails at the first, not at
    the first that needs padding), unless ``always_checked=False``: a later tuple element
    of one length (multi-hot labels) never takes it."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    dtype = items[0].dtype
    for t in items[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    lengths = torch.tensor([len(t) for t in items], dtype=torch.long)
    padding = bool((lengths != lengths[0]).any())
    if (padding or always_checked) and not (dtype.is_floating_point or dtype.is_complex):
        low, high = (0, 1) if dtype == torch.bool else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
        if not float(pad_value).is_integer() or not low <= pad_value <= high:
            raise ValueError(f"pad_value={pad_value!r} cannot pad {where}, whose values are {dtype}")
    items = [t.to(dtype) for t in items]
    padded = pad_sequence(items, batch_first=True, padding_value=pad_value) if padding else torch.stack(items)
    mask = torch.arange(padded.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
    return padded, mask


def _check_pad_value(pad_value: Any) -> None:
    if not isinstance(pad_value, numbers.Real) or isinstance(pad_value, (bool, np.bool_)):
        raise TypeError(f"pad_value must be a number, got {pad_value!r}")


def _collate_dicts(examples: Sequence[Mapping], pad_value: Any) -> dict[str, Any]:
    """The dict form of :func:`pad_collate` (``pad_value`` a number or a mapping by key)."""
    from torch.utils.data import default_collate

    keys = list(examples[0])
    for i, ex in enumerate(examples):
        if not isinstance(ex, Mapping):
            raise TypeError(f"item {i} is a {type(ex).__name__}, item 0 a {type(examples[0]).__name__}")
        if set(ex) != set(keys):
            raise ValueError(f"item {i} has the keys {sorted(ex)}, item 0 has {sorted(keys)}")
    values = {k: [ex[k] for ex in examples] for k in keys}
    # fields of 1-D sequences; images and other tensors of more dimensions are stacked
    lengths = {k: tuple(len(v) for v in vs) for k, vs in values.items() if all(_is_sequence(v, (1,)) for v in vs)}
    if not lengths:
        raise ValueError(f"no field of the items ({keys}) holds 1-D sequences: nothing to pad (use default_collate)")
    varying = {k: ls for k, ls in lengths.items() if len(set(ls)) > 1}
    patterns = set(varying.values())
    if len(patterns) > 1:
        raise ValueError(
            f"the fields {sorted(varying)} vary in length from example to example differently "
            f"({', '.join(f'{k}: {list(ls)}' for k, ls in varying.items())}): one {MASK_KEY} cannot cover them"
        )
    # the lengths the mask follows: the varying fields', else (a batch of one length)
    # input_ids', else the first sequence field's: a batch of equal lengths gets the same keys
    reference = patterns.pop() if patterns else lengths.get("input_ids", next(iter(lengths.values())))
    if isinstance(pad_value, Mapping):
        unknown = sorted(set(pad_value) - set(keys))
        if unknown:
            raise ValueError(f"pad_value names fields {unknown} that the items lack (they have {keys})")
    for value in pad_value.values() if isinstance(pad_value, Mapping) else [pad_value]:
        _check_pad_value(value)
    out: dict[str, Any] = {}
    mask = None
    for key in keys:
        if key not in lengths:
            out[key] = default_collate(values[key])
            continue
        # sequences of another length, the same in every item (a feature vector), are
        # stacked: default_collate would transpose lists into one tensor per position
        value = 0 if key == MASK_KEY else pad_value.get(key, 0) if isinstance(pad_value, Mapping) else pad_value
        items = [_as_1d(v, f"item {i}'s {key!r}") for i, v in enumerate(values[key])]
        out[key], field_mask = _pad(items, value, f"{key!r}")
        if lengths[key] == reference:
            mask = field_mask
    if MASK_KEY not in out:
        out[MASK_KEY] = mask.long()  # tokenizers' 0 / 1 integers, which every model takes
    return out


def _collate_sequences(examples: Sequence[Any], pad_value: Any) -> tuple:
    """The sequence form of :func:`pad_collate`: ``(padded, mask)``."""
    _check_pad_value(pad_value)
    kinds = [i for i, ex in enumerate(examples) if not _is_sequence(ex)]
    if kinds:
        raise TypeError(
            f"item {kinds[0]} is a {type(examples[kinds[0]]).__name__}, item 0 a sequence: "
            f"all items of a batch must be of one kind"
        )
    return _pad([_as_1d(ex, f"item {i}") for i, ex in enumerate(examples)], pad_value, "the items")


def _tuple_pad_values(pad_value: Any, size: int) -> dict[int, Any]:
    """Each tuple position's pad value (``pad_value`` a number, or a mapping from position
    to value: the positions it leaves out get 0)."""
    if not isinstance(pad_value, Mapping):
        _check_pad_value(pad_value)
        return dict.fromkeys(range(size), pad_value)
    unknown = [k for k in pad_value if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < size]
    if unknown:
        raise ValueError(
            f"pad_value names positions {unknown} that the items lack: for tuple items of {size} elements "
            f"it maps positions 0..{size - 1} to pad values"
        )
    for value in pad_value.values():
        _check_pad_value(value)
    return {j: pad_value.get(j, 0) for j in range(size)}


def _collate_tuples(examples: Sequence[Any], pad_value: Any) -> tuple:
    """The tuple form of :func:`pad_collate`: ``(padded, mask, *rest)``, each element of
    ``rest`` that holds 1-D sequences (per-token tags) padded to its own longest."""
    import torch
    from torch.utils.data import default_collate

    first = examples[0]
    for i, ex in enumerate(examples):
        if not isinstance(ex, (tuple, list)) or len(ex) != len(first):
            raise TypeError(
                f"item {i} is {type(ex).__name__} {ex!r:.60}; item 0 is a {type(first).__name__} of "
                f"{len(first)} elements, the sequence first"
            )
    values = _tuple_pad_values(pad_value, len(first))
    sequences = [_as_1d(ex[0], f"item {i}'s first element") for i, ex in enumerate(examples)]
    padded, mask = _pad(sequences, values[0], "the sequences")
    rest: list[Any] = []
    for j in range(1, len(first)):
        column = [ex[j] for ex in examples]
        # a tuple element stays a record (default_collate's per-position tensors); a list,
        # tensor or array of numbers is a sequence, padded to this element's own longest
        kinds = [not isinstance(v, tuple) and _is_sequence(v, (1,)) for v in column]
        if all(kinds):
            # Python floats stay float64, as default_collate makes them
            items = [_as_1d(v, f"item {i}'s element {j}", torch.float64) for i, v in enumerate(column)]
            rest.append(_pad(items, values[j], f"element {j} of the items", always_checked=False)[0])
        elif any(kinds):
            i = kinds.index(False)
            raise TypeError(
                f"element {j} is a 1-D sequence in item {kinds.index(True)} but a {type(column[i]).__name__} in "
                f"item {i}: all items must hold the same kind at each position"
            )
        else:
            rest.append(default_collate(column))
    return (padded, mask, *rest)


def pad_collate(examples: Sequence[Any], *, pad_value: Any = 0) -> Any:
    """Collate variable-length examples into one batch padded to its longest member, with
    the mask of the real positions: a DataLoader's ``collate_fn``.

    Three kinds of items (all of a batch of one kind):

    - a sequence (1-D tensor, 1-D numpy array, list of numbers): returns
      ``(padded, mask)``, ``padded`` of shape ``[B, L]`` (``L`` the batch's longest length,
      the items' dtype) and ``mask`` ``[B, L]`` bool, True on real positions;
    - a tuple or list whose first element is the sequence (``(tokens, label, ...)``):
      returns ``(padded, mask, *rest)``, ``mask`` the first element's; each later element
      of 1-D sequences (per-token tags: 1-D tensors or arrays, lists of numbers) padded to
      its own longest (a feature vector, of one length, stacked), the others (labels,
      tuples, images) collated by torch's ``default_collate``;
    - a dict: each field whose items are 1-D sequences of the lengths that vary in the
      batch is padded (``input_ids``, ``labels`` per token, the items' own
      ``attention_mask``, with 0), 1-D sequences of one length in every item (a feature
      vector) are stacked to ``[B, length]``, the other fields go through
      ``default_collate``, and ``attention_mask`` (int64 0 / 1, as tokenizers give it) is
      added unless the items carry one. In a batch whose sequences are all of one length,
      the mask follows ``input_ids`` (else the first field of 1-D sequences).

    Parameters
    ----------
    examples : sequence
        The batch's items, as the dataset returned them.
    pad_value : number or mapping, default 0
        The value of padded positions, in every padded field. For dict items, a mapping
        from field name to its value also works, for tuple items one from position to
        value (``{1: -100}``; fields it leaves out get 0): per-token ``labels`` are
        usually padded with ``-100``, which losses ignore. Set it with
        ``functools.partial(pad_collate, pad_value=-1)``, which pickles for DataLoader
        workers (``num_workers > 0``) as the function does.

    Returns
    -------
    tuple or dict
        ``(padded, mask)``, ``(padded, mask, *rest)`` or the dict of collated fields.

    Raises
    ------
    ValueError
        An empty batch, an item of more than one dimension, dict items with other keys,
        fields that vary in length differently, a pad value the dtype cannot hold, a
        ``pad_value`` mapping that names a field or position the items lack.
    TypeError
        Items of mixed or unsupported kinds (a tuple element a sequence in one item and
        not in another, named), a ``pad_value`` that is not a number.

    Example
    -------
    >>> import torch
    >>> padded, mask = pad_collate([torch.tensor([5, 6, 7]), torch.tensor([8])])
    >>> padded.tolist(), mask.tolist()
    ([[5, 6, 7], [8, 0, 0]], [[True, True, True], [True, False, False]])
    >>> padded, mask, labels = pad_collate([([1, 2], 0), ([3], 1)], pad_value=-1)
    >>> padded.tolist(), labels.tolist()
    ([[1, 2], [3, -1]], [0, 1])
    >>> padded, mask, tags = pad_collate([([1, 2], [7, 8]), ([3], [9])], pad_value={1: -100})
    >>> padded.tolist(), tags.tolist()
    ([[1, 2], [3, 0]], [[7, 8], [9, -100]])
    >>> batch = pad_collate([{"input_ids": [1, 2, 3], "label": 0}, {"input_ids": [4], "label": 1}])
    >>> batch["input_ids"].tolist(), batch["attention_mask"].tolist(), batch["label"].tolist()
    ([[1, 2, 3], [4, 0, 0]], [[1, 1, 1], [1, 0, 0]], [0, 1])
    """
    if not isinstance(examples, Sequence) or isinstance(examples, (str, bytes)):
        raise TypeError(f"examples must be a list of a batch's items, got {type(examples).__name__}")
    if len(examples) == 0:
        raise ValueError("pad_collate got an empty batch (no items)")
    first = examples[0]
    if isinstance(first, Mapping):
        return _collate_dicts(examples, pad_value)
    if _is_sequence(first):
        return _collate_sequences(examples, pad_value)
    if isinstance(first, (tuple, list)) and first and _is_sequence(first[0]):
        return _collate_tuples(examples, pad_value)
    raise TypeError(
        f"item 0 is a {type(first).__name__} {first!r:.60}; pad_collate takes 1-D sequences, tuples whose "
        f"first element is one, or dicts"
    )


__all__ = ["MASK_KEY", "pad_collate"]
