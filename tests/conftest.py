"""Suite-wide settings: one torch thread per test process.

The suite runs on 2-core machines where several processes compete; tiny kernels (8x8 Cholesky,
small matmuls) were measured thousands of times slower with 2 contended threads than with one.
fedhet's runner makes the same choice for CPU runs (``engine.runner.configure_threads``).
"""
import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(session, config, items):
    """Modules with slow tests first, in their collected order otherwise.

    ``scripts/test.sh`` hands whole modules to two xdist workers in collection order; a long module
    (a real Flower federation, the kill campaign) handed out last leaves one worker idle while the other
    finishes it. Started first, the short modules fill in around it.
    """
    slow_modules = {item.module.__name__ for item in items
                    if item.get_closest_marker("slow") is not None and getattr(item, "module", None) is not None}
    items.sort(key=lambda item: getattr(getattr(item, "module", None), "__name__", "") not in slow_modules)
