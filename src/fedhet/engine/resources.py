"""Memory and disk a run will need, estimated before it starts, against what the machine has.

What is estimated (N clients, d parameters, ``b`` bytes per value of ``run.store_dtype``):

- the per-client stores, ``N x d_stored x b`` bytes each: the local solver's memories (one store per
  name in ``client_state_names``: SCAFFOLD's control variates, FedDyn's gradients, ...) and the
  server's (FedVarp/MIFA's latest updates, FedAWARE's momenta, possibly a subset of the columns).
  In RAM they cost that much memory, and a checkpoint holds a copy of each (disk, and memory while
  it is written); memory-mapped (``run.store_mmap``) they cost disk only, the table plus two
  snapshot files (:mod:`fedhet.core.store`);
- the server's other state tensors, FedAWARE's ``N x N`` float64 Gram matrix (``8 N^2`` bytes:
  7.2 GB at N = 30,000) above all, in memory and in the checkpoint;
- the participation log, ``rounds x N`` booleans (one byte each), in memory and in the checkpoint.

The server's state is measured, not guessed: its ``init`` runs on PyTorch's ``meta`` device, where
tensors have shapes but no storage, with a ``make_store`` that records the stores asked for. A
server whose ``init`` cannot run there is left out of the estimate (and the message says so).

The rule (:func:`check_resources`), with ``available`` the ``MemAvailable`` of ``/proc/meminfo``
(or, for stores on a GPU, the free GPU memory) and the free space of the run directory's file system:

- need > available: refused with a :class:`ResourceLimitError` (``run.resource_check = "error"``,
  the default) or logged as a warning (``"warn"``);
- need > half of available: a warning (the run may still fit, but leaves little for anything else);
- ``run.resource_check = "off"``: no estimate.

The checkpoint is counted twice on disk (the latest and the previous good one). Estimates ignore
the dataset (already loaded when the check runs) and the model's activations.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Optional, cast

import torch

from fedhet.core.memory import available_memory
from fedhet.errors import FedhetError

if TYPE_CHECKING:
    from fedhet.core.store import ClientStore

WARN_FRACTION = 0.5
CHECKPOINTS_KEPT = 2
MMAP_FILES_PER_STORE = 3      # the table and two snapshots (fedhet.core.store)
_STORE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


class ResourceLimitError(FedhetError, MemoryError):
    """The run would need more memory or disk than the machine has; the message says how much of what."""


@dataclasses.dataclass(frozen=True)
class Need:
    """One item of the estimate: ``memory`` bytes on ``device`` while running, ``disk`` bytes in the run directory."""

    what: str
    memory: int = 0
    disk: int = 0
    device: str = "cpu"


def format_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"  # pragma: no cover - loop returns


def available_disk(path: str | Path) -> int:
    """Free bytes on the file system of ``path`` (or of its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def available_gpu_memory(device: torch.device) -> Optional[int]:
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


class _StoreRequest:
    """What a server's ``make_store`` call asked for (name and stored width), without allocating."""

    def __init__(self, name: str, dim: int):
        self.name = name
        self.dim = dim


def _tensors(value: Any, path: str = "") -> list[tuple[str, torch.Tensor]]:
    """``(key path, tensor)`` for every tensor in a nested state."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, tuple) and hasattr(value, "_fields"):      # a typed state (NamedTuple)
        value = cast(NamedTuple, value)._asdict()   # hasattr does not narrow the type to a NamedTuple
    if isinstance(value, dict):
        return [item for k, v in value.items() for item in _tensors(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, (list, tuple)):
        return [item for i, v in enumerate(value) for item in _tensors(v, f"{path}[{i}]")]
    return []


def _tensor_bytes(value: Any) -> dict[str, int]:
    """Bytes per state tensor, keyed ``'<path>' [shape] dtype`` (e.g. FedAWARE's ``'gram' [N x N] float64``)."""
    sizes = {}
    for path, tensor in _tensors(value):
        shape = " x ".join(map(str, tensor.shape))
        sizes[f"'{path}' [{shape}] {str(tensor.dtype).removeprefix('torch.')}"] = tensor.numel() * tensor.element_size()
    return sizes


def _stores_in(value: Any) -> list[_StoreRequest]:
    if isinstance(value, _StoreRequest):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _stores_in(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _stores_in(v)]
    return []


def measure_server_state(server: Any, *, num_clients: int, dim: int, dtype: torch.dtype,
                         param_names: tuple[str, ...] = (), param_slices: Optional[Callable[..., torch.Tensor]] = None
                         ) -> tuple[list[_StoreRequest], dict[str, int]]:
    """The stores a server's ``init`` asks for and the bytes of each of its other state tensors,
    measured on the ``meta`` device (module docstring). Raises whatever ``init`` raises there."""
    from fedhet.server.base import ServerContext

    def request_store(name: str, subset: Optional[torch.Tensor] = None) -> _StoreRequest:
        return _StoreRequest(name, dim if subset is None else int(subset.numel()))

    # The request stands in for the ClientStore that ServerContext.make_store returns: on meta, init
    # only keeps what it is given (no read or write), and _stores_in collects the requests from its state.
    make_store = cast("Callable[..., ClientStore]", request_store)

    with torch.device("meta"):
        params = torch.empty(dim, dtype=dtype)
        context = ServerContext(round_index=0, num_clients=num_clients, make_store=make_store,
                                # Values do not exist on meta; servers that need p_n see its shape.
                                participation_probabilities=torch.full((num_clients,), 0.5, dtype=torch.float64),
                                param_names=param_names, param_slices=param_slices)
        state = server.init(params, context)
    return _stores_in(state), _tensor_bytes(state)


def participation_log_bytes(rounds: int, num_clients: int) -> int:
    """Bytes of the participation log as :class:`fedhet.engine.simulator.Simulator` keeps it: a
    preallocated ``[rounds, N]`` bool tensor. Change this with the log's layout."""
    return rounds * num_clients


def estimate_needs(*, num_clients: int, dim: int, rounds: int, compute_dtype: torch.dtype, store_dtype: str,
                   store_mmap: bool, store_device: str, client_state_names: Iterable[str],
                   server_stores: Iterable[_StoreRequest] = (),
                   server_tensors: Optional[dict[str, int]] = None) -> list[Need]:
    """The items of the estimate (module docstring) for a run of these sizes."""
    value_bytes = _STORE_BYTES[store_dtype]
    needs = []
    stores = [(f"client store {name}", dim) for name in client_state_names]
    stores += [(f"server store {store.name}", store.dim) for store in server_stores]
    for what, width in stores:
        size = num_clients * width * value_bytes
        if store_mmap:
            needs.append(Need(f"{what} [{num_clients} x {width}], memory-mapped", disk=MMAP_FILES_PER_STORE * size))
        else:
            needs.append(Need(f"{what} [{num_clients} x {width}]", memory=size, disk=CHECKPOINTS_KEPT * size,
                              device=store_device))
    for what, size in (server_tensors or {}).items():
        needs.append(Need(f"server state {what}", memory=size, disk=CHECKPOINTS_KEPT * size))
    log_bytes = participation_log_bytes(rounds, num_clients)
    needs.append(Need(f"participation log [{rounds} x {num_clients}]", memory=log_bytes,
                      disk=CHECKPOINTS_KEPT * log_bytes))
    model_bytes = dim * torch.empty(0, dtype=compute_dtype).element_size()
    needs.append(Need("model and checkpointed model", memory=model_bytes, disk=CHECKPOINTS_KEPT * model_bytes))
    return needs


def _largest(needs: list[Need], attribute: str, device: Optional[str] = None) -> str:
    items = [n for n in needs if getattr(n, attribute) and (device is None or n.device == device)]
    items.sort(key=lambda n: -getattr(n, attribute))
    return ", ".join(f"{n.what} {format_bytes(getattr(n, attribute))}" for n in items[:3])


def resource_problems(needs: list[Need], *, memory_available: Optional[int], disk_available: Optional[int],
                      gpu_available: Optional[int] = None, where: str = "the run directory"
                      ) -> tuple[list[str], list[str]]:
    """``(errors, warnings)``: the needs that exceed what is available, and those above
    :data:`WARN_FRACTION` of it (module docstring)."""
    errors, warnings = [], []
    checks = [("memory", "memory", [n for n in needs if n.device == "cpu"], memory_available, "of available memory"),
              ("GPU memory", "memory", [n for n in needs if n.device != "cpu"], gpu_available, "of free GPU memory"),
              ("disk", "disk", needs, disk_available, f"free on the file system of {where}")]
    for label, attribute, items, available, of_what in checks:
        total = sum(getattr(n, attribute) for n in items)
        if available is None or total == 0:
            continue
        detail = f"{label}: needs about {format_bytes(total)} ({_largest(items, attribute)}), " \
                 f"{format_bytes(available)} {of_what}"
        if total > available:
            errors.append(detail)
        elif total > WARN_FRACTION * available:
            warnings.append(detail)
    return errors, warnings


def check_resources(needs: list[Need], *, mode: str, run_dir: str | Path, store_device: str,
                    log: Callable[[str], None], meminfo: str | Path = "/proc/meminfo",
                    unmeasured: Optional[str] = None) -> None:
    """Apply the rule of the module docstring; ``mode`` is ``run.resource_check``."""
    if mode == "off":
        return
    device = torch.device(store_device)
    errors, warnings = resource_problems(needs, memory_available=available_memory(meminfo),
                                         disk_available=available_disk(run_dir),
                                         gpu_available=available_gpu_memory(device), where=str(run_dir))
    note = f" ({unmeasured})" if unmeasured else ""
    for warning in warnings:
        log(f"warning: this run may not fit: {warning}{note}")
    if errors and mode == "error":
        raise ResourceLimitError(
            "this run needs more than the machine has: " + "; ".join(errors) + note +
            ". Use fewer clients or rounds, a smaller run.store_dtype, run.store_mmap = true for the stores, "
            "or set run.resource_check = \"warn\" to run anyway")
    for error in errors:
        log(f"warning: this run needs more than the machine has: {error}{note}")


def needs_for_run(config: Any, task: Any) -> tuple[list[Need], Optional[str]]:
    """The estimate for a configured run (``config``, the built ``task``) and, when the server's
    state could not be measured, why (module docstring)."""
    from fedhet.algorithms import build
    from fedhet.engine.assembly import storage_dtype_name

    run = config.run
    solver, server = build(config)
    store_dtype = storage_dtype_name(run)
    unmeasured = None
    try:
        stores, tensor_bytes = measure_server_state(server, num_clients=task.num_clients, dim=task.spec.dim,
                                                    dtype=task.dtype, param_names=task.spec.names,
                                                    param_slices=task.spec.slices)
    except Exception as error:  # a server whose init needs real data: estimate without it
        stores, tensor_bytes = [], {}
        unmeasured = f"server {config.server.name}'s state not estimated: {type(error).__name__}"
    needs = estimate_needs(num_clients=task.num_clients, dim=task.spec.dim, rounds=run.rounds,
                           compute_dtype=task.dtype, store_dtype=store_dtype, store_mmap=run.store_mmap,
                           store_device=str(task.device), client_state_names=solver.client_state_names,
                           server_stores=stores, server_tensors=tensor_bytes)
    return needs, unmeasured

