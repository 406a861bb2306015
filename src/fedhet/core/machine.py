"""Facts about the machine this process runs on, read by the engine, the backends and the lab."""
from __future__ import annotations

import os
from typing import Optional


def usable_cpus(threads: Optional[int] = None) -> int:
    """CPUs this process may run on (its affinity mask, which containers and ``taskset`` restrict),
    capped by ``run.threads`` when given: the number of cores a run may keep busy at once."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    return max(1, min(count, threads) if threads is not None else count)
