#!/usr/bin/python3
"""PyTorch peer of examples/treegru/treegru.pe: a binary Tree-GRU on SST-shaped trees.

Two styles on one parameter module (peer_common.Params, pejit's parameter names):
  naive    recursive per-node evaluation, one tree at a time (how users write it);
  batched  level-batched over the whole minibatch (DGL / TF-Fold style): nodes ordered by
           height; all leaves in one embedding lookup and one GEMM; per level one index_select
           of the children's [hl | hr] rows from an [N,150] buffer written in place level by
           level, one GEMM for the update and reset gates, one for the candidate, gates
           split with `split`; one classifier GEMM + cross_entropy over all labelled nodes.

Model (vectors are rows, x @ W; H = 150):
  leaf w:      (z, g) = split2(emb[w] @ W_leaf + b_leaf); h = sig(z) * tanh(g)
  node (l, r): (z, rl, rr) = split3([hl, hr] @ U_zr + b_zr)
               cand = tanh([sig(rl) * hl, sig(rr) * hr] @ U_h + b_h); u = sig(z)
               h = (1 - u) * (hl + hr) + u * cand
  every labelled node: loss += cross_entropy(h @ W_out + b_out, label)  (SUM)
  Adagrad lr 0.05, batches of 25 trees, shuffled per epoch; sparse embedding gradients.

  treegru_torch.py --train FILE [--epochs N] [--style naive|batched] [--json] ...
  treegru_torch.py --self-check [--data FILE] [--pejit build/pejit]
  treegru_torch.py --write-checkpoint OUT --train FILE

--self-check: as childsum_torch.py's (naive vs batched: loss, every gradient, root
predictions, checkpoint round trip; with --pejit, pejit's `eval` loss per node on the same
checkpoint and trees). Exit status 0 = PASS. Run with /usr/bin/python3 (PyTorch 1.13);
fairness as bench/torch/README.md (run_peer.sh's environment).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

EMB, HID, NCLS = pc.EMB, pc.HID, pc.NCLS

SHAPES = {"emb": (0, EMB), "W_leaf": (EMB, 2 * HID), "b_leaf": (2 * HID,),
          "U_zr": (2 * HID, 3 * HID), "b_zr": (3 * HID,), "U_h": (2 * HID, HID), "b_h": (HID,),
          "W_out": (HID, NCLS), "b_out": (NCLS,)}


def _leaf(P, x):
    z, g = torch.addmm(P.b_leaf, x, P.W_leaf).split([HID, HID], 1)
    return torch.sigmoid(z) * torch.tanh(g)


def _cell(P, hc, hsum):
    """hc: [n, 300] = [hl | hr]; hsum = hl + hr."""
    z, r = torch.addmm(P.b_zr, hc, P.U_zr).split([HID, 2 * HID], 1)
    cand = torch.tanh(torch.addmm(P.b_h, torch.sigmoid(r) * hc, P.U_h))
    u = torch.sigmoid(z)
    return (1.0 - u) * hsum + u * cand


# ----------------------------------------------------------------------------------------
# naive: one node at a time
# ----------------------------------------------------------------------------------------
def naive_tree(P, t, each):
    h = [None] * t.n
    for v in range(t.n):  # post-order: children first
        kids = t.kids(v)
        if len(kids) == 0:
            h[v] = _leaf(P, P.emb(torch.tensor([int(t.words[v])])))
        else:
            hl, hr = h[kids[0]], h[kids[1]]
            h[v] = _cell(P, torch.cat([hl, hr], 1), hl + hr)
        each(v, h[v])
    return h


# ----------------------------------------------------------------------------------------
# batched: one level at a time over the whole minibatch
# ----------------------------------------------------------------------------------------
def batched_states(P, L):
    """All nodes' h, [N,150], in level-plan position order."""
    h = _leaf(P, P.emb(L.leaf_words))
    H = h.new_empty((L.n, HID))
    H[:h.shape[0]] = h
    for start, n, kids, _, binary in L.levels:
        if not binary:
            raise ValueError("the Tree-GRU takes binary trees")
        hc = H.index_select(0, kids).view(n, 2 * HID)  # [hl | hr]
        hl, hr = hc.split([HID, HID], 1)
        H[start:start + n] = _cell(P, hc, hl + hr)
    return H


class TreeGru(pc.Peer):
    name = "treegru"
    shapes = SHAPES
    max_kids = 2
    naive_tree = staticmethod(naive_tree)
    batched_states = staticmethod(batched_states)
    model_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                              "examples", "treegru", "treegru.pe")
    tiny = pc.BINARY_TINY


if __name__ == "__main__":
    pc.main(TreeGru(), __doc__)
