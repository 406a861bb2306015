"""Imports the build scripts that live in docs/ (not a package) for the docs tests."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(relative: str):
    """The module at ``ROOT / relative``, imported under its file name."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
