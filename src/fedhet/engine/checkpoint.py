"""Checkpoints: the whole training state in one file, written atomically.

Component states are nested dicts of tensors and numbers, except per-client stores
(:class:`fedhet.store.ClientStore`), which are replaced by their snapshot on save and loaded back
into the freshly initialised stores on restore.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedhet.io import atomic_torch_save
from fedhet.store import ClientStore

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


def to_saveable(obj: Any) -> Any:
    if isinstance(obj, ClientStore):
        return {"__client_store__": obj.state_dict()}
    if isinstance(obj, dict):
        return {key: to_saveable(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_saveable(value) for value in obj)
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    return obj


def restore(fresh: Any, saved: Any, device: torch.device | str) -> Any:
    """``saved`` with stores loaded into the matching fresh stores and each tensor placed where the
    fresh run keeps it: on the device of the fresh tensor it replaces, else on ``device``.

    Placement follows the fresh state rather than one device because a GPU run keeps some state on
    the CPU on purpose (participation draws, FedAWARE's Gram matrix); moving those to the GPU made
    a resumed run mix devices."""
    if isinstance(saved, dict) and "__client_store__" in saved:
        if not isinstance(fresh, ClientStore):
            raise ValueError("checkpoint holds a per-client store where the configured run has none")
        fresh.load_state_dict(saved["__client_store__"])
        return fresh
    if isinstance(saved, dict):
        fresh_dict = fresh if isinstance(fresh, dict) else {}
        return {key: restore(fresh_dict.get(key), value, device) for key, value in saved.items()}
    if isinstance(saved, (list, tuple)):
        fresh_seq = fresh if isinstance(fresh, (list, tuple)) and len(fresh) == len(saved) else [None] * len(saved)
        return type(saved)(restore(f, s, device) for f, s in zip(fresh_seq, saved))
    if isinstance(saved, torch.Tensor):
        return saved.to(fresh.device if isinstance(fresh, torch.Tensor) else device)
    return saved


def save_checkpoint(run_dir: Path, state: dict[str, Any]) -> None:
    atomic_torch_save(run_dir / CHECKPOINT_NAME, {"format": FORMAT_VERSION, **to_saveable(state)})


def load_checkpoint(run_dir: Path) -> dict[str, Any]:
    path = run_dir / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint in {run_dir} (expected {CHECKPOINT_NAME}); nothing to resume")
    try:
        data = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # a corrupt file: say which and why
        raise ValueError(f"checkpoint {path} cannot be read ({error}); it may be corrupt") from None
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(f"checkpoint {path} has format {data.get('format')}, this fedhet reads {FORMAT_VERSION}")
    return data
