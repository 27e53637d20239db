#!/usr/bin/python3
"""PyTorch peer of examples/childsum/childsum.pe: the child-sum TreeLSTM (Tai et al. 2015,
section 3.1) on n-ary SST-shaped trees (`pejit gen sst --arity 4`).

Two styles on one parameter module (peer_common.Params, pejit's parameter names):
  naive    recursive per-node evaluation, one tree at a time (how users write it);
  batched  level-batched over the whole minibatch (DGL / TF-Fold style): nodes ordered by
           height; all leaves in one embedding lookup and one GEMM; per level one
           index_select of the children's rows from a state buffer written in place level by
           level, the sums over each node's children as one index_add_ (a segment sum), one
           GEMM for the level's gates; one classifier GEMM + cross_entropy over all labelled
           nodes. Each node's forget-gated cell f_k * c_k depends on the child alone, so it is
           computed with the child's own level (one [n,150]x[150,150] GEMM per level) and kept
           beside its h in one [N, 300] buffer: a parent gathers [h_k | f_k*c_k] of its
           children in one index_select and sums both in one index_add_.

Model (vectors are rows, x @ W):
  leaf w:  (i, o, u) = split3(emb[w] @ W_iou + b_iou); c = sig(i)*tanh(u); h = sig(o)*tanh(c)
  node:    hsum = sum_k h_k; fc = sum_k sig(h_k @ U_f + b_f) * c_k
           (i, o, u) = split3(hsum @ U_iou + b_iou); c = sig(i)*tanh(u) + fc; h = sig(o)*tanh(c)
  every labelled node: loss += cross_entropy(h @ W_out + b_out, label)  (SUM)
  Adagrad lr 0.05, batches of 25 trees, shuffled per epoch; sparse embedding gradients.

  childsum_torch.py --train FILE [--epochs N] [--style naive|batched] [--json] ...
  childsum_torch.py --self-check [--data FILE] [--pejit build/pejit]
  childsum_torch.py --write-checkpoint OUT --train FILE

--self-check: naive vs batched on the same weights (non-zero biases, an <unk> word, a
leaf-only tree, unlabelled nodes): loss within 1e-5 relative, every gradient within
1e-4 max|ref| + 1e-6 (sparse and dense embedding gradients), the same root predictions, a
checkpoint round trip; with --pejit, pejit's `eval` loss per node on the same checkpoint and
trees within 1e-5 relative. Exit status 0 = PASS. Run with /usr/bin/python3 (PyTorch 1.13);
fairness as bench/torch/README.md (run_peer.sh's environment).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

EMB, HID, NCLS = pc.EMB, pc.HID, pc.NCLS

SHAPES = {"emb": (0, EMB), "W_iou": (EMB, 3 * HID), "U_iou": (HID, 3 * HID), "b_iou": (3 * HID,),
          "U_f": (HID, HID), "b_f": (HID,), "W_out": (HID, NCLS), "b_out": (NCLS,)}


def _iou(P, g, fc=None):
    """The cell from its gates g = [i | o | u] (and the children's gated cells)."""
    gs, gu = g.split([2 * HID, HID], 1)
    i, o = torch.sigmoid(gs).split([HID, HID], 1)
    c = i * torch.tanh(gu)
    if fc is not None:
        c = c + fc
    return o * torch.tanh(c), c


# ----------------------------------------------------------------------------------------
# naive: one node at a time
# ----------------------------------------------------------------------------------------
def naive_tree(P, t, logits_of):
    h = [None] * t.n
    c = [None] * t.n
    for v in range(t.n):  # post-order: children first
        kids = t.kids(v)
        if len(kids) == 0:
            x = P.emb(torch.tensor([int(t.words[v])]))
            h[v], c[v] = _iou(P, torch.addmm(P.b_iou, x, P.W_iou))
        else:
            hsum = h[kids[0]]
            fc = torch.sigmoid(torch.addmm(P.b_f, h[kids[0]], P.U_f)) * c[kids[0]]
            for k in kids[1:]:
                hsum = hsum + h[k]
                fc = fc + torch.sigmoid(torch.addmm(P.b_f, h[k], P.U_f)) * c[k]
            h[v], c[v] = _iou(P, torch.addmm(P.b_iou, hsum, P.U_iou), fc)
        logits_of(v, h[v])
    return h


# ----------------------------------------------------------------------------------------
# batched: one level at a time over the whole minibatch
# ----------------------------------------------------------------------------------------
def batched_states(P, L):
    """All nodes' h, [N,150], in level-plan position order."""
    S = P.W_iou.new_empty((L.n, 2 * HID))  # [h | sig(h @ U_f + b_f) * c] per node
    h, c = _iou(P, torch.addmm(P.b_iou, P.emb(L.leaf_words), P.W_iou))
    n0 = h.shape[0]
    S[:n0, :HID] = h
    S[:n0, HID:] = torch.sigmoid(torch.addmm(P.b_f, h, P.U_f)) * c
    for start, n, kids, seg, _ in L.levels:
        both = S.new_zeros((n, 2 * HID)).index_add_(0, seg, S.index_select(0, kids))
        hsum, fc = both.split([HID, HID], 1)
        h, c = _iou(P, torch.addmm(P.b_iou, hsum, P.U_iou), fc)
        S[start:start + n, :HID] = h
        S[start:start + n, HID:] = torch.sigmoid(torch.addmm(P.b_f, h, P.U_f)) * c
    return S[:, :HID]


class ChildSum(pc.Peer):
    name = "childsum"
    shapes = SHAPES
    max_kids = None
    naive_tree = staticmethod(naive_tree)
    batched_states = staticmethod(batched_states)
    model_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                              "examples", "childsum", "childsum.pe")
    tiny = [
        "(3 (2 The) (4 (2 Rock) (2 is) (3 back)))",
        "(1 (2 (2 a) (1 bad) (2 old)) (2 (2 movie) (- .)))",
        "(- (2 (3 (2 very) (3 good)) (2 film) (2 here) (3 now)) (2 (2 ,) (4 (2 really))))",
        "(0 (1 awful) (2 stuff) (1 and) (0 worse))",
        "(2 solo)",
        "(4 (4 (4 (3 (2 (2 deep) (2 left)) (2 spine)) (2 of)) (2 words)) (3 here))",
        "(3 (3 (2 one) (2 two)) (2 (2 three) (2 four) (2 five)) (1 six))",
    ]


if __name__ == "__main__":
    pc.main(ChildSum(), __doc__)
