"""Online re-specialization: add_source replacing one function drops and remakes the plans
of the entries whose dependency cone changed; the others keep their plans and kernels."""

from conftest import SMALL_MODEL

NEW_CELL = "fn cell(l: f32[8], r: f32[8]) -> f32[8] { sigmoid(concat(l, r) @ U) }"


def test_add_source_respecializes_only_the_changed_cone(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, mode="specialized")
    t = [("Node", ("Node", ("Leaf", 3, 1), ("Leaf", 4, 2), 4), ("Leaf", 5, 0), 3)]
    batch = s.to_batch("loss", t)
    for _ in range(2):
        s.step("loss", batch)
        s.step("leaf_loss", batch)
    before = s.stats()
    kernels_before = {k["signature"] for k in s.kernels()}
    assert before["per_entry"]["leaf_loss"]["plans_cached"] == 1

    changed = s.add_source(NEW_CELL, "variant.pe")
    assert sorted(changed) == ["infer", "loss"]
    st = s.stats()
    assert sorted(st["respecialized"]) == ["infer", "loss"]
    assert st["reused"] == ["leaf_loss"]
    assert st["per_entry"]["loss"]["plans_cached"] == 0
    assert st["per_entry"]["loss"]["respecializations"] == 1
    assert st["per_entry"]["leaf_loss"]["plans_cached"] == 1
    assert st["per_entry"]["leaf_loss"]["respecializations"] == 0

    # The unchanged entry runs its old plan on the old kernels: a hit, nothing compiled.
    s.step("leaf_loss", batch)
    st = s.stats()
    assert st["per_entry"]["leaf_loss"]["plan_misses"] == before["per_entry"]["leaf_loss"]["plan_misses"]
    assert st["per_entry"]["leaf_loss"]["plan_hits"] == before["per_entry"]["leaf_loss"]["plan_hits"] + 1
    assert {k["signature"] for k in s.kernels()} == kernels_before
    # The changed entry is planned again and compiles the new cell's kernels.
    s.step("loss", batch)
    st = s.stats()
    assert st["per_entry"]["loss"]["plan_misses"] == before["per_entry"]["loss"]["plan_misses"] + 1
    assert {k["signature"] for k in s.kernels()} > kernels_before


def test_add_source_changes_what_runs(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 20}, mode="specialized")
    batch = s.to_batch("loss", [("Node", ("Leaf", 3, 1), ("Leaf", 4, 2), 4)])
    before_loss, before_leaf = s.run("loss", batch), s.run("leaf_loss", batch)
    s.add_source(NEW_CELL, "variant.pe")
    assert s.run("loss", batch) != before_loss
    assert s.run("leaf_loss", batch) == before_leaf
    g = pejit.Session.from_source(SMALL_MODEL.replace(
        "fn cell(l: f32[8], r: f32[8]) -> f32[8] { tanh(concat(l, r) @ U) }", NEW_CELL),
        "whole.pe", dims={"V": 20}, mode="generic")
    assert s.run("loss", batch) == g.run("loss", g.to_batch("loss", [
        ("Node", ("Leaf", 3, 1), ("Leaf", 4, 2), 4)]))
