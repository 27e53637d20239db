"""pejit from Python: the same engine as the `pejit` command, for research loops.

    import pejit
    s = pejit.Session.from_file("examples/treelstm/treelstm.pe", dims={"V": 100})
    leaf = s.make("Leaf", [7, 3])
    loss = s.step("loss", [leaf])
    emb = s.param("emb")          # a numpy view of the session's storage (no copy)

See python/README.md for values, parameter views and their lifetime, train() and add_source().
"""

from ._pejit import (  # noqa: F401
    BatchOrder,
    Dataset,
    Error,
    Optimizer,
    ProgramError,
    Session,
    Tree,
    Value,
    Vocab,
    keep_freed_memory,
    model_info,
    score,
)
from .train import train  # noqa: F401

__all__ = [
    "BatchOrder",
    "Dataset",
    "Error",
    "Optimizer",
    "ProgramError",
    "Session",
    "Tree",
    "Value",
    "Vocab",
    "keep_freed_memory",
    "model_info",
    "score",
    "train",
]
