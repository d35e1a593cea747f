#!/usr/bin/env bash
# The batchsel command line from start to finish on scikit-learn's digits:
# select representative examples, plan random and graph-consistent batches for 2 workers,
# inspect both plans against the labels and the k-NN graph, and plot one of them.
#
#   examples/cli_example.sh [N] [OUTDIR]
#
#   N       number of digits to use (default 1797, all of them)
#   OUTDIR  folder for the files (default: a new temporary folder); must not hold files
#           of an earlier run (outputs are never overwritten without --force)
#
# BATCHSEL and PYTHON name the commands to use (default: `batchsel` and the python that
# sits next to it, so a virtualenv's batchsel gets that virtualenv's numpy / sklearn).
set -euo pipefail

N=${1:-1797}
OUT=${2:-$(mktemp -d)}
BATCHSEL=${BATCHSEL:-batchsel}
if [ -z "${PYTHON:-}" ]; then
    here=$(dirname "$(command -v "${BATCHSEL%% *}")")
    if [ -x "$here/python" ]; then PYTHON="$here/python"; else PYTHON=python3; fi
fi
mkdir -p "$OUT"
cd "$OUT"
echo "files in $OUT"

# Embeddings (N x 64, float32) and labels; any N x d .npy / .npz / .pt works the same way.
$PYTHON - "$N" <<'EOF'
import sys
import numpy as np
from sklearn.datasets import load_digits

n = int(sys.argv[1])
digits = load_digits()
np.save("emb.npy", digits.data[:n].astype(np.float32))
np.save("labels.npy", digits.target[:n])
EOF

echo
echo "== select: the 10 most representative digits (facility location, lazy greedy)"
$BATCHSEL select emb.npy --k 10 --out picked.npy --quiet

echo
echo "== plan: 2 epochs of random batches of 32 for 2 workers"
$BATCHSEL plan emb.npy --batch-size 32 --workers 2 --epochs 2 --seed 0 --out random_plan.npz --quiet

echo
echo "== plan: graph-consistent batches (10-NN graph of the embeddings, METIS blocks)"
$BATCHSEL plan emb.npy --method graph --neighbors 10 --batch-size 32 --workers 2 --epochs 2 --seed 0 \
    --save-graph knn_graph.npz --out graph_plan.npz --quiet

echo
echo "== inspect: random batches, against the labels and the graph"
$BATCHSEL inspect random_plan.npz --labels labels.npy --graph knn_graph.npz --quiet

echo
echo "== inspect: graph batches, with a plot"
$BATCHSEL inspect graph_plan.npz --labels labels.npy --graph knn_graph.npz --plot graph_plan.png --quiet

