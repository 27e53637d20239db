#!/usr/bin/env python3
"""A short training run of an example model, checked: generates data with `pejit gen`, trains
with `--json`, and checks that every JSON line parses and that the model learned.

  train_check.py PEJIT MODEL KIND WORKDIR [--trees N] [--dev-trees N] [--epochs N] ...

KIND listops: dev root accuracy beats the dev set's majority class by --margin, and `pejit
eval` of the saved checkpoint reproduces it. KIND lm: the training loss per word falls from
the first epoch to the last and the final dev loss per word is below log(V) (an untrained
model's) by --margin. Python 3 standard library only."""
import argparse
import collections
import json
import math
import os
import subprocess
import sys


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(r.stderr)
    sys.stderr.flush()
    if r.returncode != 0:
        sys.stdout.write(r.stdout)
        sys.exit(f"FAIL: exit status {r.returncode}")
    return r.stdout


def json_lines(text, what):
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            sys.exit(f"FAIL: {what} printed a line that is not JSON ({e}): {line!r}")
    if not out:
        sys.exit(f"FAIL: {what} printed no JSON")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pejit")
    ap.add_argument("model")
    ap.add_argument("kind", choices=["listops", "lm"])
    ap.add_argument("workdir")
    ap.add_argument("--trees", type=int, default=300)
    ap.add_argument("--dev-trees", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--lr", default="0.01")
    ap.add_argument("--margin", type=float, default=0.05)
    a = ap.parse_args()

    os.makedirs(a.workdir, exist_ok=True)
    train = os.path.join(a.workdir, a.kind + "-train.txt")
    dev = os.path.join(a.workdir, a.kind + "-dev.txt")
    ckpt = os.path.join(a.workdir, a.kind + ".ckpt")
    gen = ["listops"] if a.kind == "listops" else ["sst", "--sentences"]
    run([a.pejit, "gen", *gen, "--trees", str(a.trees), "--seed", "11", "-o", train])
    run([a.pejit, "gen", *gen, "--trees", str(a.dev_trees), "--seed", "12", "-o", dev])

    out = run([a.pejit, "train", a.model, "--data", train, "--dev", dev, "--epochs", str(a.epochs),
               "--batch", str(a.batch), "--optimizer", a.optimizer, "--lr", a.lr, "--json",
               "--no-train-eval", "--save", ckpt])
    epochs = json_lines(out, "train --json")
    if len(epochs) != a.epochs:
        sys.exit(f"FAIL: {len(epochs)} JSON lines for {a.epochs} epochs")
    for e in epochs:
        for k in ("epoch", "loss", "dev_loss", "trees", "seconds"):
            if k not in e:
                sys.exit(f"FAIL: epoch line without '{k}': {e}")
        if not (isinstance(e["loss"], float) and math.isfinite(e["loss"])):
            sys.exit(f"FAIL: loss is not a finite number: {e}")
        print(f"epoch {e['epoch']}: loss {e['loss']:.4f}  dev loss {e['dev_loss']:.4f}  "
              f"dev root acc {e['dev_root_acc']}  {e['seconds']:.2f}s")
    last = epochs[-1]

    if a.kind == "listops":
        labels = [line.split()[0].lstrip("(") for line in open(dev) if line.strip()]
        majority = collections.Counter(labels).most_common(1)[0][1] / len(labels)
        acc = last["dev_root_acc"]
        print(f"dev root accuracy {acc:.3f}, majority class {majority:.3f}")
        if acc is None or acc < majority + a.margin:
            sys.exit(f"FAIL: dev root accuracy {acc} does not beat the majority class "
                     f"{majority:.3f} by {a.margin}")
        ev = json_lines(run([a.pejit, "eval", a.model, "--params", ckpt, "--data", dev, "--json"]),
                        "eval --json")[0]
        if abs(ev["root_acc"] - acc) > 1e-9:
            sys.exit(f"FAIL: eval of the checkpoint gives root accuracy {ev['root_acc']}, "
                     f"training reported {acc}")
    else:
        words = {w for line in open(train) for w in line.split()}
        uniform = math.log(len(words) + 1)  # + <unk>
        print(f"dev loss/word {last['dev_loss']:.4f}, log(V) {uniform:.4f}")
        if not epochs[-1]["loss"] < epochs[0]["loss"]:
            sys.exit(f"FAIL: the training loss did not fall: {epochs[0]['loss']} -> {last['loss']}")
        if not last["dev_loss"] < uniform - a.margin:
            sys.exit(f"FAIL: dev loss/word {last['dev_loss']} is not below log(V) {uniform:.4f} "
                     f"by {a.margin}")
    print("ok")


if __name__ == "__main__":
    main()
