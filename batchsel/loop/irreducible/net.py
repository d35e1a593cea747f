"""The torch irreducible-loss models: a small MLP on the features (``"net"``) or the user's
own architecture, trained with Adam and early stopping on a slice of the fold's fit set."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class NetTraining:
    """The torch models' architecture (``"net"`` only) and training budget.

    Parameters
    ----------
    hidden : tuple of int
        ``"net"``'s hidden layer widths.
    epochs : int
        At most this many epochs.
    patience : int
        Stop after this many epochs without improvement on the stopping slice.
    batch_size : int
        Adam's batch size.
    lr, weight_decay : float
        Adam's learning rate and weight decay.
    stop_fraction : float
        The share of the fit set held out to stop on.
    """

    hidden: tuple[int, ...]
    epochs: int
    patience: int
    batch_size: int
    lr: float
    weight_decay: float
    stop_fraction: float


def build_net(model: Any, hidden: tuple[int, ...], d_in: int, n_classes: int) -> Any:
    """A new, untrained torch model.

    Parameters
    ----------
    model : "net" or callable
        ``"net"``: an MLP with ``hidden`` layers; else a factory returning a
        ``torch.nn.Module`` (``TypeError`` when it returns something else).
    hidden : tuple of int
        ``"net"``'s hidden layer widths.
    d_in, n_classes : int
        The features and the classes.

    Returns
    -------
    torch.nn.Module

    Example
    -------
    >>> build_net("net", (8,), 4, 3)
    Sequential(
      (0): Linear(in_features=4, out_features=8, bias=True)
      (1): ReLU()
      (2): Linear(in_features=8, out_features=3, bias=True)
    )
    """
    import torch

    if model != "net":
        net = model()
        if not isinstance(net, torch.nn.Module):
            raise TypeError(f"model() must return a torch.nn.Module, got {type(net).__name__}")
        return net.float()
    layers, d = [], d_in
    for width in hidden:
        layers += [torch.nn.Linear(d, width), torch.nn.ReLU()]
        d = width
    return torch.nn.Sequential(*layers, torch.nn.Linear(d, n_classes))


def check_outputs(net: Any, x: Any, classes: np.ndarray) -> None:
    """Refuse a model with one output per class of another label set before training
    (torch would fail mid-training with "Target ... is out of bounds").

    Parameters
    ----------
    net : torch.nn.Module
        The model.
    x : torch.Tensor
        One example.
    classes : numpy.ndarray
        The labels' distinct values, named in the message.
    """
    import torch

    with torch.no_grad():
        out = net(x)
    n_classes = len(classes)
    if out.ndim != 2 or out.shape[1] != n_classes:
        raise ValueError(
            f"the irreducible-loss model returns logits of shape {tuple(out.shape)} for one example; "
            f"it needs one output per class: {n_classes} (the labels' classes "
            f"{classes[:10].tolist()}{' ...' if n_classes > 10 else ''}, in that order)"
        )


def _fit_early_stopping(
    net: Any, training: NetTraining, fit: tuple[Any, Any], stop: tuple[Any, Any], rng: np.random.Generator
) -> int:
    """Train ``net`` on ``fit`` (features, labels) with Adam, batches in ``rng``'s order,
    and leave it at the epoch of lowest loss on ``stop`` (in eval mode); that epoch."""
    import torch
    import torch.nn.functional as F

    (xf, yf), (xs, ys) = fit, stop
    opt = torch.optim.Adam(net.parameters(), lr=training.lr, weight_decay=training.weight_decay)
    best, best_state, best_epoch, bad = math.inf, None, 0, 0
    for epoch in range(1, training.epochs + 1):
        net.train()
        order = torch.from_numpy(rng.permutation(len(yf)))
        for b in range(0, len(yf), training.batch_size):
            ib = order[b : b + training.batch_size]
            opt.zero_grad()
            F.cross_entropy(net(xf[ib]), yf[ib]).backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            loss = float(F.cross_entropy(net(xs), ys))
        if loss < best - 1e-4:
            best, best_epoch, bad = loss, epoch, 0
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        else:
            bad += 1
            if bad >= training.patience:
                break
    net.load_state_dict(best_state)
    net.eval()
    return best_epoch


def train_net(
    model: Any,
    training: NetTraining,
    x_fit: np.ndarray,
    y_fit: np.ndarray,
    x_score: np.ndarray,
    *,
    classes: np.ndarray,
    seed: int,
    fold: int,
) -> tuple[np.ndarray, int]:
    """Train a torch model on (x_fit, y_fit) with Adam, stopping early on a random
    ``stop_fraction`` of x_fit (never on x_score: its examples stay unseen, labels
    included), and return its softmax on x_score at the best epoch.

    Parameters
    ----------
    model : "net" or callable
        What :func:`build_net` builds.
    training : NetTraining
        The architecture and budget.
    x_fit, y_fit : numpy.ndarray
        The fit set: float32 features and class positions 0..C-1.
    x_score : numpy.ndarray
        The examples to score (float32).
    classes : numpy.ndarray
        The labels' distinct values (C of them).
    seed, fold : int
        Seed the stopping slice, the initial weights and the batch order; torch's global
        generator is left as it was.

    Returns
    -------
    proba : numpy.ndarray
        ``len(x_score) x C`` class probabilities (float64).
    epoch : int
        The epoch kept.
    """
    import torch

    n_classes = len(classes)
    rng = np.random.default_rng([seed, 0x11E7, fold])
    perm = rng.permutation(len(y_fit))
    n_stop = max(1, int(round(training.stop_fraction * len(y_fit))))
    if n_stop >= len(y_fit):
        raise ValueError(
            f"stop_fraction={training.stop_fraction!r} leaves no example to fit the irreducible-loss "
            f"model on ({len(y_fit)} examples in a fold's fit set)"
        )
    stop, fit = perm[:n_stop], perm[n_stop:]
    xs, ys = torch.from_numpy(x_fit[stop]), torch.from_numpy(y_fit[stop])
    xf, yf = torch.from_numpy(x_fit[fit]), torch.from_numpy(y_fit[fit])
    # a fork of torch's global generator: initial weights seeded from (seed, fold) without
    # disturbing the caller's random stream
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(rng.integers(2**62)))
        net = build_net(model, training.hidden, x_fit.shape[1], n_classes)
        check_outputs(net, xf[:1], classes)
        best_epoch = _fit_early_stopping(net, training, (xf, yf), (xs, ys), rng)
        with torch.no_grad():
            logits = net(torch.from_numpy(x_score))
    if logits.ndim != 2 or logits.shape != (len(x_score), n_classes):
        raise ValueError(
            f"the irreducible-loss model returned logits of shape {tuple(logits.shape)}, "
            f"expected ({len(x_score)}, {n_classes}) (examples x classes)"
        )
    return torch.softmax(logits.double(), dim=1).numpy(), best_epoch


__all__ = ["NetTraining", "build_net", "check_outputs", "train_net"]
