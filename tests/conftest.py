"""Suite-wide settings: one torch thread per test process, and the longest modules handed out first.

The suite runs on 2-core machines where several processes compete; tiny kernels (8x8 Cholesky,
small matmuls) were measured thousands of times slower with 2 contended threads than with one.
fedhet's runner makes the same choice for CPU runs (``engine.runner.configure_threads``).
"""
from pathlib import Path

import torch

torch.set_num_threads(1)

# The longest modules, longest first: seconds each took in ``scripts/test.sh`` on a 2-core machine
# (``--durations``, its tests' set-up and calls added up; rounded). Only their order matters.
LONGEST_MODULES = (
    "tests/flower/test_flower_deploy.py",                   # 370: real SuperLink/SuperNodes, 4 federations
    "tests/backends/test_backends_ray.py",                  # 155: a local Ray, actors killed and stopped
    "tests/reliability/test_reliability_kill_campaign.py",  # 145: 20 SIGKILLed fedhet processes
    "tests/packaging/test_packaging_wheel.py",              # 120: a wheel built and installed in a venv
    "tests/lab/sweep/test_sweep_worker_serve.py",           # 80: worker processes
    "tests/tracking/test_tracking_resume.py",               # 70: a killed tracked run
    "tests/tracking/test_tracking_mlflow_store.py",         # 65: MLflow stores, a parallel sweep
    "tests/backends/test_ray_multinode.py",                 # 50: a three-node Ray cluster
    "tests/lab/tuning/test_tuning_staged.py",               # 45: staged searches of real runs
    "tests/docs/test_docs_site.py",                         # 40: two strict site builds
    "tests/tracking/test_tracking_sweep.py",                # 25: a tracked sweep
    "tests/tracking/test_tracking_trackers.py",             # 25: TensorBoard and MLflow of one run
    "tests/docs/test_docs_notebook.py",                     # 20: the notebook executed
)
# A module moved or renamed would silently lose its place at the front.
assert all((Path(__file__).parent.parent / path).is_file() for path in LONGEST_MODULES), \
    [path for path in LONGEST_MODULES if not (Path(__file__).parent.parent / path).is_file()]


def _module_rank(item, slow_modules: set[str]) -> tuple[int, int]:
    path = item.nodeid.split("::", 1)[0]
    if path in LONGEST_MODULES:
        return 0, LONGEST_MODULES.index(path)
    return (1 if path in slow_modules else 2), 0


def pytest_collection_modifyitems(session, config, items):
    """The modules in LONGEST_MODULES first, longest first; then the other modules with slow tests;
    then the rest, each group in its collected order.

    ``scripts/test.sh`` hands whole modules to two xdist workers in this order (``--dist loadscope
    --no-loadscope-reorder``; xdist's default reorder would sort modules by their number of tests and
    hand a one-test module such as the kill campaign out near the end). A long module handed out last
    leaves one worker idle while the other finishes it; started first, the short modules fill in
    around it.
    """
    slow_modules = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow") is not None}
    ranks = {id(item): _module_rank(item, slow_modules) for item in items}
    items.sort(key=lambda item: ranks[id(item)])      # a stable sort: a module's tests keep their order
