"""The files a ``save_to_disk`` directory names, checked before ``datasets.load_from_disk`` opens them.

``DatasetDict.save_to_disk(DIR)`` writes ``DIR/dataset_dict.json`` (``{"splits": [...]}``) and, per
split, ``DIR/<split>/dataset_info.json``, ``DIR/<split>/state.json`` and the Arrow files that
``state.json`` lists (``"_data_files": [{"filename": ...}]``). ``load_from_disk`` opens every one of
them by joining the names to the directory, so a crafted directory could make it read a file
anywhere (``../../x.arrow``, an absolute name, a symbolic link out of the directory) or block for
ever on a FIFO. :func:`saved_dataset_files` reads the JSON files itself (non-blocking, regular files
only, bounded) and requires every file named to be a regular file that resolves inside the
directory; the paths it returns are exactly the files ``load_from_disk`` reads, which
``data_files.json`` records.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from fedhet.core.io import NotAPlainFileError, read_small_file
from fedhet.data.errors import DatasetFileError

DICT_FILE = "dataset_dict.json"
STATE_FILE = "state.json"
INFO_FILE = "dataset_info.json"


def _inside(root: Path, path: Path, what: str) -> Path:
    """``path`` resolved (links followed), required to be a regular file under ``root``."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise DatasetFileError(f"{path}: {what} resolves to {resolved}, outside data.path = {root}; the files of a "
                               "saved dataset must be inside its directory")
    try:
        mode = os.stat(resolved).st_mode
    except FileNotFoundError:
        raise DatasetFileError(f"{path}: {what} is missing; save the dataset again with save_to_disk") from None
    if not stat.S_ISREG(mode):
        raise DatasetFileError(f"{path}: {what} is not a regular file (a FIFO, a device or a folder); "
                               "the files of a saved dataset must be plain files")
    return resolved


def _json(root: Path, path: Path, what: str) -> Any:
    resolved = _inside(root, path, what)
    try:
        return json.loads(read_small_file(resolved).decode("utf-8"))
    except (NotAPlainFileError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise DatasetFileError(f"{path}: {what} is not readable JSON ({type(error).__name__}); "
                               "save the dataset again with save_to_disk") from None


def _split_files(root: Path, directory: Path, split: Any) -> list[Path]:
    if not isinstance(split, str) or split in ("", ".", "..") or "/" in split or "\\" in split:
        raise DatasetFileError(f"{directory / DICT_FILE}: split name {split!r} is not a folder name of the directory")
    folder = directory / split
    files = [_inside(root, folder / INFO_FILE, "the split's dataset_info.json")]
    state = _json(root, folder / STATE_FILE, "the split's state.json")
    entries = state.get("_data_files") if isinstance(state, dict) else None
    if entries == []:
        # save_to_disk writes no data file for a split without rows, and datasets cannot load one.
        raise DatasetFileError(f"{folder}: split {split!r} has no rows (no data file); datasets cannot load an "
                               "empty split: every split of the saved dataset needs examples")
    if not isinstance(entries, list):
        raise DatasetFileError(f"{folder / STATE_FILE}: expected \"_data_files\": a list of {{\"filename\": ...}}")
    files.append(folder.joinpath(STATE_FILE).resolve())
    for entry in entries:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise DatasetFileError(f"{folder / STATE_FILE}: a \"_data_files\" entry without a file name: {entry!r}")
        files.append(_inside(root, folder / name, f"data file {name!r} of split {split!r}"))
    return files


def saved_dataset_files(directory: Path) -> tuple[Path, ...]:
    """Every file ``load_from_disk(directory)`` reads for a saved ``DatasetDict``, resolved and
    checked (module docstring); :class:`DatasetFileError` names the first that is not allowed."""
    root = directory.resolve()
    if (directory / STATE_FILE).exists() and (directory / INFO_FILE).exists():
        # load_from_disk reads this layout as one Dataset, before looking for dataset_dict.json.
        raise DatasetFileError(f"{directory}: holds one Dataset, not a DatasetDict with train and test splits; "
                               "save DatasetDict({'train': ..., 'test': ...})")
    if not (directory / DICT_FILE).exists():
        raise DatasetFileError(f"{directory}: not a dataset saved with save_to_disk (no {DICT_FILE})")
    layout = _json(root, directory / DICT_FILE, DICT_FILE)
    splits = layout.get("splits") if isinstance(layout, dict) else None
    if not isinstance(splits, list) or not splits:
        raise DatasetFileError(f"{directory / DICT_FILE}: expected {{\"splits\": [...]}}")
    files = [(directory / DICT_FILE).resolve()]
    for split in splits:
        files += _split_files(root, directory, split)
    return tuple(files)
