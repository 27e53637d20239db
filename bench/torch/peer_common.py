#!/usr/bin/python3
"""What the PyTorch peers share (treelstm_torch.py, childsum_torch.py, treegru_torch.py): n-ary
SST trees in post-order arrays, the vocabulary, pejit checkpoints, the level plan of a minibatch
(nodes by height, children as positions) and the classifier over its states, and the driver:
the options, the timed training epoch and its JSON record, and --write-checkpoint; --self-check
(the naive recursive style against the level-batched one, and against pejit's own loss through
`pejit eval`) is peer_check.py. A peer module supplies its parameter shapes and its two styles
(a Peer).

Run with /usr/bin/python3 (Debian PyTorch 1.13); fairness rules as bench/torch/README.md.
"""
import argparse
import json
import os
import re
import sys
import time

import numpy as np
import torch
import torch.nn as nn

EMB = 300
HID = 150
NCLS = 5


def process_age_s():
    """Seconds since this process started (from /proc)."""
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
# Data: n-ary trees in post-order (children before parents, root last)
# ----------------------------------------------------------------------------------------
_TOK = re.compile(r"\(|\)|[^\s()]+")


class Tree:
    # left/right, w_t/lab_t: a binary peer's child arrays and per-tree tensors for its naive
    # style (treelstm_torch.py sets them).
    __slots__ = ("tokens", "label", "kid_ptr", "kid_idx", "height", "words", "n",
                 "left", "right", "w_t", "lab_t")

    def __init__(self, tokens, kids, label):
        self.tokens = tokens                       # token per node (None: internal)
        self.label = np.asarray(label, dtype=np.int64)  # -1: no label
        n = len(tokens)
        self.n = n
        counts = np.array([len(k) for k in kids], dtype=np.int64)
        self.kid_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=self.kid_ptr[1:])
        self.kid_idx = np.array([c for k in kids for c in k], dtype=np.int64)
        h = np.zeros(n, dtype=np.int64)
        for v in range(n):
            if kids[v]:
                h[v] = 1 + max(h[c] for c in kids[v])
        self.height = h
        self.words = None

    def kids(self, v):
        return self.kid_idx[self.kid_ptr[v]:self.kid_ptr[v + 1]]


def parse_tree(line, max_kids=None, min_kids=1):
    """`(label token)` leaves, `(label child ...)` nodes of min_kids to max_kids children (None:
    any number); `-` means no label."""
    toks = _TOK.findall(line)
    tokens, kids, label = [], [], []
    stack, result, pos = [], None, 0
    while pos < len(toks):
        t = toks[pos]
        if t == "(":
            lab = toks[pos + 1]
            pos += 2
            if pos < len(toks) and toks[pos] not in ("(", ")"):
                end = pos  # a token with spaces ("8 1\\/2") is the words up to ")"
                while end < len(toks) and toks[end] not in ("(", ")"):
                    end += 1
                if end >= len(toks) or toks[end] != ")":
                    raise ValueError("bad leaf near token %d: %r" % (pos, line[:80]))
                idx = len(tokens)
                tokens.append(" ".join(toks[pos:end]))
                kids.append([])
                label.append(-1 if lab == "-" else int(lab))
                pos = end + 1
                if stack:
                    stack[-1][1].append(idx)
                else:
                    result = idx
            else:
                stack.append([lab, []])
        elif t == ")":
            lab, ks = stack.pop()
            pos += 1
            if len(ks) < max(1, min_kids) or (max_kids is not None and len(ks) > max_kids):
                raise ValueError("internal node with %d children: %r" % (len(ks), line[:80]))
            idx = len(tokens)
            tokens.append(None)
            kids.append(ks)
            label.append(-1 if lab == "-" else int(lab))
            if stack:
                stack[-1][1].append(idx)
            else:
                result = idx
        else:
            raise ValueError("unexpected token %r in %r" % (t, line[:80]))
    if stack or result != len(tokens) - 1:
        raise ValueError("unbalanced tree: %r" % line[:80])
    return Tree(tokens, kids, label)


def load_trees(path, limit=None, max_kids=None, min_kids=1):
    """The first `limit` trees of the file (all of them when limit is None or <= 0)."""
    trees = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            trees.append(parse_tree(line, max_kids, min_kids))
            if limit is not None and limit > 0 and len(trees) >= limit:
                break
    return trees


def build_vocab(trees):
    vocab, index = ["<unk>"], {"<unk>": 0}
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


# ----------------------------------------------------------------------------------------
# Checkpoints (pejit format: one JSON line + '\n' + blob of little-endian f32, offsets % 64 == 0)
# ----------------------------------------------------------------------------------------
def read_checkpoint(path, names):
    """(params by name, vocabulary); every one of `names` must be there."""
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
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError("checkpoint lacks params %s" % missing)
    return params, list(header["vocab"])


def write_checkpoint(path, params, vocab, names):
    """params: name -> tensor (any float dtype; written as f32), written in `names` order."""
    entries, chunks, off = [], [], 0
    for name in names:
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


class Params(nn.Module):
    """The model's parameters by pejit name: `shapes` (name -> shape, in checkpoint order;
    the embedding's rows are the vocabulary's), `emb` an nn.Embedding (sparse gradients by
    default), initialized as the .pe file says
    (normal(0, 0.1) embedding, xavier matrices, zero biases) or from `init`."""

    def __init__(self, shapes, vocab_size, sparse_emb=True, init=None, dtype=torch.float32):
        super().__init__()
        self.names = list(shapes)
        self.emb = nn.Embedding(vocab_size, EMB, sparse=sparse_emb)
        for n, s in shapes.items():
            if n != "emb":
                setattr(self, n, nn.Parameter(torch.zeros(*s)))
        with torch.no_grad():
            for n in self.names:
                p = self.param(n)
                if init is not None:
                    if tuple(init[n].shape) != tuple(p.shape):
                        raise ValueError("param %s: shape %s, expected %s"
                                         % (n, tuple(init[n].shape), tuple(p.shape)))
                    p.copy_(init[n])
                elif n == "emb":
                    nn.init.normal_(p, 0.0, 0.1)
                elif p.dim() == 2:
                    nn.init.xavier_uniform_(p)
        self.to(dtype)

    def param(self, name):
        return self.emb.weight if name == "emb" else getattr(self, name)

    def named(self):
        return [(n, self.param(n)) for n in self.names]


# ----------------------------------------------------------------------------------------
# The level plan of a minibatch
# ----------------------------------------------------------------------------------------
def naive_loss(P, trees, naive_tree):
    """The summed cross-entropy of every labelled node, one tree at a time: naive_tree(P, t,
    each) walks t children first and calls each(v, h_v) per node; returns (loss, labels)."""
    total, nlab = None, 0
    for t in trees:
        terms = []

        def each(v, hv):
            if t.label[v] >= 0:
                terms.append(nn.functional.cross_entropy(
                    torch.addmm(P.b_out, hv, P.W_out), torch.tensor([int(t.label[v])]),
                    reduction="sum"))

        naive_tree(P, t, each)
        nlab += len(terms)
        for x in terms:
            total = x if total is None else total + x
    return total, nlab


class Levels:
    """Nodes of the whole batch ordered by height (leaves first): `leaf_words`; per level
    above the leaves (start position, node count, children's positions flat, each child's
    node within the level); the positions of the roots; the labels of the labelled nodes."""
    __slots__ = ("n", "leaf_words", "levels", "roots", "labels", "lab_pos", "all_labelled")


def make_levels(trees, with_labels=True):
    sizes = np.fromiter((t.n for t in trees), dtype=np.int64, count=len(trees))
    offs = np.zeros(len(trees), dtype=np.int64)
    np.cumsum(sizes[:-1], out=offs[1:])
    N = int(sizes.sum())
    kid_counts = np.concatenate([np.diff(t.kid_ptr) for t in trees])
    kid_ptr = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(kid_counts, out=kid_ptr[1:])
    kid_idx = np.concatenate([t.kid_idx + o for t, o in zip(trees, offs)])
    height = np.concatenate([t.height for t in trees])
    words = np.concatenate([t.words for t in trees])
    order = np.argsort(height, kind="stable")  # position -> node
    pos = np.empty(N, dtype=np.int64)
    pos[order] = np.arange(N, dtype=np.int64)  # node -> position
    counts = np.bincount(height)
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    L = Levels()
    L.n = N
    L.leaf_words = torch.from_numpy(words[order[:bounds[1]]])
    L.levels = []
    for lv in range(1, len(counts)):
        nodes = order[bounds[lv]:bounds[lv + 1]]
        k = kid_counts[nodes]
        first = np.repeat(kid_ptr[nodes], k)
        within = np.arange(int(k.sum()), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
        kids = pos[kid_idx[first + within]]
        seg = np.repeat(np.arange(len(nodes), dtype=np.int64), k)
        L.levels.append((int(bounds[lv]), len(nodes), torch.from_numpy(kids),
                         torch.from_numpy(seg), int(k.max()) == int(k.min()) == 2))
    L.roots = torch.from_numpy(pos[offs + sizes - 1])
    if with_labels:
        lab = np.concatenate([t.label for t in trees])[order]
        mask = lab >= 0
        L.all_labelled = bool(mask.all())
        L.lab_pos = None if L.all_labelled else torch.from_numpy(np.nonzero(mask)[0])
        L.labels = torch.from_numpy(lab[mask])
    return L


def labelled_loss(P, H, L, drop=0.0):
    """The summed cross-entropy of the labelled nodes of states H (rows in L's position
    order), and their count. drop > 0: training dropout before the classifier only (parents
    have read H undropped)."""
    if not L.all_labelled:
        H = H.index_select(0, L.lab_pos)
    if drop:
        H = nn.functional.dropout(H, drop, True)
    logits = torch.addmm(P.b_out, H, P.W_out)
    loss = nn.functional.cross_entropy(logits, L.labels, reduction="sum")
    return loss, int(L.labels.shape[0])


def root_predictions(P, H, L):
    """The classifier's argmax at the roots of states H (rows in L's position order)."""
    logits = torch.addmm(P.b_out, H.index_select(0, L.roots), P.W_out)
    return torch.argmax(logits, 1).tolist()


# ----------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------
def batches_of(trees, bs):
    return [trees[k:k + bs] for k in range(0, len(trees), bs)]


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


# Binary trees for the self-checks of the binary models (SST's shapes: labels 0-4 and "-",
# a one-word tree, a deep left spine).
BINARY_TINY = [
    "(3 (2 The) (4 (2 Rock) (2 is)))",
    "(1 (2 (2 a) (1 bad)) (2 (2 movie) (- .)))",
    "(- (2 (3 (2 very) (3 good)) (2 film)) (2 (2 ,) (4 (2 really) (4 (2 is) (3 great)))))",
    "(0 (1 awful) (2 stuff))",
    "(2 solo)",
    "(4 (4 (4 (3 (2 (2 deep) (2 left)) (2 spine)) (2 of)) (2 words)) (3 here))",
]


class Peer:
    """A model: `name`, `shapes`, `max_kids` / `min_kids` (children per inner node), `tiny`
    (trees for the self-check), `model_file` (the .pe file, for --pejit), and its two styles:
    `naive_tree(P, t, each)` (h of every node of t, children first, each(v, h_v) per node) and
    `batched_states(P, L)` (every node's h in L's position order), from which the defaults
    below make `naive_loss(P, trees)`, `batched_loss(P, trees)` (each -> (summed loss,
    labelled nodes)) and `predict_roots(P, trees, style)`."""
    max_kids = None
    min_kids = 1

    def load(self, path, limit=None):
        return load_trees(path, limit, self.max_kids, self.min_kids)

    def attach(self, trees, vocab):
        attach_ids(trees, vocab)

    def naive_loss(self, P, trees):
        return naive_loss(P, trees, self.naive_tree)

    def batched_loss(self, P, trees):
        L = make_levels(trees)
        return labelled_loss(P, self.batched_states(P, L), L)

    def predict_roots(self, P, trees, style):
        if style == "naive":
            out = []
            for t in trees:
                h = self.naive_tree(P, t, lambda v, hv: None)
                out.append(int(torch.argmax(torch.addmm(P.b_out, h[t.n - 1], P.W_out), 1)))
            return out
        L = make_levels(trees, with_labels=False)
        return root_predictions(P, self.batched_states(P, L), L)


def loss_and_grads(peer, style, init, vocab_size, trees, sparse_emb=True):
    P = Params(peer.shapes, vocab_size, sparse_emb=sparse_emb, init=init)
    fn = peer.naive_loss if style == "naive" else peer.batched_loss
    loss, nlab = fn(P, trees)
    loss.backward()
    return float(loss), nlab, grads_of(P)


def setup_data(peer, args, dev=None):
    """(initial params or None, vocabulary, training trees, dev trees, seconds): the vocabulary
    is the --checkpoint's, else the training trees' (first occurrence order, 0 = <unk>)."""
    t_load = time.perf_counter()
    init, vocab = None, None
    if args.checkpoint:
        init, vocab = read_checkpoint(args.checkpoint, list(peer.shapes))
    train = peer.load(args.train, args.limit) if args.train else []
    if vocab is None:
        vocab = build_vocab(train)
    peer.attach(train, vocab)
    dev_trees = []
    if dev:
        dev_trees = peer.load(dev)
        peer.attach(dev_trees, vocab)
    return init, vocab, train, dev_trees, time.perf_counter() - t_load


def timed_epoch(P, opt, loss_fn, batches, before_step=None):
    """One training epoch: per batch zero_grad, loss, backward, before_step(P) (when given),
    Adagrad step. Returns (summed loss, labelled nodes, seconds of the loop)."""
    total, nodes = 0.0, 0
    t0 = time.perf_counter()
    for b in batches:
        opt.zero_grad(set_to_none=True)
        loss, nlab = loss_fn(P, b)
        loss.backward()
        if before_step is not None:
            before_step(P)
        opt.step()
        total += loss.item()
        nodes += nlab
    return total, nodes, time.perf_counter() - t0


def rate(what, trees, seconds):
    """The JSON record's `WHAT_trees`, `WHAT_seconds`, `WHAT_trees_per_s`."""
    return {what + "_trees": trees, what + "_seconds": round(seconds, 4),
            what + "_trees_per_s": round(trees / seconds, 2)}


def run_fields(args, load_s, age_s):
    """The JSON record's closing fields: the run's settings and its load and process times."""
    return {"threads": torch.get_num_threads(), "batch": args.batch,
            "sparse_emb": bool(args.sparse_emb), "load_seconds": round(load_s, 4),
            "process_age_at_train_end_s": round(age_s, 3)}


def emit(args, rec, text):
    """One epoch's record: a JSON line with --json, else the text line."""
    print(json.dumps(rec) if args.json else text, flush=True)


def cmd_train(peer, args):
    torch.manual_seed(args.seed)
    init, vocab, train, _, load_s = setup_data(peer, args)
    P = Params(peer.shapes, len(vocab), sparse_emb=bool(args.sparse_emb), init=init)
    opt = torch.optim.Adagrad(P.parameters(), lr=args.lr)
    lf = peer.naive_loss if args.style == "naive" else peer.batched_loss
    rng = np.random.RandomState(args.seed)
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(train))
        total, nodes, train_s = timed_epoch(P, opt, lf,
                                            batches_of([train[k] for k in perm], args.batch))
        rec = {"epoch": epoch, "model": peer.name, "style": args.style,
               **rate("train", len(train), train_s), "loss_per_node": total / max(1, nodes),
               **run_fields(args, load_s, process_age_s())}
        emit(args, rec, "epoch %d %s %s: train %.1f trees/s (%.2fs), loss/node %.4f" % (
            epoch, peer.name, args.style, rec["train_trees_per_s"], train_s,
            rec["loss_per_node"]))


def write_fresh_checkpoint(peer, args, vocab, shapes=None):
    """--write-checkpoint: weights initialized from --seed, the given vocabulary."""
    torch.manual_seed(args.seed)
    shapes = shapes or peer.shapes
    P = Params(shapes, len(vocab), sparse_emb=False)
    write_checkpoint(args.write_checkpoint, dict(P.named()), vocab, list(shapes))
    print(json.dumps({"checkpoint": args.write_checkpoint, "vocab": len(vocab),
                      "seed": args.seed}))


def add_run_args(ap):
    """The options of a training run that every peer takes."""
    ap.add_argument("--train")
    ap.add_argument("--style", choices=["naive", "batched"], default="batched")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N training trees")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--sparse-emb", type=int, default=1, choices=[0, 1],
                    help="sparse embedding gradients (default 1)")
    ap.add_argument("--checkpoint", help="pejit checkpoint: initial weights and vocabulary")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--write-checkpoint", metavar="OUT",
                    help="write a fresh checkpoint (vocab from --train, init from --seed)")


def setup_torch(args):
    """--threads torch threads, one inter-op thread; deep trees recurse in the naive style."""
    torch.set_num_threads(max(1, args.threads))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100000))


def main(peer, doc):
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(ap)
    ap.add_argument("--data", help="data file for --self-check (default: a tiny generated one)")
    ap.add_argument("--pejit", help="with --self-check: the pejit binary whose loss to match")
    ap.add_argument("--model", help="with --pejit: the .pe file (default: the example's)")
    args = ap.parse_args()
    setup_torch(args)
    if args.self_check:
        import peer_check
        peer_check.cmd_self_check(peer, args)
    elif args.write_checkpoint:
        if not args.train:
            ap.error("--write-checkpoint needs --train (its vocabulary)")
        write_fresh_checkpoint(peer, args, build_vocab(peer.load(args.train, args.limit)))
    else:
        if not args.train:
            ap.error("--train is required")
        cmd_train(peer, args)
