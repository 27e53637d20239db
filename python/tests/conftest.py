"""Fixtures of the Python tests: the built package (PYTHONPATH=build/python, as ctest sets it,
or PEJIT_BUILD), the pejit command beside it, and a small tree model that compiles quickly."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("PEJIT_BUILD", os.path.join(ROOT, "build"))
if os.path.join(BUILD, "python") not in sys.path:
    sys.path.insert(0, os.path.join(BUILD, "python"))

# Two entries over one tree model: `loss` uses the cell, `leaf_loss` only the leaves, so that
# replacing the cell changes one cone and not the other.
SMALL_MODEL = """
type Tree = Leaf(word: i32[], label: i32[])
          | Node(left: Tree, right: Tree, label: i32[])

dim V = 50

param emb    : f32[V, 8]   = normal(0.0, 0.1)
param W_leaf : f32[8, 8]   = xavier
param U      : f32[16, 8]  = xavier
param W_out  : f32[8, 5]   = xavier
param b_out  : f32[5]      = zeros

fn leaf(w: i32[]) -> f32[8] { tanh(take(emb, w) @ W_leaf) }

fn cell(l: f32[8], r: f32[8]) -> f32[8] { tanh(concat(l, r) @ U) }

fn node_loss(h: f32[8], y: i32[]) -> f32[] { cross_entropy(h @ W_out + b_out, y) }

fn encode(t: Tree) -> (f32[8], f32[]) {
  match t {
    Leaf(w, y) => { let h = leaf(w); (h, node_loss(h, y)) }
    Node(l, r, y) => {
      let (hl, ll) = encode(l);
      let (hr, lr) = encode(r);
      let h = cell(hl, hr);
      (h, ll + lr + node_loss(h, y))
    }
  }
}

fn leaves(t: Tree) -> f32[] {
  match t {
    Leaf(w, y) => node_loss(leaf(w), y)
    Node(l, r, y) => leaves(l) + leaves(r)
  }
}

entry loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => encode(t).1, batch)) }

entry leaf_loss(batch: List[Tree]) -> f32[] { sum_list(map(fn t => leaves(t), batch)) }

entry infer(batch: List[Tree]) -> List[i32[]] {
  map(fn t => argmax(encode(t).0 @ W_out + b_out), batch)
}
"""


@pytest.fixture(scope="session")
def pejit():
    import pejit as p

    return p


@pytest.fixture(scope="session")
def cli():
    exe = os.path.join(BUILD, "pejit")
    if not os.path.exists(exe):
        pytest.fail(f"{exe} is not built (cmake --build build --target pejit)")
    return exe


@pytest.fixture(scope="session")
def sst_data(tmp_path_factory, cli):
    """A small generated SST-like training and dev set."""
    d = tmp_path_factory.mktemp("sst")
    train, dev = str(d / "train.txt"), str(d / "dev.txt")
    subprocess.run([cli, "gen", "sst", "--trees", "80", "--seed", "5", "-o", train], check=True)
    subprocess.run([cli, "gen", "sst", "--trees", "30", "--seed", "6", "-o", dev], check=True)
    return train, dev


def tree(label, *kids):
    """A test tree as nested tuples: (label, word_id) leaves, (label, left, right) nodes."""
    return (label,) + kids
