"""batchsel demo on the bundled default data (scikit-learn's digits).

Builds the k-NN affinity graph of the 1797 digit images with batchsel.EmbeddingIndex and
prints its figures: size, degree, symmetry, and how often an image's neighbours share its
label (the reason graph-consistent batches and a graph-regularized loss help).

    python examples/demo.py [--k 10]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits

import batchsel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=10, help="neighbours per point (default 10)")
    args = parser.parse_args()

    digits = load_digits()
    x, y = digits.data.astype(np.float32), digits.target
    start = time.perf_counter()
    index = batchsel.EmbeddingIndex(x, metric="l2", progress=False)
    graph = index.knn_graph(k=args.k, kernel="rbf")
    seconds = time.perf_counter() - start

    rows, cols = graph.nonzero()
    same = y[rows] == y[cols]
    degree = np.diff(graph.indptr)
    print(f"digits: N={x.shape[0]} d={x.shape[1]}  index={index.kind}/{index.metric}  built in {seconds * 1e3:.1f} ms")
    print(f"k-NN graph (k={args.k}, rbf, sigma={index.sigma_:.2f}): {graph.nnz} edges, "
          f"degree min/mean/max {degree.min()}/{degree.mean():.1f}/{degree.max()}, "
          f"symmetric={(graph != graph.T).nnz == 0}, self loops={int(graph.diagonal().sum())}")
    print(f"edges joining same-label images: {same.mean():.1%} "
          f"(weighted {graph.data[same].sum() / graph.data.sum():.1%}); chance would be ~{np.mean([(y == c).mean() ** 2 for c in range(10)]) * 10:.0%}")


if __name__ == "__main__":
    main()
