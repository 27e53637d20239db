"""The paper setup of the PyTorch peer (treelstm_torch.py), as pejit runs Tai et al. 2015:
binary SST labels as `pejit train --labels binary` maps them, L2 weight decay by pejit's rule,
the dev/test scores `pejit train --dev` and `pejit eval` report (root and all-node accuracy),
and the best epoch by dev root accuracy as `--save-best dev_root_acc` picks it.
`--paper-check` runs the checks below; bench/repro.sh drives the comparison.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

import peer_common as pc
import treelstm_torch as peer


def map_binary(trees):
    """pejit's `--labels binary` (runtime/train/labels.h): 0, 1 -> 0; 3, 4 -> 1; a tree whose
    root is neutral (2) is dropped; every other neutral node becomes unlabelled (-1), counted in
    neither loss nor accuracy. Vocabulary and word ids are untouched (pejit builds the
    vocabulary from every training tree before mapping). Returns (kept trees, report line)."""
    kept, dropped, unlabelled = [], 0, 0
    for t in trees:
        lab = t.label
        if (lab > 4).any():
            raise ValueError("label %d is not an SST sentiment (0-4)" % int(lab.max()))
        if lab[t.n - 1] == 2:
            dropped += 1
            continue
        neutral = lab == 2
        unlabelled += int(neutral.sum())
        out = np.where(lab < 0, -1, np.where(lab < 2, 0, 1))
        out[neutral] = -1
        t.label = out.astype(np.int64)
        t.lab_t = torch.from_numpy(t.label.copy())
        kept.append(t)
    if not kept:
        raise ValueError("every tree has a neutral root (2): no tree is left")
    return kept, ("kept %d of %d trees (%d with a neutral root dropped), %d neutral inner "
                  "nodes unlabeled" % (len(kept), len(trees), dropped, unlabelled))


def parse_param_decay(items):
    """`--param-decay NAME=WD` items (as pejit's) -> {name: wd}."""
    out = {}
    for it in items or []:
        name, eq, val = it.partition("=")
        if not eq or name not in peer.PARAM_NAMES:
            raise ValueError("--param-decay %r: expected NAME=WD with NAME one of %s"
                             % (it, ", ".join(peer.PARAM_NAMES)))
        out[name] = float(val)
        if not out[name] >= 0:
            raise ValueError("--param-decay %r: the decay must be >= 0" % it)
    return out


def apply_weight_decay(P, wd, per_param=None):
    """g += wd * p before the step, as torch.optim.Adagrad(weight_decay=wd) does for a dense
    gradient, and as pejit does for a row-sparse one (the embedding's): on the rows the batch
    touched only (torch's Adagrad refuses weight decay with sparse gradients). per_param:
    {name: wd} in place of wd for those parameters (pejit's --param-decay)."""
    for name, p in P.named():
        g = p.grad
        wd_ = (per_param or {}).get(name, wd)
        if g is None or wd_ == 0:
            continue
        if g.is_sparse:
            g = g.coalesce()
            rows = g.indices()[0]
            vals = g.values() + wd_ * p.detach().index_select(0, rows)
            p.grad = torch.sparse_coo_tensor(g.indices(), vals, g.shape).coalesce()
        else:
            g.add_(p.detach(), alpha=wd_)


def scores(P, trees, batch=25):
    """(root accuracy, all-node accuracy) with dropout off, as pejit scores them
    (runtime/train/common.cpp): roots with a label >= 0, and every node with a label >= 0,
    leaves included. NaN for a set with no labelled root / node."""
    root_ok = roots = node_ok = labelled = 0
    with torch.no_grad():
        for b in pc.batches_of(trees, batch):
            plan = pc.make_levels(b)
            H = peer.batched_states(P, plan)
            pred = torch.argmax(torch.addmm(P.b_out, H, P.W_out), 1)
            lab_pred = pred if plan.all_labelled else pred.index_select(0, plan.lab_pos)
            node_ok += int((lab_pred == plan.labels).sum())
            labelled += int(plan.labels.shape[0])
            rp = pred.index_select(0, plan.roots).tolist()
            for p, g in zip(rp, peer.root_labels(b)):
                if g >= 0:
                    root_ok += int(p == g)
                    roots += 1
    nan = float("nan")
    return (root_ok / roots if roots else nan, node_ok / labelled if labelled else nan)


class BestByDev:
    """The best epoch by dev root accuracy, strictly better than every earlier one (the first
    of equal epochs wins, as `--save-best` keeps it), with a copy of its parameters."""

    def __init__(self):
        self.epoch, self.acc, self.state = None, None, None

    def update(self, epoch, acc, P, keep_params):
        if acc == acc and (self.acc is None or acc > self.acc):
            self.epoch, self.acc = epoch, acc
            if keep_params:
                self.state = copy.deepcopy(P.state_dict())


def prepare(args, train, dev, test):
    """Applies --labels to the three sets; returns them and the class count."""
    if args.labels != "binary":
        return train, dev, test, peer.NCLS
    out = []
    for name, trees in (("train", train), ("dev", dev), ("test", test)):
        if trees:
            trees, note = map_binary(trees)
            print("binary labels: %s: %s" % (name, note), file=sys.stderr)
        out.append(trees)
    return out[0], out[1], out[2], 2


# ----------------------------------------------------------------------------------------
# --paper-check
# ----------------------------------------------------------------------------------------
def _check(ok, what):
    print("%s: %s" % (what, "ok" if ok else "FAIL"))
    return ok


def paper_check(args):
    """Checks the paper setup: exit 0 = PASS. With --pejit BIN --model-dir DIR (the
    examples/treelstm folder) the binary mapping and the scores are also compared with
    `pejit eval --labels binary` on the same weights."""
    torch.manual_seed(args.seed)
    d = tempfile.mkdtemp(prefix="treelstm_paper_")
    src = os.path.join(d, "tiny.txt")
    with open(src, "w") as f:
        f.write("\n".join(peer.TINY * 4) + "\n")
    trees = peer.load_trees(src)
    vocab = pc.build_vocab(trees)
    peer.attach_ids(trees, vocab)
    ok = True

    # binary mapping: TINY's roots 3, 1, -, 0, 2, 4 -> the neutral root (2) dropped, the
    # unlabelled root kept (as pejit keeps it: only a 2 drops a tree)
    kept, note = map_binary(peer.load_trees(src))
    ok &= _check(len(kept) == 20 and "4 with a neutral root dropped" in note,
                 "binary labels drop the neutral roots (%s)" % note)
    labs = np.concatenate([t.label for t in kept])
    ok &= _check(set(labs.tolist()) <= {-1, 0, 1}, "binary labels are -1, 0 or 1")
    first = kept[0].label.tolist()     # (3 (2 The) (4 (2 Rock) (2 is)))
    ok &= _check(first == [-1, -1, -1, 1, 1], "binary labels of a tree in post-order %s" % first)

    # dropout: on in training (the loss moves with the draw, stays finite), off in scoring
    P = peer.TreeLSTMParams(len(vocab), sparse_emb=True)
    with torch.no_grad():
        l0 = float(peer.batched_loss(P, trees[:10])[0])
        l0b = float(peer.batched_loss(P, trees[:10], drop=0.0)[0])
        l1 = float(peer.batched_loss(P, trees[:10], drop=0.5)[0])
        l2 = float(peer.batched_loss(P, trees[:10], drop=0.5)[0])
        ln = float(peer.naive_loss(P, trees[:10], drop=0.5)[0])
    ok &= _check(l0 == l0b and l1 != l0 and l1 != l2 and np.isfinite([l1, l2, ln]).all(),
                 "dropout 0.5 changes the training loss (%.4f, draws %.4f %.4f %.4f)"
                 % (l0, l1, l2, ln))
    s1, s2 = scores(P, trees), scores(P, trees)
    ok &= _check(s1 == s2, "scores are deterministic (dropout off): %s" % (s1,))

    # weight decay: dense params get wd * p; the embedding only on the rows the batch touched
    wd = 0.5
    P = peer.TreeLSTMParams(len(vocab), sparse_emb=True)
    loss, _ = peer.batched_loss(P, trees[:2])
    loss.backward()
    g_emb = P.emb.weight.grad.coalesce().to_dense().clone()
    g_U = P.U.grad.clone()
    apply_weight_decay(P, wd)
    touched = sorted(set(int(w) for t in trees[:2] for w in t.words if w >= 0))
    emb = P.emb.weight.detach()
    want = g_emb.clone()
    want[touched] += wd * emb[touched]
    got = P.emb.weight.grad.coalesce().to_dense()
    ok &= _check(torch.allclose(got, want, atol=0, rtol=1e-6) and
                 torch.allclose(P.U.grad, g_U + wd * P.U.detach(), atol=0, rtol=1e-6),
                 "weight decay: dense grads + wd*p, embedding rows touched only (%d of %d)"
                 % (len(touched), len(vocab)))
    g_out = P.W_out.grad.clone()
    apply_weight_decay(P, wd, parse_param_decay(["emb=0", "W_out=2"]))
    ok &= _check(torch.equal(P.emb.weight.grad.coalesce().to_dense(), got) and
                 torch.allclose(P.W_out.grad, g_out + 2 * P.W_out.detach(), atol=0, rtol=1e-6),
                 "--param-decay emb=0 W_out=2: the embedding undecayed, W_out by 2")

    # best by dev: strictly better only
    b = BestByDev()
    for e, a in enumerate([0.3, 0.5, 0.5, 0.4]):
        b.update(e + 1, a, P, False)
    ok &= _check(b.epoch == 2 and b.acc == 0.5, "best epoch by dev: first of the equal ones")

    if args.pejit:
        ok &= _against_pejit(args, d, src)
    print("paper check: %s" % ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


def _against_pejit(args, d, src):
    """The same binary weights scored by `pejit eval --labels binary` and by scores()."""
    trees = peer.load_trees(src)
    vocab = pc.build_vocab(trees)
    P = peer.TreeLSTMParams(len(vocab), sparse_emb=False, ncls=2)
    with torch.no_grad():
        for n in ("b_leaf", "b_node", "b_out"):
            P.param(n).normal_(0, 0.5)
    ck = os.path.join(d, "binary.ckpt")
    pc.write_checkpoint(ck, dict(P.named()), vocab, peer.PARAM_NAMES)
    model = os.path.join(args.model_dir, "treelstm_binary.pe")
    r = subprocess.run([args.pejit, "eval", model, "--params", ck, "--data", src, "--labels",
                        "binary", "--json", "--threads", "1"], capture_output=True, text=True)
    if r.returncode != 0:
        return _check(False, "pejit eval: %s" % r.stderr.strip())
    got = json.loads(r.stdout.strip().splitlines()[-1])
    peer.attach_ids(trees, vocab)
    kept, note = map_binary(trees)
    ra, na = scores(P, kept)
    ok = _check(note in r.stderr, "pejit's binary label report says '%s'" % note)
    ok &= _check(got["trees"] == len(kept) and abs(got["root_acc"] - ra) < 1e-12
                 and abs(got["node_acc"] - na) < 1e-12,
                 "pejit eval and the peer score the same weights alike: pejit root %.4f node "
                 "%.4f, peer root %.4f node %.4f (%d trees)"
                 % (got["root_acc"], got["node_acc"], ra, na, len(kept)))
    return ok
