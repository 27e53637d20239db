#!/usr/bin/env python3
"""A small architecture search in a Python loop: three variants of the internal-node cell of a
tree model (examples/python/cells.pe), each swapped in with Session.add_source, trained a few
hundred batches on generated SST-like trees and scored on a dev set; the best is kept.

Swapping the cell changes the dependency cone of the entries that use it (`loss`, `infer`):
only they are specialized again. `word_loss` (leaves only) keeps its plans and kernels across
the search; the script prints, per variant, what was re-specialized and what was reused.

Usage: /usr/bin/python3 examples/python/arch_search.py [--batches 300] [--trees 500]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import pejit  # noqa: E402

CELLS = {
    "tanh": "fn cell(l: f32[64], r: f32[64]) -> f32[64] { tanh(concat(l, r) @ U + b_node) }",
    "gated": """
param G      : f32[128, 64] = xavier
param b_gate : f32[64]      = zeros
fn cell(l: f32[64], r: f32[64]) -> f32[64] {
  let x = concat(l, r);
  let g = sigmoid(x @ G + b_gate);
  g * tanh(x @ U + b_node) + (l + r) * 0.5
}
""",
    "residual-relu": """
fn cell(l: f32[64], r: f32[64]) -> f32[64] { relu(concat(l, r) @ U + b_node) + l + r }
""",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=300, help="training batches per variant")
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--trees", type=int, default=500, help="generated training trees")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    pejit.keep_freed_memory()

    tmpdir = tempfile.TemporaryDirectory(prefix="pejit-arch-")  # removed at exit
    tmp = tmpdir.name
    cli = os.path.join(ROOT, "build", "pejit")
    train_file, dev_file = os.path.join(tmp, "train.txt"), os.path.join(tmp, "dev.txt")
    subprocess.run([cli, "gen", "sst", "--trees", str(args.trees), "--seed", "11", "-o",
                    train_file], check=True)
    subprocess.run([cli, "gen", "sst", "--trees", "200", "--seed", "12", "-o", dev_file],
                   check=True)
    vocab = pejit.Vocab()
    train = pejit.Dataset.read(train_file, vocab)
    dev = pejit.Dataset.read(dev_file, vocab, grow=False)

    model = os.path.join(ROOT, "examples", "python", "cells.pe")
    s = pejit.Session.from_file(model, dims={"V": len(vocab)}, seed=args.seed, mode="auto")
    # The word-level objective trains first: its plans and kernels should survive the search.
    order = pejit.BatchOrder(len(train), args.seed)
    idx = order.next_epoch()
    word_batches = [s.batch(train, idx[i:i + args.batch], entry="word_loss")
                    for i in range(0, len(train), args.batch)]
    for _ in range(2):  # two epochs: each plan used twice stays cached (past probation)
        for b in word_batches:
            s.step("word_loss", b)
    word_state = s.stats()["per_entry"]["word_loss"]
    print(f"word_loss: {word_state['batches']} batches, {word_state['plans_cached']} plans, "
          f"{len(s.kernels())} kernels compiled")

    results = {}
    for name, text in CELLS.items():
        kernels_before = {k["signature"] for k in s.kernels()}
        changed = s.add_source(text, f"cell-{name}")
        st = s.stats()
        s.init_params(args.seed)  # every variant starts from the same initialization
        opt = pejit.Optimizer("adagrad", lr=0.05)
        order = pejit.BatchOrder(len(train), args.seed)
        t0 = time.perf_counter()
        done, losses = 0, []
        while done < args.batches:
            idx = order.next_epoch()
            batches = [s.batch(train, idx[i:i + args.batch])
                       for i in range(0, len(train), args.batch)]
            s.prefetch("loss", batches[: args.batches - done])
            for b in batches[: args.batches - done]:
                losses.append(s.step("loss", b, optimizer=opt))
                done += 1
        seconds = time.perf_counter() - t0
        # The word-level entry after the change: still its old plans and kernels.
        misses_before = s.stats()["per_entry"]["word_loss"]["plan_misses"]
        for b in word_batches[:5]:
            s.run("word_loss", b)
        after = s.stats()
        kernels_after = {k["signature"] for k in s.kernels()}
        score = pejit.score(s, dev, args.batch)
        results[name] = score["loss_per_node"]
        print(f"\ncell {name!r}: re-specialized {sorted(changed)}, reused {st['reused']}")
        print(f"  trained {done} batches in {seconds:.1f}s; last loss/batch "
              f"{sum(losses[-20:]) / len(losses[-20:]):.3f}; dev loss/node "
              f"{score['loss_per_node']:.4f}, dev root accuracy {score['root_acc']:.3f}")
        print(f"  loss: {after['per_entry']['loss']['plans_cached']} plans "
              f"({after['per_entry']['loss']['respecializations']} re-specializations); "
              f"kernels: {len(kernels_after - kernels_before)} new, "
              f"{len(kernels_after & kernels_before)} kept from before")
        print(f"  word_loss: {after['per_entry']['word_loss']['plans_cached']} plans kept, "
              f"{after['per_entry']['word_loss']['plan_misses'] - misses_before} planned again "
              f"on 5 batches ({s.entry_status('word_loss')})")

    best = min(results, key=results.get)
    s.add_source(CELLS[best], f"cell-{best}")
    print(f"\nbest cell: {best!r} (dev loss/node {results[best]:.4f}); kept in the session")


if __name__ == "__main__":
    main()
