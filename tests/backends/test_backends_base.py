"""The :class:`~fedhet.backends.base.Backend` protocol: every backend ``run.backend`` can name, and the
Flower bridge's, has its members with its signatures (so the simulator's ``backend: Backend`` holds)."""
import inspect

import pytest

from fedhet.backends.base import Backend
from fedhet.backends.processes import ProcessPoolBackend
from fedhet.backends.ray_backend import RayBackend
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend
from fedhet.engine.backend_choice import BACKENDS

# run.backend name -> the class it builds (``auto`` picks one of these).
BACKEND_TYPES = {"sequential": SequentialBackend, "vectorized": VectorizedBackend,
                 "processes": ProcessPoolBackend, "ray": RayBackend}


def protocol_mismatches(cls: type, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``cls`` lacks, or has with other parameter names: a
    structural check on the class (no instance, so no worker or Ray connection is started)."""
    problems = [f"{name} (attribute)" for name in protocol.__annotations__ if not hasattr(cls, name)]
    for name, member in vars(protocol).items():
        if name.startswith("_") or not callable(member):
            continue
        method = getattr(cls, name, None)
        if not callable(method):
            problems.append(f"{name}()")
        elif list(inspect.signature(method).parameters) != list(inspect.signature(member).parameters):
            problems.append(f"{name}{inspect.signature(method)} (the protocol's: {inspect.signature(member)})")
    return problems


def test_every_backend_name_has_its_class_here():
    assert set(BACKEND_TYPES) == set(BACKENDS) - {"auto"}


@pytest.mark.parametrize("name", sorted(BACKEND_TYPES))
def test_every_backend_class_satisfies_the_protocol(name):
    cls = BACKEND_TYPES[name]
    assert protocol_mismatches(cls, Backend) == []
    assert cls.name == name


def test_the_flower_backend_satisfies_the_protocol():
    pytest.importorskip("flwr")
    from fedhet.flower.backend import FlowerBackend

    assert protocol_mismatches(FlowerBackend, Backend) == []


def test_instances_pass_the_runtime_check_and_a_backend_without_close_fails_both_checks():
    for backend in (SequentialBackend(), VectorizedBackend(), ProcessPoolBackend(2)):
        assert isinstance(backend, Backend), type(backend).__name__
        backend.close()

    class NoClose:
        name = "no-close"

        def train_cohort(self, task, solver, work):
            raise AssertionError("never called: the class only has to lack close()")

    assert not isinstance(NoClose(), Backend)
    assert protocol_mismatches(NoClose, Backend) == ["close()"]

    class OtherSignature(NoClose):
        def close(self, force):
            pass

    mismatches = protocol_mismatches(OtherSignature, Backend)
    assert len(mismatches) == 1 and mismatches[0].startswith("close(self, force) (the protocol's: (self)")
