"""The machine line every benchmark result carries (no torch import: bench_w.py's parent process
stays light while it measures its subprocesses)."""
from __future__ import annotations

import os
import platform


def machine(*details: str) -> str:
    """CPU model, usable CPUs, Python version, then ``details`` (e.g. the torch version)."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return ", ".join([cpu, f"{len(os.sched_getaffinity(0))} usable CPUs", *details,
                      f"Python {platform.python_version()}"])
