"""The record of which dataset files a run read: ``data_files.json`` in the run directory.

::

    {"dataset": "fmnist", "root": null,
     "files": [{"path": "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                "bytes": 26421880, "sha256": "..."}, ...]}

``path`` is absolute (symbolic links resolved), so the record says where the data came from even
when ``data.root`` was relative or unset. ``files`` is empty for generated data (``synthetic``), and
``null`` with a ``note`` for a loader that does not report the files it read (it then records only
its ``root``); docs/reliability.md, "Inputs and errors", lists which do.

Hashing reads every file once per new run (one sequential read of the data set's files).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

from fedhet.core.dataset import DatasetBundle

DATA_FILES_NAME = "data_files.json"
_CHUNK = 1 << 20


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def data_files_record(bundle: DatasetBundle, *, dataset: str, root: Optional[str], generated: bool) -> dict[str, Any]:
    """The ``data_files.json`` content for a loaded ``bundle`` (module docstring)."""
    record: dict[str, Any] = {"dataset": dataset, "root": root}
    if bundle.source_files is not None:
        files = []
        for name in bundle.source_files:
            path = Path(name).resolve()
            files.append({"path": str(path), "bytes": path.stat().st_size, "sha256": sha256_of(path)})
        record["files"] = files
    elif generated:
        record["files"] = []
        record["note"] = "generated data: no files read"
    else:
        record["files"] = None
        record["note"] = "this dataset's loader does not report the files it read; see root"
    return record
