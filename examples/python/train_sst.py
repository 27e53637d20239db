#!/usr/bin/env python3
"""Trains the SST TreeLSTM (examples/treelstm/treelstm.pe) from Python with pejit.train(), the
loop of `pejit train`: for the same data, seed and options the per-epoch losses are the CLI's.

Data: --data FILE (bracketed trees, e.g. SST's train.txt), else data/train.txt as
scripts/demo.sh generates it, else a set generated here with `build/pejit gen sst`.
--compare-cli also runs `build/pejit train --json` with the same options and prints both.

Usage: /usr/bin/python3 examples/python/train_sst.py [--data F] [--dev F] [--epochs 2]
       [--batch 25] [--seed 1] [--lr 0.05] [--mode auto] [--compare-cli]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import pejit  # noqa: E402

CLI = os.path.join(ROOT, "build", "pejit")
MODEL = os.path.join(ROOT, "examples", "treelstm", "treelstm.pe")
_TMP = tempfile.TemporaryDirectory(prefix="pejit-sst-")  # generated data, removed at exit


def default_data():
    train, dev = os.path.join(ROOT, "data", "train.txt"), os.path.join(ROOT, "data", "dev.txt")
    if os.path.exists(train):
        return train, dev if os.path.exists(dev) else None
    tmp = _TMP.name
    train, dev = os.path.join(tmp, "train.txt"), os.path.join(tmp, "dev.txt")
    subprocess.run([CLI, "gen", "sst", "--trees", "1000", "--seed", "1", "-o", train], check=True)
    subprocess.run([CLI, "gen", "sst", "--trees", "200", "--seed", "2", "-o", dev], check=True)
    return train, dev


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data")
    ap.add_argument("--dev")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--mode", default="auto", choices=["auto", "specialized", "generic"])
    ap.add_argument("--limit", type=int, default=0, help="use the first N training trees")
    ap.add_argument("--compare-cli", action="store_true")
    args = ap.parse_args()
    if args.data:
        train, dev = args.data, args.dev
    else:
        train, dev = default_data()
    pejit.keep_freed_memory()

    def report(m):
        acc = "n/a" if m["dev_root_acc"] is None else f"{100 * m['dev_root_acc']:.1f}%"
        print(f"epoch {m['epoch'] + 1}: loss/node {m['loss']:.6f}  dev root {acc}  "
              f"{m['trees_per_s']:.0f} trees/s  ({m['specialized_batches']} batches "
              f"specialized, {m['generic_batches']} generic)", flush=True)

    hist = pejit.train(MODEL, data=train, dev=dev, epochs=args.epochs, batch=args.batch,
                       seed=args.seed, lr=args.lr, mode=args.mode, limit=args.limit,
                       on_epoch=report, progress=sys.stderr.isatty())
    if args.compare_cli:
        cmd = [CLI, "train", MODEL, "--data", train, "--epochs", str(args.epochs), "--batch",
               str(args.batch), "--seed", str(args.seed), "--lr", str(args.lr), "--mode",
               args.mode, "--limit", str(args.limit), "--json"]
        if dev:
            cmd += ["--dev", dev]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        cli = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        print("\nepoch  python loss/node   pejit train loss/node")
        for p, c in zip(hist, cli):
            print(f"{p['epoch'] + 1:5d}  {p['loss']:.9f}       {c['loss']:.9f}")


if __name__ == "__main__":
    main()
