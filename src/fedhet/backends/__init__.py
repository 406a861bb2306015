"""Execution backends: how a round's cohort is trained (``run.backend``). All give the numbers of
the reference :class:`SequentialBackend`; :func:`select_backend` picks one and says why. The Ray
backend lives in :mod:`fedhet.backends.ray_backend` (not imported here: Ray is an optional extra)."""
from fedhet.backends.processes import ProcessPoolBackend
from fedhet.backends.select import BACKENDS, select_backend
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend

__all__ = ["BACKENDS", "ProcessPoolBackend", "SequentialBackend", "VectorizedBackend", "select_backend"]
