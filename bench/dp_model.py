#!/usr/bin/env python3
"""The scaling model of data-parallel pejit train (docs/distributed.md), from bench/dp.sh's runs.

Per step, a rank computes its slice and then exchanges, per the protocol of
runtime/dist/grad_reducer.h:
  dense   R reductions of D bytes in all: ring reduce-scatter + all-gather,
          2 (N-1)/N * D / BW + 2 (N-1) * R * alpha
  sparse  every rank's (ids, rows) of S bytes gathered: (N-1) * S / BW + (N-1) * alpha
  outcome two small all-gathers (the step's outcome, the trainer's signal check): 2 (N-1) * alpha
  T(N) = compute(N) + comm(N), with no overlap (an upper bound: the dense reductions do start
  during the backward pass).

1. The check here: on this machine (shared memory) the ranks' extra cost over their compute is
   fitted at the smallest rank count, and the model then predicts the step time of the others;
   printed beside the measurements. Ranks beyond the cores share them (compute * N / cores).
2. The table: weak scaling (every rank a slice of the measured global batch, compute = the
   measured one-process step) over networks of 25, 100 and 400 Gb/s with alpha = 2 us, for
   2..256 ranks: the parallel efficiency compute / T(N), and where communication would take
   longer than compute.

  bench/dp_model.py RUNS.jsonl [--cpus N] [--alpha-us 2]
"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--alpha-us", type=float, default=2.0)
    a = ap.parse_args()
    runs = [json.loads(l) for l in open(a.runs)]
    by = {}
    for r in runs:
        by.setdefault(r["name"], []).append(r)
    med = {k: statistics.median(r["step_s"] for r in v) for k, v in by.items()}
    ranks = sorted(int(k[5:]) for k in by if k.startswith("ranks"))
    t_ref = med["ref"]
    per = {n: by[f"ranks{n}"][0]["per_step"] for n in ranks}
    dense = per[ranks[0]]["dense_bytes"]  # this rank's send size: the whole dense gradient
    reductions = per[ranks[0]]["reductions"]
    # Sparse bytes per tree of a slice (ids and rows of the words it touches).
    sparse_per_tree = statistics.median(
        per[n]["sparse_bytes"] / by[f"slice{n}"][0]["batch"] for n in ranks)
    batch = by["ref"][0]["batch"]

    print(f"measured: one process {1e3 * t_ref:.2f} ms/step (batch {batch}); dense gradient "
          f"{dense / 1e6:.3f} MB in {reductions:.0f} reductions; sparse rows "
          f"{sparse_per_tree / 1e3:.1f} KB per tree of a slice")

    # 1. The model checked on this machine.
    def compute(n):
        return med[f"slice{n}"] * max(1.0, n / a.cpus)

    n0 = ranks[0]
    extra0 = med[f"ranks{n0}"] - compute(n0)
    # extra(N) ~ c * (N - 1): every term of comm(N) grows with N - 1 at fixed sizes.
    c = extra0 / (n0 - 1)
    print(f"\ncheck on this machine ({a.cpus} cores, shared memory): the cost beyond compute "
          f"fitted at {n0} ranks ({1e3 * extra0:.2f} ms/step), then predicted:")
    print("| ranks | compute (slice run) | measured step | model | model / measured |")
    print("|---|---|---|---|---|")
    for n in ranks:
        model = compute(n) + c * (n - 1)
        meas = med[f"ranks{n}"]
        print(f"| {n} | {1e3 * compute(n):.2f} ms | {1e3 * meas:.2f} ms | {1e3 * model:.2f} ms | "
              f"{model / meas:.2f} |")

    # 2. Weak scaling over networks.
    alpha = a.alpha_us * 1e-6
    s = sparse_per_tree * batch
    print(f"\nweak scaling, {batch} trees per rank per step (compute {1e3 * t_ref:.2f} ms), "
          f"alpha {a.alpha_us:g} us; parallel efficiency compute / (compute + comm), and comm "
          f"in ms:")
    sizes = [2, 4, 8, 16, 32, 64, 128, 256]
    bws = [25, 100, 400]
    print("| ranks | " + " | ".join(f"{b} Gb/s" for b in bws) + " |")
    print("|---|" + "---|" * len(bws))
    bound = {}
    for n in sizes:
        cells = []
        for b in bws:
            bw = b * 1e9 / 8
            comm = (2 * (n - 1) / n * dense / bw + 2 * (n - 1) * reductions * alpha +
                    (n - 1) * s / bw + (n - 1) * alpha + 2 * (n - 1) * alpha)
            cells.append(f"{t_ref / (t_ref + comm):.2f} ({1e3 * comm:.1f})")
            if comm > t_ref and b not in bound:
                bound[b] = n
        print(f"| {n} | " + " | ".join(cells) + " |")
    for b in bws:
        where = f"from {bound[b]} ranks" if b in bound else "not within 256 ranks"
        print(f"communication longer than compute at {b} Gb/s: {where}")


if __name__ == "__main__":
    main()
