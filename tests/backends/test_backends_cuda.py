"""On a CUDA GPU, the sequential and vectorised backends give the CPU's numbers (float64, 1e-9
relative) for every registered local solver. Skipped where no CUDA GPU is present (CI has none); the
GPU figures and the run of these tests are in benchmarks/README.md ("Claims workload on a GPU")."""
import warnings

import pytest
import torch

from backend_cases import COHORT, SCENARIOS, SOLVERS, assert_same_round, make_solver, make_task, make_work, round_on_cpu
from fedhet.backends.sequential import SequentialBackend
from fedhet.backends.vectorized import VectorizedBackend

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# Partial batches and very unequal step counts: the two ways a padded cohort differs from the loop.
GPU_SCENARIOS = ("epochs-partial-batches", "hybrid-plus")


@pytest.mark.parametrize("scenario", GPU_SCENARIOS)
@pytest.mark.parametrize("solver_name", SOLVERS)
def test_gpu_backends_match_the_cpu_for_every_solver(solver_name, scenario):
    overrides = ("model.name=mlp", "model.hidden=[12]", *SCENARIOS[scenario])
    cpu_task, config = make_task(*overrides)
    solver = make_solver(solver_name, config)
    reference = SequentialBackend().train_cohort(cpu_task, solver, make_work(cpu_task, solver, COHORT))

    gpu_task, _ = make_task(*overrides, device="cuda")
    assert gpu_task.device.type == "cuda"
    gpu_work = make_work(gpu_task, solver, COHORT)
    sequential = SequentialBackend().train_cohort(gpu_task, solver, gpu_work)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no silent fallback to the sequential code
        vectorized = VectorizedBackend().train_cohort(gpu_task, solver, gpu_work)
    assert sequential[0].deltas.device.type == vectorized[0].deltas.device.type == "cuda"
    assert_same_round(reference, round_on_cpu(sequential), exact=False)
    assert_same_round(reference, round_on_cpu(vectorized), exact=False)
