"""The gradient contract (``fedhet.client.base.GradFn``, ``LocalSolver.keeps_gradient``) on every
backend: every registered solver, and a local-momentum solver that keeps the gradient ``grad_fn``
returns (issue 23 item 2, issue 24 item 1), give the sequential backend's numbers on the processes,
vectorised and Ray backends; a ``keeps_gradient = False`` declaration is checked by copying the
gradient (the numbers must not change); a failure names the likely cause."""
from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pytest
import torch

from backend_cases import SOLVERS, assert_same_round, make_solver, make_task, make_work
from fedhet.algorithms.fedprox import FedProxSolver
from fedhet.backends.processes import ProcessPoolBackend, fork_available
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend
from fedhet.client.base import LocalSolver
from fedhet.core.registry import CLIENT_SOLVERS

pytestmark = pytest.mark.usefixtures("one_thread")
COHORT = [0, 2, 3, 7, 9]
MOMENTUM = 0.9
CONTRACT = "the gradient contract, fedhet.client.base.GradFn"


class LocalMomentum(LocalSolver):
    """Heavy-ball local momentum, ``m_1 = g_1``, ``m_k = 0.9 m_{k-1} + g_k``, step along ``m_k``,
    written as a user would: its first momentum *is* the gradient ``grad_fn`` returned (kept, not
    copied). It declares nothing, so it gets the safe default ``keeps_gradient = True``."""

    def begin(self, x, client_state, broadcast, learning_rate) -> dict[str, Any]:
        return {"momentum": None}

    def direction(self, w, x, grad_fn, local):
        loss, grad = self.gradient(w, grad_fn)
        local["momentum"] = grad if local["momentum"] is None else MOMENTUM * local["momentum"] + grad
        return loss, local["momentum"]


class WronglyDeclaredMomentum(LocalMomentum):
    """The same solver with a wrong declaration: it keeps its gradient but says it does not."""

    keeps_gradient = False


def solver_for(name: str, config) -> LocalSolver:
    if name == "local-momentum":
        return LocalMomentum(config.client.options)
    return make_solver(name, config)


def check_declaration(label: str, solver: LocalSolver, task, work) -> None:
    """A solver that declares ``keeps_gradient = False`` gives bitwise the same numbers when the
    gradient it is handed is a copy: otherwise it keeps the reused buffer."""
    if solver.keeps_gradient:
        return
    reused = SequentialBackend().train_cohort(task, solver, work)
    owned = SequentialBackend(copy_gradient=True).train_cohort(task, solver, work)
    try:
        assert_same_round(owned, reused, exact=True)
    except AssertionError as error:
        raise AssertionError(
            f"solver {label} declares keeps_gradient = False, but its {error} change when the gradient "
            "grad_fn returns is copied: it keeps that gradient past its next grad_fn call (a reused buffer "
            f"on the sequential, processes, Ray and Flower backends); remove the declaration ({CONTRACT})"
        ) from None


def check_parity(label: str, solver: LocalSolver, task, work, backend_name: str, backend, *, exact: bool) -> None:
    """``backend`` gives the sequential backend's numbers (bitwise when ``exact``) for ``solver``."""
    reference = SequentialBackend().train_cohort(task, solver, work)
    try:
        assert_same_round(reference, backend.train_cohort(task, solver, work), exact=exact)
    except AssertionError as error:
        first_line = str(error).strip().splitlines()[0]
        raise AssertionError(
            f"solver {label}: the {backend_name} backend's numbers differ from the sequential backend's "
            f"({first_line}); the likely cause: the solver keeps the gradient grad_fn returns while declaring "
            f"keeps_gradient = {solver.keeps_gradient} ({CONTRACT})") from None


def _task(model: str):
    hidden = ("model.hidden=[12]",) if model == "mlp" else ()
    return make_task(f"model.name={model}", *hidden, "client.batch_size=16", "client.epochs=2")


@pytest.fixture(scope="module")
def pool():
    if not fork_available():
        pytest.skip("the processes backend needs the fork start method")
    backend = ProcessPoolBackend(2)
    yield backend
    backend.close()


# --- the contract as declared ---------------------------------------------------------------------


def test_the_declaration_is_not_inherited():
    assert LocalSolver.keeps_gradient is False                      # plain SGD, the package's own
    assert LocalMomentum.keeps_gradient is True                     # a user's solver: the safe default

    class ProxWithMomentum(FedProxSolver):                          # built on a package solver
        pass
    assert FedProxSolver.keeps_gradient is False and ProxWithMomentum.keeps_gradient is True


def test_the_momentum_solver_really_keeps_its_gradient():
    """Handed the reused buffer (what the sequential backend did before the contract), the
    momentum solver's numbers change: so the tests below can fail."""
    task, config = _task("mlp")
    solver = LocalMomentum(config.client.options)
    work = make_work(task, solver, COHORT)
    owned = SequentialBackend().train_cohort(task, solver, work)
    reused = SequentialBackend(copy_gradient=False).train_cohort(task, solver, work)
    assert not torch.equal(owned[0].deltas, reused[0].deltas)


@pytest.mark.parametrize("model", ["mlp", "logreg"])      # the hand-written MLP gradient, and autograd
@pytest.mark.parametrize("solver_name", [*SOLVERS, "local-momentum"])
def test_every_solver_s_declaration_holds(solver_name, model):
    task, config = _task(model)
    solver = solver_for(solver_name, config)
    check_declaration(solver_name, solver, task, make_work(task, solver, COHORT))


@pytest.mark.parametrize("solver_name", [*SOLVERS, "local-momentum"])
def test_every_solver_gives_the_sequential_numbers_on_every_backend(solver_name, pool):
    task, config = _task("mlp")
    solver = solver_for(solver_name, config)
    work = make_work(task, solver, COHORT)
    check_parity(solver_name, solver, task, work, "processes", pool, exact=True)
    if solver.vectorizable:
        check_parity(solver_name, solver, task, work, "vectorized", VectorizedBackend(), exact=False)


def test_a_wrong_declaration_fails_naming_the_cause(pool):
    task, config = _task("mlp")
    solver = WronglyDeclaredMomentum(config.client.options)
    work = make_work(task, solver, COHORT)
    with pytest.raises(AssertionError, match=r"declares keeps_gradient = False, but its deltas change when the "
                                             r"gradient grad_fn returns is copied"):
        check_declaration("wrongly-declared", solver, task, work)
    with pytest.raises(AssertionError, match=r"vectorized backend's numbers differ .*keeps the gradient .*"
                                             r"keeps_gradient = False"):
        check_parity("wrongly-declared", solver, task, work, "vectorized", VectorizedBackend(), exact=False)


def test_every_registered_solver_is_covered():
    """The parametrisations above are the registry's solvers (registered before collection)."""
    assert SOLVERS == CLIENT_SOLVERS.names() and "sgd" in SOLVERS


# --- Ray: the same code as the processes backend, in actors ----------------------------------------


@pytest.mark.slow      # a local Ray of its own and its actors: ~25 s on a busy 2-core machine
@pytest.mark.filterwarnings("ignore::FutureWarning")      # Ray's accelerator notice
def test_ray_gives_the_sequential_numbers_for_a_solver_that_keeps_its_gradient():
    ray = pytest.importorskip("ray")
    from ray import cloudpickle

    from fedhet.backends.ray_backend import RayBackend, RaySettings

    # The test's solver class travels to the actors by value (they cannot import this test module).
    cloudpickle.register_pickle_by_value(__import__(__name__))
    temp_dir = tempfile.mkdtemp(prefix="fedhet-ray-test-")      # short: Ray's socket paths must fit 107 bytes
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp_dir,
             log_to_driver=False, logging_level="WARNING")
    try:
        backend = RayBackend(RaySettings(actors=2))
        try:
            task, config = _task("mlp")
            for solver in (LocalMomentum(config.client.options), make_solver("sgd", config)):
                work = make_work(task, solver, COHORT)
                check_parity(type(solver).__name__, solver, task, work, "ray", backend, exact=True)
        finally:
            backend.close()
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        cloudpickle.unregister_pickle_by_value(__import__(__name__))
