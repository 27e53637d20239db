"""The Session from Python: values from Python objects, steps, runs, numpy parameter views
that share pejit's storage, errors as Python exceptions, checkpoints and statistics."""

import numpy as np
import pytest

from conftest import SMALL_MODEL


def leaf(s, w, y):
    return s.make("Leaf", [w, y])


def small_batch(s):
    a, b, c = leaf(s, 3, 1), leaf(s, 4, 2), leaf(s, 5, 0)
    return [s.make("Node", [s.make("Node", [a, b, 4]), c, 3]), a]


def test_from_source_step_lowers_loss(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=2, lr=0.1)
    assert set(s.entries) == {"loss", "leaf_loss", "infer"}
    batch = s.to_batch("loss", small_batch(s))
    losses = [s.step("loss", batch) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0]
    # The same batch from nested constructor tuples and from a Tree gives the same loss.
    t = pejit.Tree.from_tuple((3, (4, (1, 3), (2, 4)), (0, 5)))
    nested = [("Node", ("Node", ("Leaf", 3, 1), ("Leaf", 4, 2), 4), ("Leaf", 5, 0), 3),
              ("Leaf", 3, 1)]
    l1 = s.run("loss", [t, ("Leaf", 3, 1)])
    l2 = s.run("loss", nested)
    l3 = s.run("loss", batch)
    assert l1 == l2 == l3
    assert isinstance(l1, float)
    preds = s.run("infer", batch)
    assert len(preds) == 2 and all(isinstance(p, int) for p in preds)


def test_optimizer_objects_keep_their_own_state(pejit):
    a = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=4)
    b = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=4)
    batch_a, batch_b = a.to_batch("loss", small_batch(a)), b.to_batch("loss", small_batch(b))
    opt = pejit.Optimizer("sgd", lr=0.5)
    la = [a.step("loss", batch_a, optimizer=opt) for _ in range(3)]
    lb = [b.step("loss", batch_b) for _ in range(3)]  # the session's own Adagrad, lr 0.05
    assert la[0] == lb[0]
    assert la[1:] != lb[1:]


def test_freeze_keeps_a_parameter_fixed(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=3, lr=0.1)
    batch = s.to_batch("loss", small_batch(s))
    names = s.param_names
    frozen, free = names[0], names[-1]
    before = {n: s.get_param(n).copy() for n in names}
    s.freeze(frozen)
    assert s.frozen(frozen) and not s.frozen(free)
    s.step("loss", batch)
    s.step("loss", batch, optimizer=pejit.Optimizer("sgd", lr=0.5))
    assert np.array_equal(s.get_param(frozen), before[frozen])
    assert not np.array_equal(s.get_param(free), before[free])
    s.freeze(frozen, False)
    s.step("loss", batch)
    assert not np.array_equal(s.get_param(frozen), before[frozen])
    with pytest.raises(pejit.Error, match="no parameter named 'nope'"):
        s.freeze("nope")


def test_numpy_views_alias_storage(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=3, mode="generic")
    w = s.param("W_out")
    assert w.shape == (8, 5) and w.dtype == np.float32
    assert not w.flags["OWNDATA"]
    batch = s.to_batch("loss", small_batch(s))
    before = s.run("loss", batch)
    # A write through the view is the parameter: get_param and run see it.
    w[:] = 0.0
    s.param("b_out")[:] = 0.0
    assert np.array_equal(s.get_param("W_out"), np.zeros((8, 5), np.float32))
    # All logits zero: every node's loss is log(5).
    nodes = 5 + 1
    assert s.run("loss", batch) == pytest.approx(nodes * np.log(5.0), rel=1e-5)
    assert s.run("loss", batch) != before
    # Steps update the parameter in place: the view sees the new values.
    s.step("loss", batch)
    assert np.array_equal(w, s.get_param("W_out"))
    assert np.abs(w).sum() > 0
    # set_param writes in place too; the view stays valid.
    s.set_param("W_out", np.ones((8, 5)))
    assert np.array_equal(w, np.ones((8, 5), np.float32))
    # A view keeps the session alive.
    emb = s.params()["emb"]
    del s
    assert emb.shape == (20, 8) and np.isfinite(emb).all()


def test_views_share_storage_with_the_specialized_path(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=3,
                                  mode="specialized")
    batch = s.to_batch("loss", small_batch(s))
    s.step("loss", batch)
    s.param("W_out")[:] = 0.0
    s.param("b_out")[:] = 0.0
    assert s.run("loss", batch) == pytest.approx(6 * np.log(5.0), rel=1e-5)


def test_errors_raise_pejit_exceptions_with_locations(pejit, tmp_path):
    bad = SMALL_MODEL.replace("tanh(concat(l, r) @ U)", "tanh(concat(l, r) @ W_out)")
    with pytest.raises(pejit.ProgramError) as e:
        pejit.Session.from_source(bad, "bad.pe", dims={"V": 20})
    assert "bad.pe:" in str(e.value) and "error" in str(e.value)
    assert isinstance(e.value, pejit.Error) and isinstance(e.value, ValueError)
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20})
    with pytest.raises(pejit.Error, match="no constructor 'Lef'"):
        s.make("Lef", [1, 2])
    with pytest.raises(pejit.Error, match="Leaf.word"):
        s.make("Leaf", [1.5, 2])
    with pytest.raises(pejit.Error, match="no entry"):
        s.step("nope", [])
    with pytest.raises(pejit.Error, match="no parameter"):
        s.param("nope")
    f = tmp_path / "trees.txt"
    f.write_text("(1 (2 a) (3 b))\n(1 (2 a)\n")
    with pytest.raises(pejit.Error, match=r"trees.txt:2:\d+: error"):
        pejit.Dataset.read(str(f))
    with pytest.raises(pejit.Error, match=r"<tree>:1:\d+: error"):
        pejit.Tree.parse("(1 (2 a")


def test_checkpoints_round_trip(pejit, tmp_path):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=3)
    batch = s.to_batch("loss", small_batch(s))
    for _ in range(3):
        s.step("loss", batch)
    path = str(tmp_path / "ck.bin")
    s.save(path, ["<unk>", "a", "b"])
    t = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=9)
    assert t.load(path) == ["<unk>", "a", "b"]
    for n in s.param_names:
        assert np.array_equal(s.get_param(n), t.get_param(n))
    assert s.step("loss", batch) == t.step("loss", t.to_batch("loss", small_batch(t)))


def test_stats_kernels_and_entry_status(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, mode="specialized")
    assert s.entry_status("loss") == "not specialized yet"
    batch = s.to_batch("loss", small_batch(s))
    for _ in range(3):
        s.step("loss", batch)
    st = s.stats()
    assert st["specialized_batches"] == 3 and st["generic_batches"] == 0
    assert st["per_entry"]["loss"]["batches"] == 3
    assert st["per_entry"]["loss"]["plan_misses"] == 1
    assert st["per_entry"]["loss"]["plan_hits"] == 2
    assert s.entry_status("loss").startswith("specialized: 1 plan")
    ks = s.kernels()
    assert ks and all(k["schedule_source"] for k in ks)
    assert st["kernels"] == len(ks)


VECTOR_MODEL = """
type Ex = Ex(x: f32[4], y: i32[])
param W : f32[4, 3] = xavier
entry loss(batch: List[Ex]) -> f32[] {
  sum_list(map(fn e => match e { Ex(x, y) => cross_entropy(x @ W, y) }, batch))
}
entry logits(batch: List[f32[4]]) -> List[f32[3]] { map(fn x => x @ W, batch) }
"""


def test_numpy_arrays_and_lists_become_tensors(pejit):
    s = pejit.Session.from_source(VECTOR_MODEL, "vec.pe", mode="generic")
    x = np.arange(4, dtype=np.float64)  # converted to f32
    w = s.get_param("W")
    out = s.run("logits", [x, [1.0, 0.0, 0.0, 0.0]])
    assert isinstance(out, list) and out[0].dtype == np.float32 and out[0].shape == (3,)
    np.testing.assert_allclose(out[0], x.astype(np.float32) @ w, rtol=1e-6)
    np.testing.assert_allclose(out[1], w[0], rtol=1e-6)
    loss = s.step("loss", [s.make("Ex", [x, 2]), ("Ex", np.ones(4, np.float32), 0)])
    assert loss > 0
    with pytest.raises(pejit.Error, match="rank"):
        s.run("logits", [np.zeros((2, 2))])
    with pytest.raises(pejit.Error):
        s.run("logits", [np.zeros(5)])


def test_stats_say_where_the_time_went(pejit):
    # Specialized: planned batches on JIT kernels (time in the batching interpreter counted
    # apart); the generic path has neither.
    t = [("Node", ("Leaf", 3, 1), ("Leaf", 4, 2), 4)]
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, mode="specialized")
    for _ in range(3):
        s.step("loss", t)
    st = s.stats()
    assert st["jit_batches"] > 0 and st["kernels_compiled"] > 0 and st["kernels_cached"] == 0
    assert st["interpreted_groups"] >= 0 and st["interpreted_seconds"] >= 0
    assert st["jit_seconds"] > 0
    g = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, mode="generic")
    g.step("loss", t)
    gst = g.stats()
    assert gst["jit_batches"] == 0 and gst["interpreted_groups"] == 0
    assert gst["ranks"] == 1 and gst["rank"] == 0


def test_kernel_cache_dir_links_kernels_a_second_session_needs(pejit, tmp_path):
    # Nothing is cached unless asked; with a directory, a second session links the kernels the
    # first compiled (the same losses), and a bad bound is refused.
    t = [("Node", ("Leaf", 3, 1), ("Leaf", 4, 2), 4)]
    cache = tmp_path / "kernels"

    def run():
        s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, seed=3,
                                      mode="specialized", kernel_cache_dir=str(cache))
        return [s.step("loss", t) for _ in range(2)], dict(s.stats(), flags=[k["cached"] for k in s.kernels()])

    first, st1 = run()
    assert st1["kernels_compiled"] > 0 and st1["kernels_cached"] == 0
    assert st1["flags"] and not any(st1["flags"])
    assert any(cache.iterdir())
    second, st2 = run()
    assert st2["kernels_cached"] > 0 and st2["kernels_compiled"] == 0
    assert st2["flags"] and all(st2["flags"])
    assert first == second
    with pytest.raises(pejit.Error, match="kernel_cache_max_mb"):
        pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20},
                                  kernel_cache_dir=str(cache), kernel_cache_max_mb=0)
