"""pejit.train(): the loop of `pejit train` from Python, with per-epoch callbacks.

The data is read, the parameters initialized, the examples shuffled (BatchOrder: the CLI's
per-epoch shuffle for a seed), encoded and stepped exactly as the command does, so the losses
are the same for the same model, data, seed and options. Each epoch yields the metrics that
`pejit train --json` prints (the same keys; null fields are None).
"""

import collections
import math
import sys
import time

from . import _pejit


def _progress_bar(enabled, total, desc):
    """tqdm when it is installed, else a plain line rewritten on stderr; None when off."""
    if not enabled:
        return None
    try:
        import tqdm  # Debian: python3-tqdm

        return tqdm.tqdm(total=total, desc=desc, unit="batch", leave=False, file=sys.stderr)
    except ImportError:
        return _PlainBar(total, desc)


class _PlainBar:
    def __init__(self, total, desc):
        self.total, self.desc, self.n, self.last = total, desc, 0, 0.0
        self.postfix = ""

    def set_postfix_str(self, s, refresh=True):
        self.postfix = s

    def update(self, k=1):
        self.n += k
        now = time.monotonic()
        if now - self.last > 0.25 or self.n == self.total:
            self.last = now
            sys.stderr.write(f"\r{self.desc}  batch {self.n}/{self.total}  {self.postfix}   ")
            sys.stderr.flush()

    def close(self):
        sys.stderr.write("\n")


class History(list):
    """The per-epoch metrics (a list of dicts), with the session and vocabulary trained."""

    session = None
    vocab = None


def _delta(after, before, key):
    return after[key] - before[key]


def train(
    model,
    data,
    dev=None,
    epochs=1,
    batch=25,
    seed=1,
    lr=0.05,
    optimizer="adagrad",
    weight_decay=0.0,
    clip=0.0,
    mode="auto",
    lookahead=8,
    limit=0,
    fixed_batches=False,
    shuffle="examples",
    train_eval=True,
    eval_batch=500,
    merge_equal=True,
    on_epoch=None,
    progress=True,
    save=None,
):
    """Trains the model file `model` on the bracket-tree (or sentence) file `data`.

    Options are those of `pejit train` (--epochs, --batch, --seed, --lr, --optimizer,
    --weight-decay, --clip, --mode, --lookahead, --limit, --fixed-batches, --shuffle,
    --no-train-eval, --eval-batch, --no-merge, --save). shuffle is "examples", "batches" or
    "none"; fixed_batches=True is shuffle="none". The scores after each epoch are taken in
    batches of eval_batch trees, as the command takes them: the dev loss is a sum of per-batch
    sums, so its last bits depend on that size. on_epoch(metrics) is called after each epoch
    with the dict that `pejit train --json` prints for it; returning False stops training.
    progress: a tqdm bar (a plain line without tqdm). Returns a History: the list of
    per-epoch dicts, with .session (the trained pejit.Session) and .vocab.
    """
    if epochs < 1:
        raise _pejit.Error("epochs must be >= 1")
    if batch < 1:
        raise _pejit.Error("batch must be >= 1")
    if eval_batch < 1:
        raise _pejit.Error("eval_batch must be >= 1")
    if shuffle not in ("examples", "batches", "none"):
        raise _pejit.Error(f"shuffle is 'examples', 'batches' or 'none', not {shuffle!r}")
    if fixed_batches:
        if shuffle not in ("examples", "none"):
            raise _pejit.Error(f"fixed_batches=True is shuffle='none', not {shuffle!r}")
        shuffle = "none"
    _pejit.keep_freed_memory()  # as the pejit command does at start (process-wide, once)
    info = _pejit.model_info(model, "loss")
    vocab = _pejit.Vocab()
    sentences = not info["reads_trees"]
    train_ds = _pejit.Dataset.read(data, vocab, grow=True, sentences=sentences)
    train_ds.limit(limit)
    dev_ds = _pejit.Dataset.read(dev, vocab, grow=False, sentences=sentences) if dev else None
    dims = {"V": len(vocab)} if "V" in info["dims"] else {}
    s = _pejit.Session.from_file(
        model,
        dims=dims,
        seed=seed,
        optimizer=optimizer,
        lr=lr,
        weight_decay=weight_decay,
        clip=clip,
        mode=mode,
        lookahead=lookahead,
        merge_equal=merge_equal,
        batches_repeat=shuffle != "examples",  # as the command: each plan kept from its first use
    )
    history = History()
    history.session, history.vocab = s, vocab
    n = len(train_ds)
    nb = (n + batch - 1) // batch
    order_gen = _pejit.BatchOrder(n, seed)
    loss_nodes = [train_ds.nodes(i) for i in range(n)]  # each example's, counted once
    look = max(1, lookahead) if mode == "auto" else 0
    for ep in range(epochs):
        order = order_gen.next_epoch(shuffle, batch)
        before = s.stats()
        loss_sum, nodes, trees, seconds = 0.0, 0, 0, 0.0
        # Batches are encoded `look` ahead of training and handed to the background pipeline,
        # as the command does.
        ahead = collections.deque()
        encoded = 0
        bar = _progress_bar(progress, nb, f"epoch {ep + 1}")
        for b in range(nb):
            upto = min(b + 1 + look, nb)
            fresh = []
            while encoded < upto:
                lo = encoded * batch
                fresh.append(s.batch(train_ds, order[lo : min(n, lo + batch)]))
                encoded += 1
            ahead.extend(fresh)
            if fresh:
                s.prefetch("loss", fresh)
            v = ahead.popleft()
            t0 = time.perf_counter()
            loss = s.step("loss", v)
            seconds += time.perf_counter() - t0
            if not math.isfinite(loss):
                raise _pejit.Error(
                    f"the loss became {loss} at epoch {ep}, batch {b} (try a smaller lr or clip)"
                )
            lo, hi = b * batch, min(n, b * batch + batch)
            loss_sum += loss
            nodes += sum(loss_nodes[i] for i in order[lo:hi])
            trees += hi - lo
            if bar is not None:
                rate = trees / max(seconds, 1e-9)
                bar.set_postfix_str(
                    f"loss {loss_sum / max(1, nodes):.4f}  {rate:.0f} trees/s", refresh=False
                )
                bar.update(1)
        if bar is not None:
            bar.close()
        after = s.stats()
        m = {
            "epoch": ep,
            "loss": loss_sum / max(1, nodes),
            "root_acc": None,
            "node_acc": None,
            "dev_loss": None,
            "dev_root_acc": None,
            "dev_node_acc": None,
            "trees": trees,
            "nodes": nodes,
            "trees_per_s": trees / max(seconds, 1e-9),
            "seconds": seconds,
            "batches": nb,
            "shuffle": shuffle,
            "encoded_examples": _delta(after, before, "encoded_examples"),
            "specialized_batches": _delta(after, before, "specialized_batches"),
            "generic_batches": _delta(after, before, "generic_batches"),
            "specialized_seconds": _delta(after, before, "specialized_seconds"),
            "generic_seconds": _delta(after, before, "generic_seconds"),
            "plan_cache": {
                "hits": _delta(after, before, "plan_hits"),
                "misses": _delta(after, before, "plan_misses"),
                "prefetched": _delta(after, before, "plans_prefetched"),
                "evictions": _delta(after, before, "plan_evictions"),
            },
            "kernels": after["kernels"],
        }
        if train_eval:
            sc = _pejit.score(s, train_ds, eval_batch)
            m["root_acc"], m["node_acc"] = sc["root_acc"], sc["node_acc"]
        if dev_ds is not None:
            sc = _pejit.score(s, dev_ds, eval_batch)
            m["dev_loss"] = sc["loss_per_node"]
            m["dev_root_acc"], m["dev_node_acc"] = sc["root_acc"], sc["node_acc"]
        history.append(m)
        if on_epoch is not None and on_epoch(m) is False:
            break
    if save:
        s.save(save, vocab.words)
    return history
