"""Data-parallel Sessions from Python (docs/distributed.md): a script run by `mpirun -np 2`
steps each rank's slice of global batches and ends with the parameters one process reaches on
the whole batches (within the tolerance of a reordered sum), the same bits on both ranks."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import BUILD, SMALL_MODEL

SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import pejit
    model = open(sys.argv[2]).read()
    kw = dict(dims={"V": 50}, seed=3, lr=0.1, threads=1)
    dist = pejit.Session.from_source(model, "small.pe", distributed="mpi", **kw)
    one = pejit.Session.from_source(model, "small.pe", **kw)
    assert dist.ranks() == 2 and one.ranks() == 1, (dist.ranks(), one.ranks())
    trees = [("Node", ("Leaf", (7 * i) % 50, i % 5), ("Leaf", (3 * i + 1) % 50, 2), i % 5)
             for i in range(40)]
    for step in range(8):
        batch = trees[5 * step:5 * step + 5]
        lo, hi = dist.slice(len(batch))
        l1 = one.step("loss", batch)
        ld = dist.step("loss", batch[lo:hi])
        assert abs(ld - l1) <= 1e-4 * abs(l1), (step, ld, l1)
    for name in one.param_names:
        assert np.max(np.abs(dist.param(name) - one.param(name))) < 1e-3, name
    dist.check_replicas()
    sums = dist.gather_ranks([float(dist.rank())])
    assert sums == [[0.0], [1.0]], sums
    st = dist.stats()
    assert st["ranks"] == 2 and st["comm_dense_bytes"] > 0, st
    open(f"{sys.argv[3]}/ok.{dist.rank()}", "w").write("ok")  # a file per rank: no interleaving
''')


def test_two_ranks_equal_one_process(tmp_path, pejit):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found (install openmpi-bin)")
    probe = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import pejit; pejit.Session.from_source(sys.argv[2], 'x', "
                            "dims={'V': 50}, distributed='mpi')",
                            os.path.join(BUILD, "python"), SMALL_MODEL],
                           capture_output=True, text=True, timeout=120)
    if "built without" in probe.stderr:
        pytest.skip("this pejit was built without MPI (PEJIT_MPI=OFF)")
    script = tmp_path / "dp.py"
    script.write_text(SCRIPT)
    model = tmp_path / "small.pe"
    model.write_text(SMALL_MODEL)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run([mpirun, "-np", "2", "--oversubscribe", sys.executable, str(script),
                        os.path.join(BUILD, "python"), str(model), str(tmp_path)],
                       capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "ok.0").exists() and (tmp_path / "ok.1").exists(), r.stdout + r.stderr
