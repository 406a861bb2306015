"""Execution backends: how a round's cohort is trained (``run.backend``). All give the numbers of
the reference :class:`SequentialBackend`; :func:`fedhet.engine.backend_choice.select_backend` picks
one and says why. The Ray backend lives in :mod:`fedhet.backends.ray_backend` (not imported here:
Ray is an optional extra)."""
from fedhet.backends.processes import ProcessPoolBackend
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend

__all__ = ["ProcessPoolBackend", "SequentialBackend", "VectorizedBackend"]
