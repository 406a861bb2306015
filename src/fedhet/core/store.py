"""Per-client server memories: one ``[N, d]`` store abstraction for every method that needs one.

FedAWARE's momenta, FedVarp/MIFA's tables of latest updates, SCAFFOLD's ``c_i``, FedDyn's ``gradL_i``,
FedADMM's duals and FedSpeed's ``ghat_i`` are all rows of an ``N x d`` matrix. A :class:`ClientStore`
holds such a matrix with

- a storage dtype (float32, bfloat16, float16): rows are upcast to float32 (or the run's dtype)
  when read, rounded when written;
- an optional subset of coordinates (e.g. only the last layers, as the FedAWARE paper suggests):
  only those columns are stored, reads return ``[K, len(subset)]``;
- an optional memory-mapped file, for ``N d`` beyond RAM.

The store is state, not an algorithm: it is created by the engine, carried inside a component's
state dict, and checkpointed with the run (:meth:`ClientStore.state_dict`). Rows never written read
as zeros.

Checkpoints of memory-mapped stores. A snapshot of an in-RAM store is a copy of its table. A
memory-mapped store is meant for tables larger than RAM, so its snapshot never holds the table:
:meth:`ClientStore.state_dict` copies the backing file to a numbered snapshot file next to it
(``store-<name>.snapshot-<k>.bin``, written to a temporary name and renamed, so a crash never
leaves a half-written snapshot under that name; the copy is done by the kernel, not through
Python memory) and returns only a reference to it. The checkpoint that holds the reference is
written after the snapshot, so the three most recent snapshots are kept (those referenced by the
latest and the previous checkpoint on disk, and the one just taken) and older ones are deleted.

Snapshots keep the store file's holes (:func:`copy_sparse`): a store file is created sparse, and
rows never written take no disk space, in the store or in its snapshots. A snapshot therefore
occupies at most what the live store occupies, and the disk used by a memory-mapped store is
bounded by four times its live size (the store and three snapshots).
:meth:`ClientStore.load_state_dict` copies a snapshot back block by block.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import torch

from fedhet.errors import FedhetError

_STORAGE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                   "float64": torch.float64}
# numpy has no bfloat16: a memory-mapped bfloat16 store keeps raw 16-bit words.
_NUMPY_CARRIER = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
                  torch.bfloat16: np.uint16}
# Rows copied at a time when a snapshot file is loaded back (bounded memory for any N d).
_COPY_BLOCK_BYTES = 64 << 20
# Snapshot files kept per memory-mapped store (see the module docstring): those of the latest and
# the previous checkpoint (checkpoint.prev.pt, the fallback when the latest is corrupt) and the one
# just taken, whose checkpoint may not be written yet.
_SNAPSHOTS_KEPT = 3


class StoreFileError(FedhetError, OSError):
    """A memory-mapped store's file is a symbolic link or not a regular file."""


@dataclasses.dataclass(frozen=True)
class StoreOptions:
    """How per-client memories are stored (the engine's ``run.store_*`` settings)."""

    dtype: str = "float32"
    device: str = "cpu"
    mmap_dir: Optional[str] = None   # directory for memory-mapped stores; None keeps them in RAM
    # CPU threads for whole-table kernels over the store (FedAWARE's Gram rows and weighted sum,
    # fedhet.server.table_kernels): same numbers for any count; the engine uses the run's CPUs.
    threads: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 1:
            raise ValueError(f"store threads must be a positive int, got {self.threads!r}")


class ClientStore:
    """An ``[N, d_stored]`` table of per-client vectors."""

    def __init__(self, name: str, num_clients: int, dim: int, *, options: StoreOptions = StoreOptions(),
                 subset: Optional[torch.Tensor] = None, compute_dtype: torch.dtype = torch.float32):
        if options.dtype not in _STORAGE_DTYPES:
            raise ValueError(f"store dtype {options.dtype!r} unknown; allowed: {', '.join(_STORAGE_DTYPES)}")
        self.name = name
        self.num_clients = int(num_clients)
        self.full_dim = int(dim)
        self.subset = None if subset is None else subset.to(torch.int64).to(options.device)
        self.dim = self.full_dim if subset is None else int(subset.numel())
        self.storage_dtype = _STORAGE_DTYPES[options.dtype]
        self.compute_dtype = compute_dtype
        self.options = options
        self.path: Optional[Path] = None
        self._snapshot_index = 0
        if options.mmap_dir is not None:
            self.path = Path(options.mmap_dir) / f"store-{name}.bin"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
                # The table is written in place: a planted link would redirect the writes outside
                # the run directory (docs/reliability.md, "Security").
                raise StoreFileError(f"{self.path} is a symbolic link or not a regular file; fedhet writes this "
                                     "store in place and does not follow links out of a run directory: remove it")
            carrier = _NUMPY_CARRIER[self.storage_dtype]
            mode = "r+" if self.path.exists() else "w+"
            array = np.memmap(self.path, dtype=carrier, mode=mode, shape=(self.num_clients, self.dim))
            table = torch.from_numpy(array)
            self._mmap = array
            self.table = table.view(torch.bfloat16) if self.storage_dtype == torch.bfloat16 else table
        else:
            self._mmap = None
            self.table = torch.zeros(self.num_clients, self.dim, dtype=self.storage_dtype, device=options.device)
        # Which rows have ever been written (e.g. "clients seen so far" for FedAWARE).
        self.written = torch.zeros(self.num_clients, dtype=torch.bool, device=options.device)

    # --- rows -------------------------------------------------------------------------------------
    def project(self, full: torch.Tensor) -> torch.Tensor:
        """The stored coordinates of full-length vectors ``[..., d]``."""
        return full if self.subset is None else full.index_select(-1, self.subset.to(full.device))

    def read(self, ids: torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
        """Rows ``ids`` as ``[K, d_stored]`` in the compute dtype (a copy)."""
        if ids.numel() > 1 and ids.device.type == "cpu" and bool((ids.diff() == 1).all()):
            # A range of rows (e.g. the Gram update's blocks): upcast from a view, one copy not two.
            first = int(ids[0])
            rows = self.table[first:first + ids.numel()]
            copied = rows.to(device=device or self.table.device, dtype=self.compute_dtype)
            return copied.clone() if copied.data_ptr() == rows.data_ptr() else copied
        rows = self.table.index_select(0, ids.to(self.table.device))
        return rows.to(device=device or self.table.device, dtype=self.compute_dtype)

    def read_all(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The whole table in the compute dtype. For large stores prefer :meth:`row_blocks`, which
        upcasts a bounded number of rows at a time."""
        return self.table.to(device=device or self.table.device, dtype=self.compute_dtype)

    def row_blocks(self, max_bytes: int = _COPY_BLOCK_BYTES) -> Iterator[tuple[int, int]]:
        """Contiguous row ranges ``[start, stop)`` covering the table, each at most ``max_bytes``
        once upcast to the compute dtype (at least one row per range)."""
        row_bytes = max(1, self.dim * torch.empty(0, dtype=self.compute_dtype).element_size())
        rows = max(1, int(max_bytes) // row_bytes)
        for start in range(0, self.num_clients, rows):
            yield start, min(start + rows, self.num_clients)

    def read_range(self, start: int, stop: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Rows ``start:stop`` in the compute dtype. When the storage dtype is the compute dtype
        this is a view of the table (no copy): do not modify it."""
        rows = self.table[start:stop]
        return rows.to(device=device or self.table.device, dtype=self.compute_dtype)

    def write(self, ids: torch.Tensor, rows: torch.Tensor) -> None:
        """Set rows ``ids`` (``[K, d_stored]``, or ``[K, d]`` full vectors when a subset is stored)."""
        if rows.shape[-1] != self.dim:
            rows = self.project(rows)
        ids = ids.to(self.table.device)
        self.table.index_copy_(0, ids, rows.to(device=self.table.device, dtype=self.storage_dtype))
        self.written[ids] = True

    def nbytes(self) -> int:
        return self.table.numel() * self.table.element_size()

    # --- checkpointing ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A snapshot that later writes cannot change.

        In-RAM store: ``{"name", "table", "written", "subset"}`` with a CPU copy of the table.
        Memory-mapped store: ``{"name", "snapshot_file", "snapshot_path", "shape", "dtype",
        "written", "subset"}``: the table is copied file to file (module docstring) and only
        referenced, so a checkpoint never pulls an ``N x d`` table into RAM.
        """
        common = {"name": self.name, "written": self.written.to("cpu", copy=True),
                  "subset": None if self.subset is None else self.subset.cpu()}
        if self.path is None:
            return {**common, "table": self.table.detach().to("cpu", copy=True)}
        snapshot = self._write_snapshot_file()
        return {**common, "snapshot_file": snapshot.name, "snapshot_path": str(snapshot),
                "shape": (self.num_clients, self.dim), "dtype": _dtype_name(self.storage_dtype)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a snapshot taken by :meth:`state_dict` (either kind, into either kind of store)."""
        if "snapshot_file" in state:
            self._load_snapshot_file(state)
        else:
            if tuple(state["table"].shape) != tuple(self.table.shape):
                raise ValueError(f"store {self.name}: checkpoint shape {tuple(state['table'].shape)} "
                                 f"!= configured {tuple(self.table.shape)}")
            self.table.copy_(state["table"].to(self.table.device))
        self.written.copy_(state["written"].to(self.written.device))

    def flush(self) -> None:
        if self._mmap is not None:
            self._mmap.flush()

    def __repr__(self) -> str:
        return (f"ClientStore({self.name!r}, N={self.num_clients}, d={self.dim}, dtype={self.storage_dtype}, "
                f"mmap={'yes' if self.path else 'no'})")

    # --- snapshot files (memory-mapped stores) ------------------------------------------------------
    def _snapshot_pattern(self) -> re.Pattern[str]:
        assert self.path is not None
        return re.compile(re.escape(self.path.stem) + r"\.snapshot-(\d+)\.bin")

    def _write_snapshot_file(self) -> Path:
        """Copy the backing file to the next numbered snapshot, atomically; prune old snapshots."""
        assert self.path is not None
        self.flush()
        self._snapshot_index += 1
        target = self.path.with_name(f"{self.path.stem}.snapshot-{self._snapshot_index:06d}.bin")
        temporary = target.with_name(f".{target.name}.tmp")
        try:
            copy_sparse(self.path, temporary)
            with open(temporary, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        pattern = self._snapshot_pattern()
        for candidate in self.path.parent.iterdir():
            match = pattern.fullmatch(candidate.name)
            if match and int(match.group(1)) <= self._snapshot_index - _SNAPSHOTS_KEPT:
                candidate.unlink(missing_ok=True)
        return target

    def _locate_snapshot(self, state: dict[str, Any]) -> Path:
        # Prefer the file next to this store (a run directory may have been moved), then the
        # absolute path recorded when the snapshot was taken.
        candidates = []
        if self.path is not None:
            candidates.append(self.path.parent / state["snapshot_file"])
        candidates.append(Path(state["snapshot_path"]))
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"store {self.name}: the checkpoint refers to snapshot file "
                                f"{state['snapshot_file']!r}, found in none of "
                                f"{', '.join(str(c) for c in candidates)}; the run's stores directory "
                                "must stay next to its checkpoint")

    def _load_snapshot_file(self, state: dict[str, Any]) -> None:
        shape = tuple(state["shape"])
        if shape != tuple(self.table.shape):
            raise ValueError(f"store {self.name}: checkpoint shape {shape} != configured {tuple(self.table.shape)}")
        if state["dtype"] != _dtype_name(self.storage_dtype):
            raise ValueError(f"store {self.name}: checkpoint storage dtype {state['dtype']} != configured "
                             f"{_dtype_name(self.storage_dtype)}; resume with the same run.store_dtype")
        path = self._locate_snapshot(state)
        storage_dtype = _STORAGE_DTYPES[state["dtype"]]
        carrier = _NUMPY_CARRIER[storage_dtype]
        expected = int(np.prod(shape)) * np.dtype(carrier).itemsize
        if path.stat().st_size != expected:
            raise ValueError(f"store {self.name}: snapshot {path} has {path.stat().st_size} bytes, "
                             f"expected {expected} for shape {shape} in {state['dtype']}; it may be truncated")
        if self.path is not None and path.resolve() != self.path.resolve():
            # File to file, keeping holes: a restored sparse store stays sparse. The file is
            # rewritten in place (same inode), so this store's shared mapping sees the new bytes.
            self.flush()
            copy_sparse(path, self.path)
            self._continue_numbering(path)
            return
        source = np.memmap(path, dtype=carrier, mode="r", shape=shape)
        row_bytes = max(1, shape[1] * np.dtype(carrier).itemsize)
        rows_per_block = max(1, _COPY_BLOCK_BYTES // row_bytes)
        for start in range(0, shape[0], rows_per_block):
            block = torch.from_numpy(np.array(source[start:start + rows_per_block]))
            if storage_dtype == torch.bfloat16:
                block = block.view(torch.bfloat16)
            self.table[start:start + block.shape[0]].copy_(block.to(self.table.device))
        del source
        self._continue_numbering(path)

    def _continue_numbering(self, path: Path) -> None:
        match = self._snapshot_pattern().fullmatch(path.name) if self.path is not None else None
        if match:
            # Continue the numbering after the snapshot resumed from; a later snapshot with a
            # higher number (taken after that checkpoint, never referenced) is simply replaced.
            self._snapshot_index = int(match.group(1))


def copy_sparse(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` keeping its holes: only the data ranges (``SEEK_DATA`` /
    ``SEEK_HOLE``) are copied, by the kernel (``os.copy_file_range``, else ``os.sendfile``), and the
    target is extended to the source's size. Where the filesystem cannot report holes the whole
    file is copied (every range is data), which is the same bytes, only not sparse."""
    if not hasattr(os, "SEEK_DATA"):  # pragma: no cover - no hole reporting on this platform
        shutil.copyfile(source, target)
        return
    size = os.path.getsize(source)
    with open(source, "rb") as src, open(target, "wb") as dst:
        fd_in, fd_out = src.fileno(), dst.fileno()
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fd_in, offset, os.SEEK_DATA)
            except OSError:          # ENXIO: no data after offset (the rest is a hole)
                break
            end = os.lseek(fd_in, start, os.SEEK_HOLE)
            _copy_range(fd_in, fd_out, start, end)
            offset = end
        os.ftruncate(fd_out, size)
        dst.flush()


def _copy_range(fd_in: int, fd_out: int, start: int, end: int) -> None:
    position = start
    kernel_copy = hasattr(os, "copy_file_range")
    while position < end:
        count = end - position
        copied = 0
        if kernel_copy:
            try:
                copied = os.copy_file_range(fd_in, fd_out, count, position, position)
            except OSError as error:   # EXDEV, ENOSYS, EOPNOTSUPP...: copy through a bounded buffer
                if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                kernel_copy = False
        if not kernel_copy:
            copied = os.pwrite(fd_out, os.pread(fd_in, min(count, _COPY_BLOCK_BYTES), position), position)
        if copied <= 0:
            raise OSError(f"copy stopped at byte {position} of {end}")
        position += copied


def _dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, value in _STORAGE_DTYPES.items() if value == dtype)
