#!/usr/bin/env python3
"""A zoo model trained the same on both paths: generates trees with `pejit gen sst` (n-ary with
--arity; plain sentences with --sentences, for the list models; ListOps expressions with
--listops), trains --epochs epochs in
generic and in (strict) specialized mode with `--json`, and checks that every epoch's loss
agrees within --rtol and that the specialized run planned every batch. Prints, from the specialized run's JSON, how much of its time ran on JIT kernels
and how much (and how many plan groups) in the batching interpreter. With --interpreted T1,T2
(comma-separated; "" or "none" for none) it checks that the templates `pejit dump --emit kernels` names
as running through the batching interpreter are among those (a template that falls back fails
the check; one that gets lowered does not), and that `--json` counts groups there exactly
when dump names some.

  zoo_check.py PEJIT MODEL WORKDIR [--arity K | --sentences] [--trees N] [--epochs N] [--batch N] ...

The tolerance: the generic path and a plan agree on a step's loss within a relative 1e-5 and
on every gradient within 1e-4 of its size (docs/architecture.md, "Invariants"); over a short
run those differences carry into the parameters, so an epoch's loss is compared within a
relative --rtol (default 1e-4). Python 3 standard library only."""
import argparse
import json
import math
import os
import subprocess
import sys


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        sys.exit(f"FAIL: exit status {r.returncode}")
    return r.stdout, r.stderr


def epochs_of(text, n):
    out = []
    for line in text.splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"FAIL: train --json printed a line that is not JSON ({e}): {line!r}")
    if len(out) != n:
        sys.exit(f"FAIL: {len(out)} JSON lines for {n} epochs")
    for e in out:
        if not (isinstance(e.get("loss"), float) and math.isfinite(e["loss"])):
            sys.exit(f"FAIL: loss is not a finite number: {e}")
    return out


def interpreted_templates(pejit, model, data, batch):
    text, _ = run([pejit, "dump", model, "--data", data, "--batch", str(batch), "--emit", "kernels"])
    names, tmpl = set(), None
    for line in text.splitlines():
        if line.startswith("template "):
            tmpl = line[len("template "):].split("#")[0]
        elif "runs through the batching interpreter" in line:
            names.add(tmpl)
            print(f"  {tmpl}: {line.strip()}")
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pejit")
    ap.add_argument("model")
    ap.add_argument("workdir")
    ap.add_argument("--arity", type=int, default=2)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--optimizer", default="adagrad")
    ap.add_argument("--lr", default="0.05")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--interpreted", default=None)
    ap.add_argument("--sentences", action="store_true",
                    help="plain sentences (`pejit gen sst --sentences`) for list models")
    ap.add_argument("--listops", action="store_true",
                    help="ListOps expressions (`pejit gen listops`) for the ListOps model")
    a = ap.parse_args()

    os.makedirs(a.workdir, exist_ok=True)
    name = os.path.splitext(os.path.basename(a.model))[0]
    data = os.path.join(a.workdir, f"{name}-train.txt")
    gen = [a.pejit, "gen", "sst", "--trees", str(a.trees), "--seed", "21", "-o", data]
    if a.arity != 2:
        gen[3:3] = ["--arity", str(a.arity)]
    if a.sentences:
        gen[3:3] = ["--sentences"]
    if a.listops:
        gen[2] = "listops"
    run(gen)

    runs = {}
    for mode in ("generic", "specialized"):
        out, _ = run([a.pejit, "train", a.model, "--data", data, "--epochs", str(a.epochs),
                      "--batch", str(a.batch), "--optimizer", a.optimizer, "--lr", a.lr, "--json",
                      "--no-train-eval", "--mode", mode])
        runs[mode] = epochs_of(out, a.epochs)

    ok = True
    for g, s in zip(runs["generic"], runs["specialized"]):
        diff = abs(g["loss"] - s["loss"])
        print(f"epoch {g['epoch']}: loss generic {g['loss']:.7f} specialized {s['loss']:.7f} "
              f"(relative difference {diff / abs(g['loss']):.2e})")
        if diff > a.rtol * abs(g["loss"]):
            print(f"FAIL: epoch {g['epoch']}: the losses differ by more than {a.rtol} relative")
            ok = False
        if s["generic_batches"] != 0 or s["specialized_batches"] != s["batches"]:
            print(f"FAIL: epoch {s['epoch']}: specialized mode ran {s['generic_batches']} "
                  f"batches generic")
            ok = False
        spec = s["specialized_seconds"] + s["generic_seconds"]
        print(f"  specialized run: {s['jit_batches']} of {s['batches']} batches on JIT kernels; "
              f"{100 * s['jit_seconds'] / max(spec, 1e-9):.1f}% of its time on JIT kernels, "
              f"{100 * s['interpreted_seconds'] / max(spec, 1e-9):.1f}% in the batching "
              f"interpreter ({s['interpreted_groups']} plan groups)")

    for what in runs["specialized"][-1].get("interpreted_templates", []):
        print(f"  in the batching interpreter: {what}")

    if a.interpreted is not None:
        want = {t for t in a.interpreted.split(",") if t and t != "none"}
        got = interpreted_templates(a.pejit, a.model, data, a.batch)
        if not got <= want:
            print(f"FAIL: templates through the batching interpreter: {sorted(got)}, "
                  f"expected at most {sorted(want)}")
            ok = False
        for s in runs["specialized"]:
            counted = s["interpreted_groups"] > 0 and s["interpreted_seconds"] > 0
            if counted != bool(got):
                print(f"FAIL: epoch {s['epoch']}: --json counts {s['interpreted_groups']} groups "
                      f"({s['interpreted_seconds']}s) in the batching interpreter, dump names "
                      f"{sorted(got) or 'none'}")
                ok = False
    if not ok:
        sys.exit("FAIL")
    print("ok")


if __name__ == "__main__":
    main()
