"""Logistic-regression baseline on MovieLens-100k: the AUC a DLRM run must beat.

One-hot user, item, age bucket, gender, occupation, zip prefix and multi-hot genres (exactly the
sparse features of shardrec-data's ``movielens-100k``), on exactly its train/test split (random
80/20, seed 0). scikit-learn is a benchmark-only dependency: `.venv/bin/pip install scikit-learn`.

    .venv/bin/python benchmarks/movielens_baseline.py [--quick] [--C 1.0] [--zip-digits 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch
from scipy import sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from shardrec_data import load_dataset


def one_hot(ds, split: str) -> tuple[sp.csr_matrix, np.ndarray]:
    """(N, sum of num_embeddings) 0/1 matrix of every sparse feature, and the labels."""
    arrays = ds.arrays(split)
    n = len(arrays)
    rows, cols = [], []
    base = 0
    for k, feat in enumerate(ds.sparse_features):
        lengths, values = arrays.sparse_ids(k)
        rows.append(np.repeat(np.arange(n), lengths))
        cols.append(values + base)
        base += feat.num_embeddings
    r, c = np.concatenate(rows), np.concatenate(cols)
    x = sp.csr_matrix((np.ones(r.size, dtype=np.float64), (r, c)), shape=(n, base))
    return x, np.asarray(arrays.labels, dtype=np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat instead of three")
    parser.add_argument("--C", type=float, default=1.0, help="inverse L2 strength")
    parser.add_argument("--zip-digits", type=int, default=1, choices=(1, 2))
    args = parser.parse_args()

    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"numpy {np.__version__}"
    )
    t0 = time.perf_counter()
    ds = load_dataset("movielens-100k", zip_prefix_digits=args.zip_digits)
    load_s = time.perf_counter() - t0
    x_train, y_train = one_hot(ds, "train")
    x_test, y_test = one_hot(ds, "test")
    print(
        f"data: train {x_train.shape[0]} x {x_train.shape[1]} one-hot columns "
        f"({x_train.nnz} nonzeros), test {x_test.shape[0]}; load {load_s:.2f} s"
    )
    times, aucs = [], []
    for _ in range(1 if args.quick else 3):
        t0 = time.perf_counter()
        model = LogisticRegression(C=args.C, max_iter=1000)
        model.fit(x_train, y_train)
        times.append(time.perf_counter() - t0)
        aucs.append(roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))
    train_auc = roc_auc_score(y_train, model.predict_proba(x_train)[:, 1])
    print("| model | features | C | train AUC | test AUC | fit time (median) |")
    print("|---|---|---|---|---|---|")
    print(
        f"| logistic regression (scikit-learn lbfgs) | one-hot user, item, genres, age bucket, "
        f"gender, occupation, zip prefix ({args.zip_digits} digit) | {args.C} | "
        f"{train_auc:.4f} | {aucs[-1]:.4f} | {statistics.median(times):.2f} s |"
    )
    print("reference: the issue's measurement on a random 80/20 split (seed 0): test AUC 0.771")
    print(f"test AUC: {aucs[-1]:.4f}")


if __name__ == "__main__":
    main()
