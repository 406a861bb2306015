"""The core every other package builds on: flat parameters, stores, seeding, cohorts, the task and
its evaluation, dataset containers, registries, atomic I/O and option dataclasses.

Modules here import nothing from fedhet outside ``fedhet.core`` except the top-level core modules
(``fedhet.errors``, ``fedhet.names``, ``fedhet.logs``, ``fedhet.error_lines``, ``fedhet.presets``);
``tests/core/test_core_layering.py`` enforces it (docs/design.md, "Layers").

This package is also the lab's entrance to the core's files and machine: ``__all__`` names the atomic
writes and bounded reads, the log files, the seed derivation, the owned temporary directories and the
usable CPUs; the option machinery and the registries are entered through :mod:`fedhet.config`. Each
name is imported on first use (PEP 562), so importing ``fedhet.core`` imports none of its modules.
"""
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # The names of _EXPORTS below, for type checkers; at run time __getattr__ imports them on first use.
    from fedhet.core.io import (
        NotAPlainFileError,
        atomic_savefig,
        atomic_write_bytes,
        atomic_write_json,
        atomic_write_text,
        read_small_file,
    )
    from fedhet.core.log_files import (
        UnsafeLogFileError,
        append_log_text,
        check_log_file,
        open_log_for_append,
        read_log_tail,
    )
    from fedhet.core.machine import usable_cpus
    from fedhet.core.seeding import derive_seed
    from fedhet.core.tempdirs import owned_temp_dir, remove_orphaned_temp_dirs

# name -> the module that defines it (the same pairs as the imports above).
_EXPORTS = {
    "atomic_savefig": "fedhet.core.io",
    "atomic_write_bytes": "fedhet.core.io",
    "atomic_write_json": "fedhet.core.io",
    "atomic_write_text": "fedhet.core.io",
    "NotAPlainFileError": "fedhet.core.io",
    "read_small_file": "fedhet.core.io",
    "append_log_text": "fedhet.core.log_files",
    "check_log_file": "fedhet.core.log_files",
    "open_log_for_append": "fedhet.core.log_files",
    "read_log_tail": "fedhet.core.log_files",
    "UnsafeLogFileError": "fedhet.core.log_files",
    "usable_cpus": "fedhet.core.machine",
    "derive_seed": "fedhet.core.seeding",
    "owned_temp_dir": "fedhet.core.tempdirs",
    "remove_orphaned_temp_dirs": "fedhet.core.tempdirs",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["atomic_savefig", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "NotAPlainFileError",
           "read_small_file", "append_log_text", "check_log_file", "open_log_for_append", "read_log_tail",
           "UnsafeLogFileError", "usable_cpus", "derive_seed", "owned_temp_dir", "remove_orphaned_temp_dirs"]
