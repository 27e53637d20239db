"""pejit.score(): one run per batch of the session's hidden evaluation entry for the loss and
the predictions (as `pejit train` scores an epoch), each data set's batches encoded once and
kept, and a loss changed by add_source seen by the next scoring; Session.batch's examples
encoded once and kept."""

import pytest

from conftest import SMALL_MODEL

DOUBLE_LOSS = ("entry loss(batch: List[Tree]) -> f32[] {\n"
               "  sum_list(map(fn t => encode(t).1 + encode(t).1, batch))\n}\n")


def open_session(pejit, sst_data):
    train, dev = sst_data
    vocab = pejit.Vocab()
    ds = pejit.Dataset.read(train, vocab, grow=True)
    dev_ds = pejit.Dataset.read(dev, vocab, grow=False)
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": len(vocab)},
                                  mode="specialized")
    return s, ds, dev_ds


def two_pass_loss(s, ds, batch):
    """The loss entry run on its own, batch by batch."""
    n = len(ds)
    return sum(s.run("loss", s.batch(ds, list(range(b, min(n, b + batch)))))
               for b in range(0, n, batch))


def test_one_pass_per_batch_encoded_once(pejit, sst_data):
    s, ds, dev = open_session(pejit, sst_data)
    assert len(ds) == 80 and len(dev) == 30
    first = pejit.score(s, ds, 20)
    assert first["passes"] == 4 and first["encoded_batches"] == 4
    assert first["root_acc"] is not None and first["node_acc"] is None  # `infer` only
    assert first["loss"] == pytest.approx(two_pass_loss(s, ds, 20), rel=1e-5)
    d = pejit.score(s, dev, 20)
    assert d["passes"] == 2 and d["encoded_batches"] == 2
    # Both sets are kept: scoring again encodes nothing and gives the same scores.
    again = pejit.score(s, ds, 20)
    assert again["passes"] == 4 and again["encoded_batches"] == 0
    for k in ["loss", "nodes", "root_acc"]:
        assert again[k] == first[k], k
    assert pejit.score(s, dev, 20)["encoded_batches"] == 0
    # Another batch size, or a data set cut shorter, is encoded again.
    assert pejit.score(s, ds, 40)["encoded_batches"] == 2
    ds.limit(50)
    cut = pejit.score(s, ds, 40)
    assert cut["passes"] == 2 and cut["encoded_batches"] == 2
    # The evaluation entry is the session's own: not listed with the model's.
    assert s.entries == ["loss", "leaf_loss", "infer"]
    assert not any(k.startswith("__eval") for k in s.stats()["per_entry"])


def test_batch_encodes_each_example_once(pejit, sst_data):
    s, ds, dev = open_session(pejit, sst_data)

    def encoded():
        return s.stats()["encoded_examples"]

    s.batch(ds, [0, 1, 2])
    assert encoded() == 3
    s.batch(ds, [2, 1, 0, 3])  # only example 3 is new
    assert encoded() == 4
    # The scoring shares the kept examples: it encodes the 76 others, each once.
    first = pejit.score(s, ds, 20)
    assert first["encoded_batches"] == 4 and encoded() == 80
    assert pejit.score(s, ds, 20)["loss"] == first["loss"]
    # The scoring's hidden entry and a changed loss leave the batch type as it was: the
    # examples stay kept.
    s.batch(ds, [0, 3, 79])
    assert encoded() == 80
    assert s.add_source(DOUBLE_LOSS, "double.pe") == ["loss"]
    s.batch(ds, [1])
    pejit.score(s, ds, 20)
    assert encoded() == 80
    # Another data set's examples are its own; a data set cut shorter is encoded again.
    s.batch(dev, [0, 1])
    assert encoded() == 82
    ds.limit(50)
    s.batch(ds, [0])
    assert encoded() == 83


def test_score_sees_a_loss_changed_by_add_source(pejit, sst_data):
    s, ds, _ = open_session(pejit, sst_data)
    before = pejit.score(s, ds, 20)
    changed = s.add_source(DOUBLE_LOSS, "double.pe")
    assert changed == ["loss"]
    st = s.stats()
    assert st["respecialized"] == ["loss"] and st["reused"] == ["leaf_loss", "infer"]
    after = pejit.score(s, ds, 20)
    assert after["passes"] == 4
    assert after["loss"] == pytest.approx(2 * before["loss"], rel=1e-5)
    assert after["loss"] == pytest.approx(two_pass_loss(s, ds, 20), rel=1e-5)
    assert after["root_acc"] == before["root_acc"]
    assert s.entries == ["loss", "leaf_loss", "infer"]
    # Changed again: the entry is made again under its name, not added beside the old one.
    s.add_source(DOUBLE_LOSS.replace("encode(t).1 + encode(t).1", "encode(t).1"), "single.pe")
    assert pejit.score(s, ds, 20)["loss"] == pytest.approx(before["loss"], rel=1e-5)
    assert s.entries == ["loss", "leaf_loss", "infer"]
