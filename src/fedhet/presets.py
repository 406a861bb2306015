"""Starter configurations shipped inside the package, so that an installed fedhet needs no checkout.

The presets are the TOML files of ``fedhet/configs/`` (package data). A preset's name is its file
name without ``.toml``; :func:`write_preset` copies one, comments included, to a path of the user's
choice (``fedhet init``), where it is edited and run like any config file.
"""
from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from fedhet.core.io import atomic_write_text
from fedhet.errors import FedhetError

DEFAULT_PRESET = "synthetic_quickstart"
"""The preset ``fedhet init`` writes when none is named: it needs no data set and runs in seconds."""


class PresetError(FedhetError, ValueError):
    """An unknown preset name."""


class ConfigExistsError(FedhetError, FileExistsError):
    """``fedhet init`` would overwrite an existing file."""


def _preset_files() -> dict[str, Traversable]:
    folder = resources.files("fedhet") / "configs"
    return {entry.name[: -len(".toml")]: entry for entry in folder.iterdir()
            if entry.is_file() and entry.name.endswith(".toml")}


def preset_names() -> list[str]:
    """The names of the shipped presets, sorted."""
    return sorted(_preset_files())


def preset_text(name: str) -> str:
    """The TOML text of preset ``name``.

    Raises:
        PresetError: no preset has this name; the message lists those that exist.
    """
    files = _preset_files()
    if name not in files:
        raise PresetError(f"preset {name!r} does not exist; available presets: {', '.join(sorted(files))}")
    return files[name].read_text(encoding="utf-8")


def write_preset(name: str, path: str | Path | None = None, *, overwrite: bool = False) -> Path:
    """Write preset ``name`` to ``path`` (default ``<name>.toml`` in the working directory).

    A directory as ``path`` receives ``<name>.toml``. The file is written atomically; an existing
    file is kept unless ``overwrite`` is true.

    Returns:
        The path written.

    Raises:
        PresetError: no preset has this name.
        ConfigExistsError: the target exists and ``overwrite`` is false.
    """
    text = preset_text(name)
    target = Path(path) if path is not None else Path(f"{name}.toml")
    if target.is_dir():
        target = target / f"{name}.toml"
    if target.exists() and not overwrite:
        raise ConfigExistsError(f"{target} already exists; choose another path or pass --force to replace it")
    atomic_write_text(target, text)
    return target
