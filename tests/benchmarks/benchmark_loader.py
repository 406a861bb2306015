"""Loading a script of benchmarks/ as a module, for the tests of its counting (the scripts import
their siblings, so benchmarks/ is on sys.path while one loads)."""
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str):
    """``benchmarks/<name>.py`` as a fresh module."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"{name}_under_test", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module      # a dataclass of the script looks its module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))
