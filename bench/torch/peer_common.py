#!/usr/bin/python3
"""What the zoo's PyTorch peers share (childsum_torch.py, treegru_torch.py): n-ary SST trees in
post-order arrays, the vocabulary, pejit checkpoints, the level plan of a minibatch (nodes by
height, children as positions), and the driver: training, --self-check (the naive recursive
style against the level-batched one, and against pejit's own loss through `pejit eval`), and
--write-checkpoint. A peer module supplies its parameter module and its two styles.

Run with /usr/bin/python3 (Debian PyTorch 1.13); fairness rules as bench/torch/README.md.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
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
    __slots__ = ("tokens", "label", "kid_ptr", "kid_idx", "height", "words", "n")

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


def parse_tree(line, max_kids=None):
    """`(label token)` leaves, `(label child ...)` nodes of any arity; `-` means no label."""
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
            if not ks or (max_kids is not None and len(ks) > max_kids):
                raise ValueError("node with %d children: %r" % (len(ks), line[:80]))
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


def load_trees(path, limit=None, max_kids=None):
    trees = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            trees.append(parse_tree(line, max_kids))
            if limit:
                if len(trees) >= limit:
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
    with open(path, "rb") as f:
        raw = f.read()
    nl = raw.index(b"\n")
    header = json.loads(raw[:nl].decode("utf-8"))
    if header.get("format") != "pejit-checkpoint":
        raise ValueError("%s: not a pejit-checkpoint" % path)
    base, params = nl + 1, {}
    for p in header["params"]:
        shape = [int(s) for s in p["shape"]]
        count = int(np.prod(shape)) if shape else 1
        arr = np.frombuffer(raw, dtype="<f4", count=count, offset=base + int(p["offset"]))
        params[p["name"]] = torch.from_numpy(arr.reshape(shape).astype(np.float32))
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError("checkpoint lacks params %s" % missing)
    return params, list(header["vocab"])


def write_checkpoint(path, params, vocab, names):
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


class Peer:
    """A model: `name`, `shapes`, `max_kids`, `naive_loss(P, trees)`, `batched_loss(P, trees)`
    (each -> (summed loss, labelled nodes)), `predict_roots(P, trees, style)`, `tiny` (trees
    for the self-check) and `model_file` (the .pe file, for --pejit)."""


def loss_and_grads(peer, style, init, vocab_size, trees, sparse_emb=True):
    P = Params(peer.shapes, vocab_size, sparse_emb=sparse_emb, init=init)
    fn = peer.naive_loss if style == "naive" else peer.batched_loss
    loss, nlab = fn(P, trees)
    loss.backward()
    return float(loss), nlab, grads_of(P)


def cmd_train(peer, args):
    torch.manual_seed(args.seed)
    t_load = time.perf_counter()
    init, vocab = (None, None)
    if args.checkpoint:
        init, vocab = read_checkpoint(args.checkpoint, list(peer.shapes))
    train = load_trees(args.train, args.limit, peer.max_kids)
    if vocab is None:
        vocab = build_vocab(train)
    attach_ids(train, vocab)
    load_s = time.perf_counter() - t_load
    P = Params(peer.shapes, len(vocab), sparse_emb=bool(args.sparse_emb), init=init)
    opt = torch.optim.Adagrad(P.parameters(), lr=args.lr)
    lf = peer.naive_loss if args.style == "naive" else peer.batched_loss
    rng = np.random.RandomState(args.seed)
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(train))
        total, nodes = 0.0, 0
        t0 = time.perf_counter()
        for b in batches_of([train[k] for k in perm], args.batch):
            opt.zero_grad(set_to_none=True)
            loss, nlab = lf(P, b)
            loss.backward()
            opt.step()
            total += loss.item()
            nodes += nlab
        train_s = time.perf_counter() - t0
        rec = {"epoch": epoch, "model": peer.name, "style": args.style,
               "train_trees": len(train), "train_seconds": round(train_s, 4),
               "train_trees_per_s": round(len(train) / train_s, 2),
               "loss_per_node": total / max(1, nodes), "threads": torch.get_num_threads(),
               "batch": args.batch, "sparse_emb": bool(args.sparse_emb),
               "load_seconds": round(load_s, 4),
               "process_age_at_train_end_s": round(process_age_s(), 3)}
        if args.json:
            print(json.dumps(rec), flush=True)
        else:
            print("epoch %d %s %s: train %.1f trees/s (%.2fs), loss/node %.4f" % (
                epoch, peer.name, args.style, rec["train_trees_per_s"], train_s,
                rec["loss_per_node"]), flush=True)


def pejit_loss_per_node(args, peer, ck, data):
    """pejit's loss per labelled node of `data` on checkpoint `ck` (`pejit eval --json`)."""
    out = subprocess.run([args.pejit, "eval", args.model or peer.model_file, "--params", ck,
                          "--data", data, "--batch", str(args.batch), "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("pejit eval failed: %s" % out.stderr.strip())
    return json.loads(out.stdout.strip().splitlines()[-1])["loss"]


def cmd_self_check(peer, args):
    torch.manual_seed(args.seed)
    d = tempfile.mkdtemp(prefix=peer.name + "_check_")
    if args.data:
        trees = load_trees(args.data, args.limit or 60, peer.max_kids)
        src = args.data
    else:
        src = os.path.join(d, "tiny.txt")
        with open(src, "w") as f:
            f.write("\n".join(peer.tiny * 5 + ["(1 (2 zyzzyva) (1 (2 qwerty) (0 xyzzy)))"]) + "\n")
        trees = load_trees(src, None, peer.max_kids)
    vocab = build_vocab(trees[:-1])  # the last tree's words stay <unk> (id 0)
    attach_ids(trees, vocab)
    init_mod = Params(peer.shapes, len(vocab), sparse_emb=False)
    with torch.no_grad():  # non-zero biases: their paths and gradients are exercised
        for n, p in init_mod.named():
            if p.dim() == 1:
                p.normal_(0, 0.1)
    init = {n: p.detach().clone() for n, p in init_mod.named()}
    ck = os.path.join(d, "ck.bin")
    write_checkpoint(ck, init, vocab, list(peer.shapes))
    init2, vocab2 = read_checkpoint(ck, list(peer.shapes))
    all_ok = vocab2 == vocab and all(torch.equal(init[n], init2[n]) for n in peer.shapes)
    print("%d trees, vocab %d; checkpoint round trip: %s" % (len(trees), len(vocab),
                                                             "ok" if all_ok else "FAIL"))
    batches = batches_of(trees, args.batch)[:3]
    for bi, b in enumerate(batches):
        ln, nn_, gn = loss_and_grads(peer, "naive", init2, len(vocab), b)
        for sparse in (True, False):
            lb, nb, gb = loss_and_grads(peer, "batched", init2, len(vocab), b, sparse)
            rel = abs(ln - lb) / max(abs(ln), 1e-30)
            good = rel <= 1e-5 and nn_ == nb
            for n in peer.shapes:
                tol = 1e-4 * float(gn[n].abs().max()) + 1e-6
                good = good and float((gn[n] - gb[n]).abs().max()) <= tol
            print("batch %d (%d trees, %d labelled nodes) sparse_emb=%d: loss naive %.6f "
                  "batched %.6f rel %.2g -> %s" % (bi, len(b), nn_, sparse, ln, lb, rel,
                                                   "ok" if good else "FAIL"))
            all_ok = all_ok and good
        P = Params(peer.shapes, len(vocab), init=init2)
        with torch.no_grad():
            if peer.predict_roots(P, b, "naive") != peer.predict_roots(P, b, "batched"):
                print("batch %d: root predictions differ: FAIL" % bi)
                all_ok = False
    if args.pejit:
        # pejit's loss on the same weights and trees: those whose words are all in the
        # vocabulary (pejit would grow it) and whose nodes are all labelled.
        with open(src) as f:
            lines = [ln for ln in (x.strip() for x in f) if ln][:len(trees)]
        keep = [k for k in range(len(trees) - 1) if (trees[k].label >= 0).all()]
        data = os.path.join(d, "check.txt")
        with open(data, "w") as f:
            f.write("\n".join(lines[k] for k in keep) + "\n")
        total, nodes = 0.0, 0
        for b in batches_of([trees[k] for k in keep], args.batch):
            loss, nlab, _ = loss_and_grads(peer, "batched", init2, len(vocab), b)
            total += loss
            nodes += nlab
        ours = total / max(1, nodes)
        theirs = pejit_loss_per_node(args, peer, ck, data)
        rel = abs(ours - theirs) / max(abs(theirs), 1e-30)
        good = rel <= 1e-5
        print("pejit eval: loss/node %.7f, peer %.7f, rel %.2g -> %s"
              % (theirs, ours, rel, "ok" if good else "FAIL"))
        all_ok = all_ok and good
    print("self-check of %s on %s: %s" % (peer.name, src, "PASS" if all_ok else "FAIL"))
    sys.exit(0 if all_ok else 1)


def cmd_write_checkpoint(peer, args):
    torch.manual_seed(args.seed)
    vocab = build_vocab(load_trees(args.train, args.limit, peer.max_kids))
    P = Params(peer.shapes, len(vocab), sparse_emb=False)
    write_checkpoint(args.write_checkpoint, dict(P.named()), vocab, list(peer.shapes))
    print(json.dumps({"checkpoint": args.write_checkpoint, "vocab": len(vocab),
                      "seed": args.seed}))


def main(peer, doc):
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train")
    ap.add_argument("--data", help="data file for --self-check (default: a tiny generated one)")
    ap.add_argument("--style", choices=["naive", "batched"], default="batched")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N trees")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--sparse-emb", type=int, default=1, choices=[0, 1])
    ap.add_argument("--checkpoint", help="pejit checkpoint: initial weights and vocabulary")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--pejit", help="with --self-check: the pejit binary whose loss to match")
    ap.add_argument("--model", help="with --pejit: the .pe file (default: the example's)")
    ap.add_argument("--write-checkpoint", metavar="OUT")
    args = ap.parse_args()
    torch.set_num_threads(max(1, args.threads))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100000))
    if args.self_check:
        cmd_self_check(peer, args)
    elif args.write_checkpoint:
        if not args.train:
            ap.error("--write-checkpoint needs --train (its vocabulary)")
        cmd_write_checkpoint(peer, args)
    else:
        if not args.train:
            ap.error("--train is required")
        cmd_train(peer, args)
