#!/usr/bin/python3
"""PyTorch peer for pejit's headline benchmark: the binary constituency TreeLSTM on SST.

Two implementations share one parameter module (TreeLSTMParams):
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
import math
import os
import re
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

EMB = 300
HID = 150
NCLS = 5
PARAM_NAMES = ["emb", "W_leaf", "b_leaf", "U", "b_node", "W_out", "b_out"]


def process_age_s():
    """Seconds since this process started (from /proc), for time-to-first-epoch figures."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return up - start_ticks / os.sysconf("SC_CLK_TCK")
    except Exception:  # pragma: no cover
        return float("nan")


# ----------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------
_TOK = re.compile(r"\(|\)|[^\s()]+")


class Tree:
    """A binary tree in post-order arrays (children before parents, root last)."""
    __slots__ = ("tokens", "left", "right", "label", "height", "words",
                 "w_t", "lab_t", "n")

    def __init__(self, tokens, left, right, label):
        self.tokens = tokens          # token string per node (None for internal nodes)
        self.left = np.asarray(left, dtype=np.int64)
        self.right = np.asarray(right, dtype=np.int64)
        self.label = np.asarray(label, dtype=np.int64)   # -1 = no label
        n = len(tokens)
        self.n = n
        h = np.zeros(n, dtype=np.int64)
        for k in range(n):
            if left[k] >= 0:
                h[k] = 1 + max(h[left[k]], h[right[k]])
        self.height = h
        self.words = None
        self.w_t = None
        self.lab_t = None


def parse_sst(line):
    toks = _TOK.findall(line)
    tokens, left, right, label = [], [], [], []
    pos = 0

    # iterative parse (deep generated trees would overflow Python recursion)
    # stack entries: [label, child indices list]
    stack = []
    result = None
    while pos < len(toks):
        t = toks[pos]
        if t == "(":
            lab = toks[pos + 1]
            pos += 2
            if pos < len(toks) and toks[pos] not in ("(", ")"):
                # leaf: (label token). SST has a few tokens containing spaces, e.g.
                # "(2 8 1\/2)": the token is the words up to ")" joined by one space.
                end = pos
                while end < len(toks) and toks[end] not in ("(", ")"):
                    end += 1
                if end >= len(toks) or toks[end] != ")":
                    raise ValueError("bad leaf near token %d: %r" % (pos, line[:80]))
                word = " ".join(toks[pos:end])
                pos = end + 1
                idx = len(tokens)
                tokens.append(word)
                left.append(-1)
                right.append(-1)
                label.append(-1 if lab == "-" else int(lab))
                if stack:
                    stack[-1][1].append(idx)
                else:
                    result = idx
            else:
                stack.append([lab, []])
        elif t == ")":
            lab, kids = stack.pop()
            pos += 1
            if len(kids) != 2:
                raise ValueError("internal node with %d children: %r" % (len(kids), line[:80]))
            idx = len(tokens)
            tokens.append(None)
            left.append(kids[0])
            right.append(kids[1])
            label.append(-1 if lab == "-" else int(lab))
            if stack:
                stack[-1][1].append(idx)
            else:
                result = idx
        else:
            raise ValueError("unexpected token %r in %r" % (t, line[:80]))
    if stack or result != len(tokens) - 1:
        raise ValueError("unbalanced tree: %r" % line[:80])
    return Tree(tokens, left, right, label)


def load_trees(path, limit=None):
    trees = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            trees.append(parse_sst(line))
            if limit is not None and limit > 0 and len(trees) >= limit:
                break
    return trees


def build_vocab(trees):
    vocab = ["<unk>"]
    index = {"<unk>": 0}
    for t in trees:
        for w in t.tokens:
            if w is not None and w not in index:
                index[w] = len(vocab)
                vocab.append(w)
    return vocab


def attach_ids(trees, vocab):
    index = {w: i for i, w in enumerate(vocab)}
    for t in trees:
        t.words = np.array([index.get(w, 0) if w is not None else -1 for w in t.tokens],
                           dtype=np.int64)
        # per-tree tensors for the naive style (built at load time, outside the timed loop)
        t.w_t = torch.from_numpy(np.maximum(t.words, 0))
        t.lab_t = torch.from_numpy(t.label.copy())


# ----------------------------------------------------------------------------------------
# Checkpoint (pejit format: one JSON line + '\n' + blob of little-endian f32, offsets % 64 == 0)
# ----------------------------------------------------------------------------------------
def read_checkpoint(path):
    with open(path, "rb") as f:
        raw = f.read()
    nl = raw.index(b"\n")
    header = json.loads(raw[:nl].decode("utf-8"))
    if header.get("format") != "pejit-checkpoint" or header.get("version") not in (1, 2):
        raise ValueError("%s: not a pejit-checkpoint of version 1 or 2" % path)
    base = nl + 1
    blob_len = len(raw) - base
    if "data_bytes" in header and header["data_bytes"] > blob_len:
        raise ValueError("%s: truncated blob (%d < %d)" % (path, blob_len, header["data_bytes"]))
    params = {}
    for p in header["params"]:
        if p.get("dtype", "f32") != "f32":
            raise ValueError("unsupported dtype %r" % p.get("dtype"))
        shape = [int(s) for s in p["shape"]]
        count = int(np.prod(shape)) if shape else 1
        off = int(p["offset"])
        if off + 4 * count > blob_len:
            raise ValueError("param %s runs past the blob" % p["name"])
        arr = np.frombuffer(raw, dtype="<f4", count=count, offset=base + off).reshape(shape)
        params[p["name"]] = torch.from_numpy(arr.astype(np.float32))
    missing = [n for n in PARAM_NAMES if n not in params]
    if missing:
        raise ValueError("checkpoint lacks params %s" % missing)
    return params, list(header["vocab"])


def write_checkpoint(path, params, vocab):
    """params: dict name -> tensor (any float dtype; written as f32)."""
    entries, chunks, off = [], [], 0
    for name in PARAM_NAMES:
        a = np.ascontiguousarray(params[name].detach().cpu().numpy().astype("<f4"))
        entries.append({"name": name, "dtype": "f32", "shape": list(a.shape), "offset": off})
        b = a.tobytes()
        pad = (-len(b)) % 64
        chunks.append(b + b"\0" * pad)
        off += len(b) + pad
    header = {"format": "pejit-checkpoint", "version": 1, "params": entries,
              "vocab": list(vocab), "data_bytes": off}
    with open(path, "wb") as f:
        f.write(json.dumps(header, separators=(",", ":")).encode("utf-8"))
        f.write(b"\n")
        for c in chunks:
            f.write(c)


# ----------------------------------------------------------------------------------------
# Parameters
# ----------------------------------------------------------------------------------------
class TreeLSTMParams(nn.Module):
    def __init__(self, vocab_size, sparse_emb=True, init=None, dtype=torch.float32, ncls=NCLS):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, EMB, sparse=sparse_emb)
        self.W_leaf = nn.Parameter(torch.empty(EMB, 3 * HID))
        self.b_leaf = nn.Parameter(torch.zeros(3 * HID))
        self.U = nn.Parameter(torch.empty(2 * HID, 5 * HID))
        self.b_node = nn.Parameter(torch.zeros(5 * HID))
        self.W_out = nn.Parameter(torch.empty(HID, ncls))
        self.b_out = nn.Parameter(torch.zeros(ncls))
        with torch.no_grad():
            if init is None:
                nn.init.normal_(self.emb.weight, 0.0, 0.1)
                nn.init.xavier_uniform_(self.W_leaf)
                nn.init.xavier_uniform_(self.U)
                nn.init.xavier_uniform_(self.W_out)
            else:
                for name in PARAM_NAMES:
                    dst = self.param(name)
                    src = init[name]
                    if tuple(src.shape) != tuple(dst.shape):
                        raise ValueError("param %s: shape %s, expected %s"
                                         % (name, tuple(src.shape), tuple(dst.shape)))
                    dst.copy_(src)
        self.to(dtype)

    def param(self, name):
        return self.emb.weight if name == "emb" else getattr(self, name)

    def named(self):
        return [(n, self.param(n)) for n in PARAM_NAMES]


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
# Level-batched over the minibatch
# ----------------------------------------------------------------------------------------
class BatchPlan:
    """Index tensors for one minibatch: nodes ordered by height, children as positions."""
    __slots__ = ("leaf_words", "levels", "labels", "lab_pos", "all_labelled", "roots", "n")


def make_plan(trees, with_labels=True):
    sizes = np.fromiter((t.n for t in trees), dtype=np.int64, count=len(trees))
    offs = np.zeros(len(trees), dtype=np.int64)
    np.cumsum(sizes[:-1], out=offs[1:])
    N = int(sizes.sum())
    off_rep = np.repeat(offs, sizes)
    left = np.concatenate([t.left for t in trees])
    right = np.concatenate([t.right for t in trees])
    height = np.concatenate([t.height for t in trees])
    words = np.concatenate([t.words for t in trees])
    internal = left >= 0
    left = np.where(internal, left + off_rep, -1)
    right = np.where(internal, right + off_rep, -1)

    order = np.argsort(height, kind="stable")      # position -> global node
    pos = np.empty(N, dtype=np.int64)
    pos[order] = np.arange(N, dtype=np.int64)       # global node -> position
    counts = np.bincount(height)
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])

    plan = BatchPlan()
    plan.n = N
    plan.leaf_words = torch.from_numpy(words[order[:bounds[1]]])
    levels = []
    for lv in range(1, len(counts)):
        nodes = order[bounds[lv]:bounds[lv + 1]]
        idx2 = np.empty((len(nodes), 2), dtype=np.int64)
        idx2[:, 0] = pos[left[nodes]]
        idx2[:, 1] = pos[right[nodes]]
        levels.append((int(bounds[lv]), torch.from_numpy(idx2.reshape(-1))))
    plan.levels = levels
    plan.roots = torch.from_numpy(pos[offs + sizes - 1])
    if with_labels:
        lab = np.concatenate([t.label for t in trees])[order]
        mask = lab >= 0
        plan.all_labelled = bool(mask.all())
        plan.lab_pos = None if plan.all_labelled else torch.from_numpy(np.nonzero(mask)[0])
        plan.labels = torch.from_numpy(lab[mask])
    return plan


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


def batched_states(P, plan, drop=0.0):
    """Returns H: all nodes' h, [N,150], in plan position order (by height).
    drop > 0: training dropout on the word vectors."""
    h, c = _leaf_cell(P, plan.leaf_words, drop)
    if GATHER == "buffer":
        # one [N,150] buffer per state, written level by level in place (DGL frame style)
        H = h.new_empty((plan.n, HID))
        C = h.new_empty((plan.n, HID))
        n0 = h.shape[0]
        H[:n0] = h
        C[:n0] = c
        for start, idx2 in plan.levels:
            n = idx2.shape[0] // 2
            hc = H.index_select(0, idx2).view(n, 2 * HID)
            cc = C.index_select(0, idx2).view(n, 2, HID)
            h, c = _node_cell(P, hc, cc, n)
            H[start:start + n] = h
            C[start:start + n] = c
        return H
    # "cat": gather from the concatenation of all previous levels (TF Fold style)
    Hs, Cs = [h], [c]
    for start, idx2 in plan.levels:
        Hprev = Hs[0] if len(Hs) == 1 else torch.cat(Hs, 0)
        Cprev = Cs[0] if len(Cs) == 1 else torch.cat(Cs, 0)
        n = idx2.shape[0] // 2
        hc = Hprev.index_select(0, idx2).view(n, 2 * HID)     # [hl, hr]
        cc = Cprev.index_select(0, idx2).view(n, 2, HID)      # [cl; cr]
        h, c = _node_cell(P, hc, cc, n)
        Hs.append(h)
        Cs.append(c)
    return Hs[0] if len(Hs) == 1 else torch.cat(Hs, 0)


def batched_loss(P, trees, plan=None, drop=0.0):
    if plan is None:
        plan = make_plan(trees)
    H = batched_states(P, plan, drop)
    if not plan.all_labelled:
        H = H.index_select(0, plan.lab_pos)
    if drop:
        H = F.dropout(H, drop, True)      # before the classifier only: parents read H undropped
    logits = torch.addmm(P.b_out, H, P.W_out)
    loss = F.cross_entropy(logits, plan.labels, reduction="sum")
    return loss, int(plan.labels.shape[0])


def batched_predict_roots(P, trees):
    plan = make_plan(trees, with_labels=False)
    H = batched_states(P, plan)
    logits = torch.addmm(P.b_out, H.index_select(0, plan.roots), P.W_out)
    return torch.argmax(logits, 1).tolist()


# ----------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------
def batches_of(trees, bs):
    return [trees[k:k + bs] for k in range(0, len(trees), bs)]


def loss_fn(style):
    return naive_loss if style == "naive" else batched_loss


def predict(P, style, trees, infer_batch):
    with torch.no_grad():
        if style == "naive":
            return naive_predict_roots(P, trees)
        out = []
        for b in batches_of(trees, infer_batch):
            out.extend(batched_predict_roots(P, b))
        return out


def root_labels(trees):
    return [int(t.label[t.n - 1]) for t in trees]


def grads_of(P):
    out = {}
    for name, p in P.named():
        g = p.grad
        if g is None:
            g = torch.zeros_like(p)
        elif g.is_sparse:
            g = g.coalesce().to_dense()
        out[name] = g.detach().clone()
    return out


def loss_and_grads(style, init, vocab_size, trees, sparse_emb=True):
    P = TreeLSTMParams(vocab_size, sparse_emb=sparse_emb, init=init)
    loss, nlab = loss_fn(style)(P, trees)
    loss.backward()
    return float(loss), nlab, grads_of(P)


def setup_data(args, need_train=True):
    t_load = time.perf_counter()
    init, vocab = None, None
    if args.checkpoint:
        init, vocab = read_checkpoint(args.checkpoint)
    train = load_trees(args.train, args.limit) if need_train and args.train else []
    if vocab is None:
        vocab = build_vocab(train)
    attach_ids(train, vocab)
    dev = []
    if args.dev:
        dev = load_trees(args.dev)
        attach_ids(dev, vocab)
    return init, vocab, train, dev, time.perf_counter() - t_load


def cmd_train(args):
    import treelstm_paper as paper       # the paper setup: --labels, --weight-decay, --dev-scores
    torch.manual_seed(args.seed)
    init, vocab, train, dev, load_s = setup_data(args)
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
    rng = np.random.RandomState(args.seed)
    infer_set = dev if (args.infer_on == "dev" and dev) else train
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(train))
        shuffled = [train[k] for k in perm]
        bl = batches_of(shuffled, args.batch)
        total_loss, total_nodes = 0.0, 0
        t0 = time.perf_counter()
        for b in bl:
            opt.zero_grad(set_to_none=True)
            loss, nlab = lf(P, b)
            loss.backward()
            if args.weight_decay or decay:
                paper.apply_weight_decay(P, args.weight_decay, decay)
            opt.step()
            total_loss += loss.item()
            total_nodes += nlab
        train_s = time.perf_counter() - t0
        age_at_train_end = process_age_s()

        t1 = time.perf_counter()
        preds = predict(P, args.style, infer_set, args.infer_batch)
        infer_s = time.perf_counter() - t1
        acc_set = dev if dev else train
        if acc_set is not infer_set:
            preds = predict(P, args.style, acc_set, args.infer_batch)   # untimed
        gold = root_labels(acc_set)
        acc = sum(int(p == g) for p, g in zip(preds, gold)) / max(1, len(gold))
        rec = {
            "epoch": epoch, "style": args.style,
            "train_trees": len(train), "train_seconds": round(train_s, 4),
            "train_trees_per_s": round(len(train) / train_s, 2),
            "infer_trees": len(infer_set), "infer_seconds": round(infer_s, 4),
            "infer_trees_per_s": round(len(infer_set) / infer_s, 2),
            "infer_on": "dev" if infer_set is dev else "train",
            "loss_per_node": total_loss / max(1, total_nodes),
            "root_acc": acc, "acc_on": "dev" if dev else "train",
            "threads": torch.get_num_threads(), "batch": args.batch,
            "sparse_emb": bool(args.sparse_emb), "load_seconds": round(load_s, 4),
            "process_age_at_train_end_s": round(age_at_train_end, 3),
        }
        if scored:
            rec["dev_root_acc"], rec["dev_node_acc"] = paper.scores(P, dev, args.infer_batch)
            rec.update(labels=args.labels, dropout=args.dropout, weight_decay=args.weight_decay,
                       param_decay=paper.parse_param_decay(args.param_decay))
            best.update(epoch, rec["dev_root_acc"], P, keep_params=bool(test))
        if args.json:
            print(json.dumps(rec), flush=True)
        else:
            print("epoch %d %s: train %.1f trees/s (%.2fs), infer %.1f trees/s, "
                  "loss/node %.4f, root acc %.4f (%s)" % (
                      epoch, args.style, rec["train_trees_per_s"], train_s,
                      rec["infer_trees_per_s"], rec["loss_per_node"], acc, rec["acc_on"]),
                  flush=True)
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
    init, vocab = read_checkpoint(args.checkpoint)
    trees = load_trees(data)
    attach_ids(trees, vocab)
    b = trees[args.batch_index * args.batch:(args.batch_index + 1) * args.batch]
    if not b:
        sys.exit("batch %d is empty (%d trees)" % (args.batch_index, len(trees)))
    out = {"batch_index": args.batch_index, "batch": args.batch, "trees": len(b),
           "nodes": int(sum(t.n for t in b))}
    for style in ("naive", "batched"):
        loss, nlab, grads = loss_and_grads(style, init, len(vocab), b)
        out["labelled_nodes"] = nlab
        out["loss_" + style] = loss
        out["grad_norm_" + style] = {n: float(g.double().norm()) for n, g in grads.items()}
    if args.grads_out:
        # batched-style gradients, in the checkpoint format (same names and shapes)
        _, _, grads = loss_and_grads("batched", init, len(vocab), b)
        write_checkpoint(args.grads_out, grads, vocab)
        out["grads_out"] = args.grads_out
    print(json.dumps(out))


TINY = [
    "(3 (2 The) (4 (2 Rock) (2 is)))",
    "(1 (2 (2 a) (1 bad)) (2 (2 movie) (- .)))",
    "(- (2 (3 (2 very) (3 good)) (2 film)) (2 (2 ,) (4 (2 really) (4 (2 is) (3 great)))))",
    "(0 (1 awful) (2 stuff))",
    "(2 solo)",
    "(4 (4 (4 (3 (2 (2 deep) (2 left)) (2 spine)) (2 of)) (2 words)) (3 here))",
]


def cmd_self_check(args):
    torch.manual_seed(args.seed)
    if args.data or args.train:
        trees = load_trees(args.data or args.train, args.limit or 60)
        src = args.data or args.train
    else:
        d = tempfile.mkdtemp(prefix="treelstm_check_")
        src = os.path.join(d, "tiny.txt")
        with open(src, "w") as f:
            f.write("\n".join(TINY * 5 + ["(1 (2 zyzzyva) (1 (2 qwerty) (0 xyzzy)))"]) + "\n")
        trees = load_trees(src)
    # the last tree's new words stay out of the vocabulary, to exercise <unk> (id 0)
    vocab = build_vocab(trees[:-1])
    attach_ids(trees, vocab)
    n_unk = sum(int((t.words == 0).sum()) for t in trees)
    print("%d trees, vocab %d, %d <unk> leaves" % (len(trees), len(vocab), n_unk))
    init_mod = TreeLSTMParams(len(vocab), sparse_emb=False)
    # non-zero biases so that the bias gradients and paths are exercised
    with torch.no_grad():
        for n in ("b_leaf", "b_node", "b_out"):
            init_mod.param(n).normal_(0, 0.1)
    init = {n: p.detach().clone() for n, p in init_mod.named()}

    # checkpoint round trip
    ck = os.path.join(tempfile.mkdtemp(prefix="treelstm_ck_"), "ck.bin")
    write_checkpoint(ck, init, vocab)
    init2, vocab2 = read_checkpoint(ck)
    ok = vocab2 == vocab and all(torch.equal(init[n], init2[n]) for n in PARAM_NAMES)
    print("checkpoint round trip: %s" % ("ok" if ok else "FAIL"))
    all_ok = ok

    batches = batches_of(trees, args.batch)[:3]
    for bi, b in enumerate(batches):
        ln, nn_, gn = loss_and_grads("naive", init2, len(vocab), b)
        for sparse in (True, False):
            lb, nb, gb = loss_and_grads("batched", init2, len(vocab), b, sparse_emb=sparse)
            rel = abs(ln - lb) / max(abs(ln), 1e-30)
            good = rel <= 1e-5 and nn_ == nb
            worst = []
            for n in PARAM_NAMES:
                ref = gn[n]
                tol = 1e-4 * float(ref.abs().max()) + 1e-6
                diff = float((ref - gb[n]).abs().max())
                if not diff <= tol:
                    good = False
                worst.append("%s %.2g/%.2g" % (n, diff, tol))
            print("batch %d (%d trees, %d labelled nodes) sparse_emb=%d: loss naive %.6f "
                  "batched %.6f rel %.2g; grad maxdiff/tol: %s -> %s"
                  % (bi, len(b), nn_, sparse, ln, lb, rel, ", ".join(worst),
                     "ok" if good else "FAIL"))
            all_ok = all_ok and good
        # predictions agree
        P = TreeLSTMParams(len(vocab), init=init2)
        pn = predict(P, "naive", b, args.infer_batch)
        pb = predict(P, "batched", b, args.infer_batch)
        if pn != pb:
            print("batch %d: root predictions differ: FAIL" % bi)
            all_ok = False

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
    print("self-check on %s: %s" % (src, "PASS" if all_ok else "FAIL"))
    sys.exit(0 if all_ok else 1)


def cmd_write_checkpoint(args):
    torch.manual_seed(args.seed)
    _, vocab, train, _, _ = setup_data(args)
    P = TreeLSTMParams(len(vocab), sparse_emb=False)
    write_checkpoint(args.write_checkpoint, {n: p for n, p in P.named()}, vocab)
    print(json.dumps({"checkpoint": args.write_checkpoint, "vocab": len(vocab),
                      "seed": args.seed}))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train")
    ap.add_argument("--dev")
    ap.add_argument("--data", help="data file for --loss-only / --self-check")
    ap.add_argument("--style", choices=["naive", "batched"], default="batched")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--infer-batch", type=int, default=25,
                    help="trees per forward in batched inference (default 25)")
    ap.add_argument("--infer-on", choices=["train", "dev"], default="train",
                    help="set timed for inference trees/s (default train; dev if given)")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N training trees")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--sparse-emb", type=int, default=1, choices=[0, 1],
                    help="sparse embedding gradients (default 1)")
    ap.add_argument("--checkpoint", help="pejit checkpoint: initial weights and vocabulary")
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
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--loss-only", action="store_true")
    ap.add_argument("--batch-index", type=int, default=0)
    ap.add_argument("--grads-out", help="with --loss-only: write batched gradients here "
                    "(checkpoint format)")
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--write-checkpoint", metavar="OUT",
                    help="write a fresh checkpoint (vocab from --train, init from --seed)")
    args = ap.parse_args()

    torch.set_num_threads(max(1, args.threads))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100000))

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
