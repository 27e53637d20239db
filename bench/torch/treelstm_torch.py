#!/usr/bin/python3
"""PyTorch peer for pejit's headline benchmark: the binary constituency TreeLSTM on SST.

Two implementations share one parameter module (TreeLSTMParams, peer_common.Params):
  naive    recursive per-node evaluation, one tree at a time (how users write it);
  batched  level-batched over the whole minibatch (DGL / TF-Fold style, the strongest eager
           code): all leaves in one GEMM, one GEMM per height level (children states gathered
           with index tensors), one classifier GEMM + cross_entropy over all labelled nodes.

Model (vectors are rows, x @ W):
  leaf w:      g = emb[w] @ W_leaf + b_leaf; (i, o, u) = 3 x 150
               c = sig(i)*tanh(u); h = sig(o)*tanh(c)
  node (l, r): g = [hl, hr] @ U + b_node; (i, fl, fr, o, u) = 5 x 150
               c = sig(i)*tanh(u) + sig(fl)*cl + sig(fr)*cr; h = sig(o)*tanh(c)
  every labelled node: loss += cross_entropy(h @ W_out + b_out, label)  (SUM, not mean)
  Adagrad lr 0.05, batches of 25 trees, shuffled per epoch.

Run with /usr/bin/python3 (Debian PyTorch 1.13); see README.md and run_peer.sh for the
fair environment (docs/benchmarks.md).
"""
import argparse
import functools
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

EMB, HID, NCLS = pc.EMB, pc.HID, pc.NCLS
PARAM_NAMES = ["emb", "W_leaf", "b_leaf", "U", "b_node", "W_out", "b_out"]


def shapes(ncls=NCLS):
    """The parameters' shapes in checkpoint order (the embedding's rows: the vocabulary)."""
    return {"emb": (0, EMB), "W_leaf": (EMB, 3 * HID), "b_leaf": (3 * HID,),
            "U": (2 * HID, 5 * HID), "b_node": (5 * HID,), "W_out": (HID, ncls),
            "b_out": (ncls,)}


def TreeLSTMParams(vocab_size, sparse_emb=True, init=None, dtype=torch.float32, ncls=NCLS):
    """The parameter module (peer_common.Params) of the TreeLSTM with ncls classes."""
    return pc.Params(shapes(ncls), vocab_size, sparse_emb=sparse_emb, init=init, dtype=dtype)


# ----------------------------------------------------------------------------------------
# Data: binary trees (peer_common's, with child arrays and per-tree tensors)
# ----------------------------------------------------------------------------------------
def load_trees(path, limit=None):
    """The file's trees, every inner node with exactly two children; t.left / t.right: each
    node's children (-1 at a leaf), for the naive style."""
    trees = pc.load_trees(path, limit, max_kids=2, min_kids=2)
    for t in trees:
        inner = np.diff(t.kid_ptr) > 0
        first = t.kid_ptr[:-1][inner]
        t.left = np.full(t.n, -1, dtype=np.int64)
        t.right = np.full(t.n, -1, dtype=np.int64)
        t.left[inner] = t.kid_idx[first]
        t.right[inner] = t.kid_idx[first + 1]
    return trees


def attach_ids(trees, vocab):
    pc.attach_ids(trees, vocab)
    for t in trees:
        # per-tree tensors for the naive style (built at load time, outside the timed loop)
        t.w_t = torch.from_numpy(np.maximum(t.words, 0))
        t.lab_t = torch.from_numpy(t.label.copy())


# ----------------------------------------------------------------------------------------
# Naive: recursive per node, per tree
# ----------------------------------------------------------------------------------------
def naive_tree(P, t, losses, want_loss=True, drop=0.0):
    """Evaluates tree t recursively; appends per-node losses; returns (h, c) of the root.
    drop > 0: training dropout on each word vector and on h before the classifier."""
    left, right, lab = t.left, t.right, t.label
    w_t, lab_t = t.w_t, t.lab_t

    def rec(k):
        l = left[k]
        if l < 0:
            x = P.emb(w_t[k:k + 1])                              # [1,300]
            if drop:
                x = F.dropout(x, drop, True)
            g = torch.addmm(P.b_leaf, x, P.W_leaf)               # [1,450]
            i, o, u = g.chunk(3, 1)
            c = torch.sigmoid(i) * torch.tanh(u)
        else:
            hl, cl = rec(l)
            hr, cr = rec(right[k])
            g = torch.addmm(P.b_node, torch.cat([hl, hr], 1), P.U)   # [1,750]
            i, fl, fr, o, u = g.chunk(5, 1)
            c = (torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl
                 + torch.sigmoid(fr) * cr)
        h = torch.sigmoid(o) * torch.tanh(c)
        if want_loss and lab[k] >= 0:
            hd = F.dropout(h, drop, True) if drop else h    # the parent reads h undropped
            logits = torch.addmm(P.b_out, hd, P.W_out)
            losses.append(F.cross_entropy(logits, lab_t[k:k + 1], reduction="sum"))
        return h, c

    return rec(t.n - 1)


def naive_loss(P, trees, drop=0.0):
    total = None
    nlab = 0
    for t in trees:
        losses = []
        naive_tree(P, t, losses, drop=drop)
        nlab += len(losses)
        if losses:
            s = torch.stack(losses).sum()
            total = s if total is None else total + s
    if total is None:
        total = torch.zeros((), requires_grad=True)
    return total, nlab


def naive_predict_roots(P, trees):
    preds = []
    for t in trees:
        h, _ = naive_tree(P, t, None, want_loss=False)
        logits = torch.addmm(P.b_out, h, P.W_out)
        preds.append(int(torch.argmax(logits, 1)))
    return preds


# ----------------------------------------------------------------------------------------
# Level-batched over the minibatch (peer_common.make_levels: nodes by height)
# ----------------------------------------------------------------------------------------
def _leaf_cell(P, words, drop=0.0):
    x = P.emb(words)                                          # [n0,300]
    if drop:
        x = F.dropout(x, drop, True)
    g = torch.addmm(P.b_leaf, x, P.W_leaf)                    # [n0,450]
    # split (not slicing): one SplitBackward (a cat) instead of a zero-fill+copy per slice
    gs, gu = g.split([2 * HID, HID], 1)
    i, o = torch.sigmoid(gs).split([HID, HID], 1)
    c = i * torch.tanh(gu)
    h = o * torch.tanh(c)
    return h, c


def _node_cell(P, hc, cc, n):
    """hc: [n,300] = [hl, hr]; cc: [n,2,150] = [cl; cr]."""
    g = torch.addmm(P.b_node, hc, P.U)                        # [n,750]
    gs, gu = g.split([4 * HID, HID], 1)
    i, f, o = torch.sigmoid(gs).split([HID, 2 * HID, HID], 1)  # f = [fl, fr]
    c = i * torch.tanh(gu) + (f.reshape(n, 2, HID) * cc).sum(1)
    h = o * torch.tanh(c)
    return h, c


GATHER = "buffer"


def batched_states(P, L, drop=0.0):
    """Returns H: all nodes' h, [N,150], in level-plan position order (by height).
    drop > 0: training dropout on the word vectors."""
    h, c = _leaf_cell(P, L.leaf_words, drop)
    if GATHER == "buffer":
        # one [N,150] buffer per state, written level by level in place (DGL frame style)
        H = h.new_empty((L.n, HID))
        C = h.new_empty((L.n, HID))
        n0 = h.shape[0]
        H[:n0] = h
        C[:n0] = c
        for start, n, kids, _, _ in L.levels:  # kids: [l0, r0, l1, r1, ...] positions
            hc = H.index_select(0, kids).view(n, 2 * HID)
            cc = C.index_select(0, kids).view(n, 2, HID)
            h, c = _node_cell(P, hc, cc, n)
            H[start:start + n] = h
            C[start:start + n] = c
        return H
    # "cat": gather from the concatenation of all previous levels (TF Fold style)
    Hs, Cs = [h], [c]
    for start, n, kids, _, _ in L.levels:
        Hprev = Hs[0] if len(Hs) == 1 else torch.cat(Hs, 0)
        Cprev = Cs[0] if len(Cs) == 1 else torch.cat(Cs, 0)
        hc = Hprev.index_select(0, kids).view(n, 2 * HID)     # [hl, hr]
        cc = Cprev.index_select(0, kids).view(n, 2, HID)      # [cl; cr]
        h, c = _node_cell(P, hc, cc, n)
        Hs.append(h)
        Cs.append(c)
    return Hs[0] if len(Hs) == 1 else torch.cat(Hs, 0)


def batched_loss(P, trees, plan=None, drop=0.0):
    L = plan if plan is not None else pc.make_levels(trees)
    return pc.labelled_loss(P, batched_states(P, L, drop), L, drop)


def batched_predict_roots(P, trees):
    L = pc.make_levels(trees, with_labels=False)
    return pc.root_predictions(P, batched_states(P, L), L)


TINY = pc.BINARY_TINY


class TreeLSTM(pc.Peer):
    """The model for peer_common's driver pieces (setup, self-check, loss and gradients)."""
    name = "treelstm"
    shapes = shapes()
    max_kids = min_kids = 2
    naive_loss = staticmethod(naive_loss)
    batched_loss = staticmethod(batched_loss)
    tiny = TINY

    def load(self, path, limit=None):
        return load_trees(path, limit)

    def attach(self, trees, vocab):
        attach_ids(trees, vocab)

    def predict_roots(self, P, trees, style):
        return (naive_predict_roots if style == "naive" else batched_predict_roots)(P, trees)


PEER = TreeLSTM()


# ----------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------
def loss_fn(style):
    return naive_loss if style == "naive" else batched_loss


def predict(P, style, trees, infer_batch):
    with torch.no_grad():
        if style == "naive":
            return naive_predict_roots(P, trees)
        out = []
        for b in pc.batches_of(trees, infer_batch):
            out.extend(batched_predict_roots(P, b))
        return out


def root_labels(trees):
    return [int(t.label[t.n - 1]) for t in trees]


def cmd_train(args):
    import treelstm_paper as paper       # the paper setup: --labels, --weight-decay, --dev-scores
    torch.manual_seed(args.seed)
    init, vocab, train, dev, load_s = pc.setup_data(PEER, args, args.dev)
    test = []
    if args.test:
        test = load_trees(args.test)
        attach_ids(test, vocab)
    train, dev, test, ncls = paper.prepare(args, train, dev, test)
    if not train:
        sys.exit("no training trees (--train)")
    scored = args.dev_scores or bool(test)
    if scored and not dev:
        sys.exit("--dev-scores and --test need --dev")
    P = TreeLSTMParams(len(vocab), sparse_emb=bool(args.sparse_emb), init=init, ncls=ncls)
    opt = torch.optim.Adagrad(P.parameters(), lr=args.lr)
    lf = loss_fn(args.style)
    if args.dropout:
        lf = functools.partial(lf, drop=args.dropout)
    best = paper.BestByDev()
    decay = paper.parse_param_decay(args.param_decay)
    wd = args.weight_decay
    decay_step = (lambda P: paper.apply_weight_decay(P, wd, decay)) if (wd or decay) else None
    rng = np.random.RandomState(args.seed)
    infer_set = dev if (args.infer_on == "dev" and dev) else train
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(train))
        bl = pc.batches_of([train[k] for k in perm], args.batch)
        total_loss, total_nodes, train_s = pc.timed_epoch(P, opt, lf, bl, decay_step)
        age_at_train_end = pc.process_age_s()

        t1 = time.perf_counter()
        preds = predict(P, args.style, infer_set, args.infer_batch)
        infer_s = time.perf_counter() - t1
        acc_set = dev if dev else train
        if acc_set is not infer_set:
            preds = predict(P, args.style, acc_set, args.infer_batch)   # untimed
        gold = root_labels(acc_set)
        acc = sum(int(p == g) for p, g in zip(preds, gold)) / max(1, len(gold))
        rec = {
            "epoch": epoch, "style": args.style, **pc.rate("train", len(train), train_s),
            **pc.rate("infer", len(infer_set), infer_s),
            "infer_on": "dev" if infer_set is dev else "train",
            "loss_per_node": total_loss / max(1, total_nodes),
            "root_acc": acc, "acc_on": "dev" if dev else "train",
            **pc.run_fields(args, load_s, age_at_train_end),
        }
        if scored:
            rec["dev_root_acc"], rec["dev_node_acc"] = paper.scores(P, dev, args.infer_batch)
            rec.update(labels=args.labels, dropout=args.dropout, weight_decay=args.weight_decay,
                       param_decay=paper.parse_param_decay(args.param_decay))
            best.update(epoch, rec["dev_root_acc"], P, keep_params=bool(test))
        pc.emit(args, rec, "epoch %d %s: train %.1f trees/s (%.2fs), infer %.1f trees/s, "
                "loss/node %.4f, root acc %.4f (%s)" % (
                    epoch, args.style, rec["train_trees_per_s"], train_s,
                    rec["infer_trees_per_s"], rec["loss_per_node"], acc, rec["acc_on"]))
    if scored:
        summary = {"summary": True, "epochs": args.epochs, "best_epoch": best.epoch,
                   "best_dev_root_acc": best.acc}
        if test:
            P.load_state_dict(best.state)
            summary["test_trees"] = len(test)
            summary["test_root_acc"], summary["test_node_acc"] = paper.scores(
                P, test, args.infer_batch)
        print(json.dumps(summary), flush=True)


def cmd_loss_only(args):
    if not args.checkpoint:
        sys.exit("--loss-only needs --checkpoint")
    data = args.data or args.train
    if not data:
        sys.exit("--loss-only needs --data FILE")
    init, vocab = pc.read_checkpoint(args.checkpoint, PARAM_NAMES)
    trees = load_trees(data)
    attach_ids(trees, vocab)
    b = trees[args.batch_index * args.batch:(args.batch_index + 1) * args.batch]
    if not b:
        sys.exit("batch %d is empty (%d trees)" % (args.batch_index, len(trees)))
    out = {"batch_index": args.batch_index, "batch": args.batch, "trees": len(b),
           "nodes": int(sum(t.n for t in b))}
    for style in ("naive", "batched"):
        loss, nlab, grads = pc.loss_and_grads(PEER, style, init, len(vocab), b)
        out["labelled_nodes"] = nlab
        out["loss_" + style] = loss
        out["grad_norm_" + style] = {n: float(g.double().norm()) for n, g in grads.items()}
    if args.grads_out:
        # batched-style gradients, in the checkpoint format (same names and shapes)
        _, _, grads = pc.loss_and_grads(PEER, "batched", init, len(vocab), b)
        pc.write_checkpoint(args.grads_out, grads, vocab, PARAM_NAMES)
        out["grads_out"] = args.grads_out
    print(json.dumps(out))


def cmd_self_check(args):
    """peer_check's naive vs batched checks, and two Adagrad steps of each style."""
    import peer_check
    torch.manual_seed(args.seed)
    _, src, trees, vocab, init2, _, all_ok = peer_check.setup(PEER, args, args.data or args.train)
    batches = pc.batches_of(trees, args.batch)[:3]
    all_ok = peer_check.styles(PEER, init2, len(vocab), batches) and all_ok

    # Two Adagrad steps. Adagrad's first step is lr*sign(g) wherever |g| >> eps, so float32
    # rounding noise on near-zero gradients is amplified: compare in float64 (naive vs
    # batched, and the sparse vs dense embedding update of the batched style).
    def two_steps(style, sparse, dtype):
        P = TreeLSTMParams(len(vocab), sparse_emb=sparse, init=init2, dtype=dtype)
        opt = torch.optim.Adagrad(P.parameters(), lr=0.05)
        for b in batches[:2]:
            opt.zero_grad(set_to_none=True)
            loss, _ = loss_fn(style)(P, b)
            loss.backward()
            opt.step()
        return P

    def maxdiff(A, B):
        return max(float((A.param(n).double() - B.param(n).double()).abs().max())
                   for n in PARAM_NAMES)

    d64 = maxdiff(two_steps("naive", False, torch.float64),
                  two_steps("batched", True, torch.float64))
    d32 = maxdiff(two_steps("batched", True, torch.float64),
                  two_steps("batched", False, torch.float64))
    good = d64 <= 1e-8 and d32 <= 1e-8
    print("two Adagrad steps: naive(dense emb) vs batched(sparse emb) in f64 max |dW| %.2g; "
          "batched sparse vs dense emb in f64 max |dW| %.2g -> %s"
          % (d64, d32, "ok" if good else "FAIL"))
    all_ok = all_ok and good
    peer_check.done(PEER, src, all_ok)


def cmd_write_checkpoint(args):
    _, vocab, _, _, _ = pc.setup_data(PEER, args, args.dev)
    pc.write_fresh_checkpoint(PEER, args, vocab)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    pc.add_run_args(ap)
    ap.add_argument("--dev")
    ap.add_argument("--data", help="data file for --loss-only / --self-check")
    ap.add_argument("--infer-batch", type=int, default=25,
                    help="trees per forward in batched inference (default 25)")
    ap.add_argument("--infer-on", choices=["train", "dev"], default="train",
                    help="set timed for inference trees/s (default train; dev if given)")
    # the paper setup (treelstm_paper.py); the defaults leave the benchmark peer as it was
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="training dropout on the word vectors and before the classifier, "
                    "as examples/treelstm/treelstm_dropout.pe (default 0: off)")
    ap.add_argument("--labels", choices=["fine", "binary"], default="fine",
                    help="binary: SST binary as pejit's --labels binary (2 classes)")
    ap.add_argument("--weight-decay", type=float, default=0.0,
                    help="L2: g += wd * p; the embedding's touched rows only, as pejit")
    ap.add_argument("--param-decay", action="append", metavar="NAME=WD",
                    help="this parameter's weight decay, as pejit's (repeatable)")
    ap.add_argument("--dev-scores", action="store_true",
                    help="per epoch dev_root_acc and dev_node_acc as pejit scores them, and a "
                    "last summary line with the best epoch by dev root accuracy")
    ap.add_argument("--test", help="with --dev: score this set with the best epoch's weights "
                    "(in the summary line; implies --dev-scores)")
    ap.add_argument("--paper-check", action="store_true",
                    help="check the paper setup (exit 0 = PASS); with --pejit BIN and "
                    "--model-dir DIR also against pejit eval")
    ap.add_argument("--pejit", help="pejit binary for --paper-check")
    ap.add_argument("--model-dir", help="examples/treelstm for --paper-check")
    ap.add_argument("--loss-only", action="store_true")
    ap.add_argument("--batch-index", type=int, default=0)
    ap.add_argument("--grads-out", help="with --loss-only: write batched gradients here "
                    "(checkpoint format)")
    args = ap.parse_args()
    pc.setup_torch(args)

    if args.paper_check:
        import treelstm_paper
        treelstm_paper.paper_check(args)
    elif args.self_check:
        cmd_self_check(args)
    elif args.loss_only:
        cmd_loss_only(args)
    elif args.write_checkpoint:
        cmd_write_checkpoint(args)
    else:
        if not args.train:
            ap.error("--train is required")
        cmd_train(args)


if __name__ == "__main__":
    main()
