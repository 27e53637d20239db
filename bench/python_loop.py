#!/usr/bin/env python3
"""The Python side of bench/python_loop.sh: a plain research loop over the Python package
(read the data, a Session, the CLI's batch order, one step() per batch with the batches ahead
prefetched as `pejit train` does), printing one JSON line per epoch with the fields of
`pejit train --json` it measures the same way: trees_per_s over the steps' time, and
loop_trees_per_s over the whole loop (encoding, prefetching and Python included).

Usage: python_loop.py MODEL DATA [--epochs 1] [--batch 25] [--seed 1] [--lr 0.05]
       [--mode auto] [--lookahead 8]
"""

import argparse
import collections
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import pejit  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--lookahead", type=int, default=8)
    a = ap.parse_args()
    pejit.keep_freed_memory()  # as the pejit command does
    vocab = pejit.Vocab()
    data = pejit.Dataset.read(a.data, vocab)
    s = pejit.Session.from_file(a.model, dims={"V": len(vocab)}, seed=a.seed, lr=a.lr,
                                mode=a.mode, lookahead=a.lookahead)
    n, bs = len(data), a.batch
    nb = (n + bs - 1) // bs
    order_gen = pejit.BatchOrder(n, a.seed)
    look = max(1, a.lookahead) if a.mode == "auto" else 0
    for ep in range(a.epochs):
        order = order_gen.next_epoch()
        ahead, encoded = collections.deque(), 0
        loss_sum, step_s = 0.0, 0.0
        t_loop = time.perf_counter()
        for b in range(nb):
            fresh = []
            while encoded < min(b + 1 + look, nb):
                fresh.append(s.batch(data, order[encoded * bs:(encoded + 1) * bs]))
                encoded += 1
            ahead.extend(fresh)
            if fresh:
                s.prefetch("loss", fresh)
            t0 = time.perf_counter()
            loss_sum += s.step("loss", ahead.popleft())
            step_s += time.perf_counter() - t0
        loop_s = time.perf_counter() - t_loop
        print(json.dumps({"epoch": ep, "loss_sum": loss_sum, "trees": n, "seconds": step_s,
                          "trees_per_s": n / step_s, "loop_seconds": loop_s,
                          "loop_trees_per_s": n / loop_s}), flush=True)


if __name__ == "__main__":
    main()
