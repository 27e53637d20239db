"""The Python examples run: train_sst.py gives the CLI's losses (specialized mode: the same
bits), arch_search.py re-specializes the cell's entries and reuses the leaves-only one."""

import os
import re
import subprocess
import sys

from conftest import BUILD, ROOT


def run_example(name, *args):
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    return subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", name), *args],
                          check=True, capture_output=True, text=True, env=env).stdout


def test_train_sst_matches_the_cli(sst_data):
    train, dev = sst_data
    out = run_example("train_sst.py", "--data", train, "--dev", dev, "--epochs", "2",
                      "--batch", "20", "--mode", "specialized", "--compare-cli")
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert len(rows) == 2, out
    assert all(py == cli for _, py, cli in rows), out


def test_arch_search_reports_reuse():
    out = run_example("arch_search.py", "--batches", "20", "--trees", "100")
    assert "cell 'gated': re-specialized ['infer', 'loss'], reused ['word_loss']" in out, out
    assert "cell 'residual-relu': re-specialized ['infer', 'loss'], reused ['word_loss']" in out
    kept = re.findall(r"word_loss: (\d+) plans kept, (\d+) planned again", out)
    assert len(kept) == 3 and all(again == "0" and int(k) > 0 for k, again in kept), out
    assert "best cell:" in out
