"""Checkpoints: the whole training state in one file, written atomically, holding data only.

Component states are nested typed states (NamedTuples, docs/design.md "State"), dicts, tensors
and plain values, and per-client stores (:class:`fedhet.core.store.ClientStore`). On save a typed state
becomes the dict of its fields and a store its snapshot; on restore both are rebuilt from the
freshly initialised state of the same run (its NamedTuple types, its stores), so the file holds
plain data only.

The file format (version 2) is::

    FEDHET-CHECKPOINT\\n
    {"format": 2, "payload_bytes": n, "sha256": "<hex of the payload>"}\\n
    <n bytes: torch.save of the state>

Rules (docs/reliability.md, "Run directories, checkpoints and records"):

- The payload is read with ``torch.load(weights_only=True)``: tensors, dicts, lists, tuples,
  strings, numbers, booleans and None only. Nothing in a run directory can run code; saving a state
  with any other type is a bug and raises :class:`TypeError` naming where it is.
- The sha256 of the payload is checked before the payload is unpickled, so a flipped or truncated
  byte is a :class:`CheckpointError`, never silently different numbers.
- Saving moves the current ``checkpoint.pt`` to ``checkpoint.prev.pt`` first; when the latest
  checkpoint is missing or corrupt, :func:`load_checkpoint` falls back to the previous one and says
  so through ``log``.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fedhet.core.io import atomic_write_bytes
from fedhet.core.store import ClientStore
from fedhet.errors import FedhetError

CHECKPOINT_NAME = "checkpoint.pt"
PREVIOUS_NAME = "checkpoint.prev.pt"
FORMAT_VERSION = 2
MAGIC = b"FEDHET-CHECKPOINT\n"
# The header line is a few dozen bytes; a bound keeps a garbage file from being read as a huge line.
_MAX_HEADER_BYTES = 4096
_PLAIN = (str, int, float, bool, type(None), torch.dtype, torch.device, torch.Size)


class CheckpointError(FedhetError, ValueError):
    """A checkpoint file cannot be used: corrupt, truncated, of another format, or not fedhet's."""


def to_saveable(obj: Any, where: str = "state") -> Any:
    """``obj`` as plain data: stores replaced by their snapshots, tensors copied to the CPU, NumPy
    scalars made Python numbers. Any other type is a :class:`TypeError` (see the module rules)."""
    if isinstance(obj, ClientStore):
        return {"__client_store__": to_saveable(obj.state_dict(), f"{where}.store")}
    if _is_typed_state(obj):
        return {key: to_saveable(value, f"{where}.{key}") for key, value in obj._asdict().items()}
    if isinstance(obj, dict):
        return {key: to_saveable(value, f"{where}.{key}") for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_saveable(value, f"{where}[{i}]") for i, value in enumerate(obj))
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, _PLAIN):
        return obj
    raise TypeError(f"checkpoint: {where} is a {type(obj).__name__}; checkpoints hold tensors and plain "
                    "data only (dict, list, tuple, str, int, float, bool, None)")


def restore(fresh: Any, saved: Any, device: torch.device | str) -> Any:
    """``saved`` with stores loaded into the matching fresh stores and each tensor placed where the
    fresh run keeps it: on the device of the fresh tensor it replaces, else on ``device``.

    Placement follows the fresh state rather than one device because a GPU run keeps some state on
    the CPU on purpose (participation draws, FedAWARE's Gram matrix); moving those to the GPU made
    a resumed run mix devices."""
    if isinstance(saved, dict) and "__client_store__" in saved:
        if not isinstance(fresh, ClientStore):
            raise CheckpointError("checkpoint holds a per-client store where the configured run has none")
        fresh.load_state_dict(saved["__client_store__"])
        return fresh
    if _is_typed_state(fresh) and isinstance(saved, dict):
        if set(saved) != set(fresh._fields):
            raise CheckpointError(f"checkpoint holds a {type(fresh).__name__} with fields {sorted(saved)}, the "
                                  f"configured run has {sorted(fresh._fields)}")
        return type(fresh)(**{key: restore(getattr(fresh, key), saved[key], device) for key in fresh._fields})
    if isinstance(saved, dict):
        fresh_dict = fresh if isinstance(fresh, dict) else {}
        return {key: restore(fresh_dict.get(key), value, device) for key, value in saved.items()}
    if isinstance(saved, (list, tuple)):
        fresh_seq = fresh if isinstance(fresh, (list, tuple)) and len(fresh) == len(saved) else [None] * len(saved)
        return type(saved)(restore(f, s, device) for f, s in zip(fresh_seq, saved))
    if isinstance(saved, torch.Tensor):
        return saved.to(fresh.device if isinstance(fresh, torch.Tensor) else device)
    return saved


def _is_typed_state(obj: Any) -> bool:
    """Whether ``obj`` is a typed state (a NamedTuple instance)."""
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def encode_checkpoint(state: dict[str, Any]) -> bytes:
    """The bytes of a checkpoint file holding ``state`` (module docstring)."""
    buffer = io.BytesIO()
    torch.save(to_saveable(state), buffer)
    payload = buffer.getvalue()
    header = {"format": FORMAT_VERSION, "payload_bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    return MAGIC + json.dumps(header, sort_keys=True).encode("ascii") + b"\n" + payload


def decode_checkpoint(data: bytes, path: Path | str = "checkpoint") -> dict[str, Any]:
    """The state in checkpoint bytes; :class:`CheckpointError` unless the header, the length and the
    sha256 all match. The payload is only unpickled (data-only) after the checksum matched."""
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{path} is not a fedhet checkpoint of format {FORMAT_VERSION} "
                              "(no FEDHET-CHECKPOINT header); it may be corrupt or from an older fedhet")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + _MAX_HEADER_BYTES)
    try:
        header = json.loads(data[len(MAGIC):end]) if end > 0 else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: unreadable checkpoint header; the file is corrupt")
    if header.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format {header.get('format')!r}, this fedhet reads "
                              f"{FORMAT_VERSION}")
    payload = data[end + 1:]
    if len(payload) != header.get("payload_bytes"):
        raise CheckpointError(f"{path} holds {len(payload)} payload bytes, its header says "
                              f"{header.get('payload_bytes')}; the file is truncated or corrupt")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise CheckpointError(f"{path}: sha256 of the payload does not match its header; the file is corrupt")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:  # the checksum matched, so this is a payload fedhet did not write
        raise CheckpointError(f"{path}: payload refused by the data-only loader ({type(error).__name__}: "
                              f"{str(error).splitlines()[0] if str(error) else ''})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: payload is a {type(state).__name__}, not a state dict")
    return state


def save_checkpoint(run_dir: Path, state: dict[str, Any]) -> None:
    """Write ``state`` as ``run_dir/checkpoint.pt``, keeping the current one as ``checkpoint.prev.pt``.

    Order: encode; move the current checkpoint to the previous name; write the new one atomically.
    A crash between the two steps leaves only ``checkpoint.prev.pt``, which :func:`load_checkpoint`
    uses."""
    data = encode_checkpoint(state)
    latest = run_dir / CHECKPOINT_NAME
    if latest.is_file():
        os.replace(latest, run_dir / PREVIOUS_NAME)
    atomic_write_bytes(latest, data)


def read_checkpoint_file(path: Path) -> dict[str, Any]:
    """The state in one checkpoint file (no fallback)."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CheckpointError(f"checkpoint {path} cannot be read: {error.strerror or error}") from None
    return decode_checkpoint(data, path)


def has_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a checkpoint file (latest or previous; not whether it is valid)."""
    return (run_dir / CHECKPOINT_NAME).is_file() or (run_dir / PREVIOUS_NAME).is_file()


def load_checkpoint(run_dir: Path, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """The state of the latest valid checkpoint in ``run_dir``: ``checkpoint.pt``, else (missing or
    corrupt, reported through ``log``) ``checkpoint.prev.pt``. Raises :class:`CheckpointError` when
    neither is valid, :class:`FileNotFoundError` when there is none."""
    run_dir = Path(run_dir)
    latest, previous = run_dir / CHECKPOINT_NAME, run_dir / PREVIOUS_NAME
    if not latest.is_file() and not previous.is_file():
        raise CheckpointNotFoundError(f"no checkpoint in {run_dir} (expected {CHECKPOINT_NAME}); nothing to resume")
    problems = []
    for path in (latest, previous):
        if not path.is_file():
            problems.append(f"{path.name} is missing")
            continue
        try:
            state = read_checkpoint_file(path)
        except CheckpointError as error:
            problems.append(str(error))
            continue
        if problems:
            log(f"warning: {'; '.join(problems)}; resuming from the previous checkpoint {path.name} "
                f"(round {state.get('simulator', {}).get('next_round', '?')})")
        return state
    raise CheckpointError(f"no usable checkpoint in {run_dir}: {'; '.join(problems)}; start the run again "
                          "with --overwrite")


class CheckpointNotFoundError(FedhetError, FileNotFoundError):
    """A run directory without any checkpoint was asked to resume."""
