"""pejit.train() against `pejit train --json`: the same losses for the same model, data, seed
and batches (the CLI's shuffle, encoding and optimizer), and the same metric keys."""

import json
import os
import subprocess

import pytest

from conftest import ROOT

TREELSTM = os.path.join(ROOT, "examples", "treelstm", "treelstm.pe")


def cli_epochs(cli, *args):
    out = subprocess.run([cli, "train", *args, "--json"], check=True, capture_output=True,
                         text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("mode", ["specialized", "auto"])
def test_train_losses_equal_the_cli(pejit, cli, sst_data, mode):
    train, dev = sst_data
    want = cli_epochs(cli, TREELSTM, "--data", train, "--dev", dev, "--epochs", "2",
                      "--batch", "10", "--seed", "3", "--lr", "0.05", "--mode", mode)
    seen = []
    got = pejit.train(TREELSTM, data=train, dev=dev, epochs=2, batch=10, seed=3, lr=0.05,
                      mode=mode, progress=False, on_epoch=seen.append)
    assert len(got) == len(want) == 2 and seen == list(got)
    for g, w in zip(got, want):
        # encoded_examples: each example encoded once, in the first epoch.
        for k in ["epoch", "trees", "nodes", "batches", "encoded_examples"]:
            assert g[k] == w[k], k
        # Planned batches run JIT or reference kernels by timing in auto mode (results agree
        # to rounding); specialized mode always waits for the JIT: the same bits.
        tol = 0 if mode == "specialized" else 1e-6
        for k in ["loss", "root_acc", "node_acc", "dev_loss", "dev_root_acc", "dev_node_acc"]:
            assert g[k] == pytest.approx(w[k], rel=tol, abs=0 if tol == 0 else 1e-6), k
        assert g["trees_per_s"] > 0 and g["seconds"] > 0
        assert g["specialized_batches"] + g["generic_batches"] == g["batches"]
    assert set(want[0]) >= set(got[0]) - {"kernels"}
    assert got.session is not None and len(got.vocab) > 1


def test_train_fixed_batches_and_stop_from_callback(pejit, cli, sst_data):
    train, _ = sst_data
    want = cli_epochs(cli, TREELSTM, "--data", train, "--epochs", "2", "--batch", "25",
                      "--seed", "7", "--fixed-batches", "--mode", "specialized")
    got = pejit.train(TREELSTM, data=train, epochs=2, batch=25, seed=7, fixed_batches=True,
                      mode="specialized", progress=False)
    assert [g["loss"] for g in got] == [w["loss"] for w in want]
    stopped = pejit.train(TREELSTM, data=train, epochs=3, batch=25, seed=7, progress=False,
                          train_eval=False, on_epoch=lambda m: False)
    assert len(stopped) == 1 and stopped[0]["root_acc"] is None


def test_batch_order_is_the_cli_shuffle(pejit):
    a, b = pejit.BatchOrder(10, 1), pejit.BatchOrder(10, 1)
    e1 = list(a.next_epoch())
    assert sorted(e1) == list(range(10)) and e1 != list(range(10))
    assert list(b.next_epoch()) == e1
    assert list(a.next_epoch(shuffle=False)) == e1


def test_train_shuffled_batches_is_the_cli_order(pejit, cli, sst_data):
    train, _ = sst_data
    want = cli_epochs(cli, TREELSTM, "--data", train, "--epochs", "2", "--batch", "25",
                      "--seed", "7", "--shuffle", "batches", "--mode", "specialized",
                      "--no-train-eval")
    got = pejit.train(TREELSTM, data=train, epochs=2, batch=25, seed=7, shuffle="batches",
                      mode="specialized", train_eval=False, progress=False)
    assert [g["loss"] for g in got] == [w["loss"] for w in want]
    assert got[1]["plan_cache"]["misses"] == 0 and got[1]["plan_cache"]["prefetched"] == 0
    assert got[0]["shuffle"] == want[0]["shuffle"] == "batches"
    with pytest.raises(pejit.Error, match="shuffle is 'examples', 'batches' or 'none'"):
        pejit.train(TREELSTM, data=train, shuffle="sometimes", progress=False)
    with pytest.raises(pejit.Error, match="fixed_batches=True is shuffle='none'"):
        pejit.train(TREELSTM, data=train, shuffle="batches", fixed_batches=True, progress=False)


def test_batch_order_shuffles_whole_batches(pejit):
    a, b = pejit.BatchOrder(10, 1), pejit.BatchOrder(10, 1)
    first = list(a.next_epoch("batches", batch=3))
    assert first == list(b.next_epoch())  # the first epoch is the examples' shuffle
    whole = sorted(tuple(sorted(first[i : i + 3])) for i in range(0, 9, 3))
    seen = set()
    for _ in range(4):
        o = list(a.next_epoch("batches", batch=3))
        assert sorted(tuple(sorted(o[i : i + 3])) for i in range(0, 9, 3)) == whole
        assert o[9] == first[9]  # the short last batch stays last
        seen.add(tuple(o))
    assert len(seen) > 1
    with pytest.raises(pejit.Error, match="needs the batch size"):
        a.next_epoch("batches")
    with pytest.raises(pejit.Error, match="not a shuffle"):
        a.next_epoch("sometimes", batch=3)
    with pytest.raises(pejit.Error, match="shuffle is 'examples'"):
        a.next_epoch(3)


@pytest.mark.parametrize("with_tqdm", [True, False])
def test_progress_bar(pejit, sst_data, tmp_path, capsys, monkeypatch, with_tqdm):
    from conftest import SMALL_MODEL

    model = tmp_path / "small.pe"
    model.write_text(SMALL_MODEL)
    if not with_tqdm:
        monkeypatch.setitem(__import__("sys").modules, "tqdm", None)  # import fails
    hist = pejit.train(str(model), data=sst_data[0], epochs=1, batch=20, progress=True)
    err = capsys.readouterr().err
    assert "epoch 1" in err and "/4" in err
    if with_tqdm:
        assert "batch/s" in err  # tqdm's bar (it redraws at most every 0.1 s)
    else:
        assert "batch 4/4" in err and "trees/s" in err  # the plain line, at least at the end
    assert hist[0]["root_acc"] is not None  # the model has `infer`
    assert hist[0]["node_acc"] is None  # ... and no `infer_nodes`
