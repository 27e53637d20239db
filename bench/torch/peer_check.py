"""The PyTorch peers' --self-check (peer_common.py's driver, treelstm_torch.py): the naive
recursive style against the level-batched one on the same weights (loss, every gradient, root
predictions), a checkpoint round trip, and pejit's own loss through `pejit eval`.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch

from peer_common import (Params, batches_of, build_vocab, loss_and_grads, read_checkpoint,
                         write_checkpoint)


def pejit_loss_per_node(args, peer, ck, data):
    """pejit's loss per labelled node of `data` on checkpoint `ck` (`pejit eval --json`)."""
    out = subprocess.run([args.pejit, "eval", args.model or peer.model_file, "--params", ck,
                          "--data", data, "--batch", str(args.batch), "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("pejit eval failed: %s" % out.stderr.strip())
    return json.loads(out.stdout.strip().splitlines()[-1])["loss"]


def setup(peer, args, data):
    """The self-check's trees (from `data`, else the peer's tiny ones), with the last tree's
    new words left out of the vocabulary (<unk>, id 0), and weights with non-zero biases (their
    paths and gradients are exercised) through a checkpoint round trip. Returns (scratch
    folder, source file, trees, vocabulary, weights, checkpoint, round trip ok)."""
    d = tempfile.mkdtemp(prefix=peer.name + "_check_")
    if data:
        trees = peer.load(data, args.limit or 60)
        src = data
    else:
        src = os.path.join(d, "tiny.txt")
        with open(src, "w") as f:
            f.write("\n".join(peer.tiny * 5 + ["(1 (2 zyzzyva) (1 (2 qwerty) (0 xyzzy)))"]) + "\n")
        trees = peer.load(src, None)
    vocab = build_vocab(trees[:-1])
    peer.attach(trees, vocab)
    init_mod = Params(peer.shapes, len(vocab), sparse_emb=False)
    with torch.no_grad():
        for n, p in init_mod.named():
            if p.dim() == 1:
                p.normal_(0, 0.1)
    init = {n: p.detach().clone() for n, p in init_mod.named()}
    ck = os.path.join(d, "ck.bin")
    write_checkpoint(ck, init, vocab, list(peer.shapes))
    init2, vocab2 = read_checkpoint(ck, list(peer.shapes))
    ok = vocab2 == vocab and all(torch.equal(init[n], init2[n]) for n in peer.shapes)
    n_unk = sum(int((t.words == 0).sum()) for t in trees)
    print("%d trees, vocab %d, %d <unk> leaves; checkpoint round trip: %s"
          % (len(trees), len(vocab), n_unk, "ok" if ok else "FAIL"))
    return d, src, trees, vocab, init2, ck, ok


def styles(peer, init, vocab_size, batches):
    """Naive vs batched on each batch: loss within 1e-5 relative, every gradient within
    1e-4 max|ref| + 1e-6 (sparse and dense embedding gradients), the same root predictions."""
    all_ok = True
    for bi, b in enumerate(batches):
        ln, nn_, gn = loss_and_grads(peer, "naive", init, vocab_size, b)
        for sparse in (True, False):
            lb, nb, gb = loss_and_grads(peer, "batched", init, vocab_size, b, sparse)
            rel = abs(ln - lb) / max(abs(ln), 1e-30)
            good = rel <= 1e-5 and nn_ == nb
            worst = []
            for n in peer.shapes:
                tol = 1e-4 * float(gn[n].abs().max()) + 1e-6
                diff = float((gn[n] - gb[n]).abs().max())
                good = good and diff <= tol
                worst.append("%s %.2g/%.2g" % (n, diff, tol))
            print("batch %d (%d trees, %d labelled nodes) sparse_emb=%d: loss naive %.6f "
                  "batched %.6f rel %.2g; grad maxdiff/tol: %s -> %s"
                  % (bi, len(b), nn_, sparse, ln, lb, rel, ", ".join(worst),
                     "ok" if good else "FAIL"))
            all_ok = all_ok and good
        P = Params(peer.shapes, vocab_size, init=init)
        with torch.no_grad():
            if peer.predict_roots(P, b, "naive") != peer.predict_roots(P, b, "batched"):
                print("batch %d: root predictions differ: FAIL" % bi)
                all_ok = False
    return all_ok


def done(peer, src, ok):
    print("self-check of %s on %s: %s" % (peer.name, src, "PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


def cmd_self_check(peer, args):
    torch.manual_seed(args.seed)
    d, src, trees, vocab, init2, ck, all_ok = setup(peer, args, args.data)
    all_ok = styles(peer, init2, len(vocab), batches_of(trees, args.batch)[:3]) and all_ok
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
    done(peer, src, all_ok)
