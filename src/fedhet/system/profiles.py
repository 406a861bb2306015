"""Client system profiles: compute speed, uplink and downlink bandwidth, latency (docs/system.md).

A profile gives client n a device speed ``F_n`` in FLOP/s (or directly its seconds per training
example ``c_n``), an uplink ``u_n`` and a downlink ``v_n`` in bits per second, and a one-way latency
``L_n`` in seconds. With the model's forward FLOPs per example ``F_model`` (:mod:`fedhet.system.flops`),
``c_n = 3 F_model / F_n``: a backward pass costs about twice a forward one, FedScale's
``augmentation_factor = 3`` (``fedscale/cloud/internal/client_metadata.py``).

Sources (``system.profiles``):

- ``lognormal``: ``F_n = F_med exp(s_c z)``, ``u_n = u_med exp(s_b z')``, ``v_n = v_med exp(s_b z'')``
  with standard normal ``z`` drawn from a stream keyed by (seed, "system_profile", n), so a client's
  profile does not depend on N or on any other stream (the lognormal device speeds of FedScale's
  ``get_completion_time_lognormal``, PAPAYA);
- ``tiers``: each client is one of three device tiers (:data:`TIERS`), drawn from the same stream;
- ``file``: a ``.csv`` (header ``client,device_flops,seconds_per_sample,uplink_bps,downlink_bps,latency``;
  one of ``device_flops`` / ``seconds_per_sample`` per row) or ``.json``
  (``{"format": "fedhet-profiles", "version": 1, "clients": [{"client": 0, "device_flops": ...,
  "uplink_bps": ..., "downlink_bps": ..., "latency": ...}, ...]}``) file, clients 0..N-1.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path
from typing import Any

import torch

from fedhet.core.client_ids import first_missing_id, parse_client_id
from fedhet.core.input_files import parse_input_json, read_input_text
from fedhet.core.io import atomic_write_text
from fedhet.core.options import ConfigError
from fedhet.core.seeding import numpy_generator
from fedhet.errors import FedhetError
from fedhet.system.options import SystemOptions

PROFILE_FORMAT = "fedhet-profiles"
PROFILE_COLUMNS = ("client", "device_flops", "seconds_per_sample", "uplink_bps", "downlink_bps", "latency")
# name, probability, FLOP/s, uplink bit/s, downlink bit/s: a fast phone, a mid-range one, an old one.
TIERS = (("high", 0.25, 1e10, 1e7, 5e7),
         ("mid", 0.5, 2e9, 2e6, 1e7),
         ("low", 0.25, 4e8, 5e5, 2e6))


class ProfileError(FedhetError, ValueError):
    """A profile file is malformed; the message names the file, the client and the value."""


@dataclasses.dataclass(frozen=True)
class ClientProfiles:
    """Per-client float64 ``[N]`` tensors; ``device_flops`` is NaN where a client's
    ``seconds_per_sample`` is given directly (and the other way round)."""

    device_flops: torch.Tensor
    seconds_per_sample: torch.Tensor
    uplink_bps: torch.Tensor
    downlink_bps: torch.Tensor
    latency: torch.Tensor

    @property
    def num_clients(self) -> int:
        return int(self.uplink_bps.numel())

    def compute_seconds_per_sample(self, flops_per_example: float) -> torch.Tensor:
        """``c_n``: the given seconds per example, else ``3 F_model / F_n``."""
        derived = 3.0 * float(flops_per_example) / self.device_flops
        return torch.where(torch.isnan(self.seconds_per_sample), derived, self.seconds_per_sample)

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _tensor(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def draw_profiles(options: SystemOptions, num_clients: int, seed: int) -> ClientProfiles:
    """Profiles from the ``lognormal`` or ``tiers`` source, client n's from its own stream."""
    flops, up, down = [], [], []
    for client in range(num_clients):
        rng = numpy_generator(seed, "system_profile", client)
        if options.profiles == "tiers":
            u = float(rng.random())
            cumulative = 0.0
            tier = TIERS[-1]
            for candidate in TIERS:
                cumulative += candidate[1]
                if u < cumulative:
                    tier = candidate
                    break
            flops.append(tier[2])
            up.append(tier[3])
            down.append(tier[4])
        else:
            z = rng.standard_normal(3)
            flops.append(options.device_flops * math.exp(options.compute_sigma * float(z[0])))
            up.append(options.uplink_bps * math.exp(options.bandwidth_sigma * float(z[1])))
            down.append(options.downlink_bps * math.exp(options.bandwidth_sigma * float(z[2])))
    return ClientProfiles(device_flops=_tensor(flops), seconds_per_sample=_tensor([math.nan] * num_clients),
                          uplink_bps=_tensor(up), downlink_bps=_tensor(down),
                          latency=_tensor([options.latency] * num_clients))


def _positive(source: str, client: Any, key: str, value: Any, *, zero: bool = False) -> float:
    if isinstance(value, bool):            # JSON true is not 1 FLOP/s
        raise ProfileError(f"{source}: client {client}: {key} = {value!r}: expected a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ProfileError(f"{source}: client {client}: {key} = {value!r}: expected a number") from None
    except OverflowError:     # a JSON integer beyond float64
        raise ProfileError(f"{source}: client {client}: {key} = an integer of {int(value).bit_length()} bits: "
                           "must be a finite number") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero):
        raise ProfileError(f"{source}: client {client}: {key} = {value!r}: must be a finite number "
                           + (">= 0" if zero else "> 0"))
    return number


def profiles_from_rows(rows: list[dict[str, Any]], source: str) -> ClientProfiles:
    """Validate rows (dicts with :data:`PROFILE_COLUMNS`) into profiles; clients 0..N-1, once each."""
    by_client: dict[int, dict[str, Any]] = {}
    for row in rows:
        client: Any = row.get("client")     # any value of the file, None when missing; checked here
        client_id = parse_client_id(client)     # an integer or its text: 3.9 is not client 3
        if client_id is None:
            raise ProfileError(f"{source}: client = {client!r}: expected an integer")
        if client_id in by_client:
            raise ProfileError(f"{source}: client {client_id} is listed twice")
        by_client[client_id] = row
    if not by_client:
        raise ProfileError(f"{source}: the file lists no client")
    if min(by_client) < 0:
        raise ProfileError(f"{source}: clients must be numbered 0..N-1 (client {min(by_client)})")
    missing = first_missing_id(by_client)     # without a list as long as the largest id
    if missing is not None:
        raise ProfileError(f"{source}: clients must be numbered 0..N-1 (client {missing} is missing)")
    num_clients = len(by_client)
    columns: dict[str, list[float]] = {name: [] for name in PROFILE_COLUMNS[1:]}
    for client in range(num_clients):
        row = by_client[client]
        speed = {key: row.get(key) for key in ("device_flops", "seconds_per_sample")
                 if row.get(key) not in (None, "")}
        if len(speed) != 1:
            raise ProfileError(f"{source}: client {client}: give exactly one of device_flops and seconds_per_sample")
        columns["device_flops"].append(_positive(source, client, "device_flops", speed["device_flops"])
                                       if "device_flops" in speed else math.nan)
        columns["seconds_per_sample"].append(
            _positive(source, client, "seconds_per_sample", speed["seconds_per_sample"])
            if "seconds_per_sample" in speed else math.nan)
        for key in ("uplink_bps", "downlink_bps"):
            columns[key].append(_positive(source, client, key, row.get(key)))
        columns["latency"].append(_positive(source, client, "latency", row.get("latency", 0.0), zero=True))
    return ClientProfiles(**{key: _tensor(values) for key, values in columns.items()})


def _refuse_unknown_keys(source: str, what: str, keys: Any, where: str = "") -> None:
    """A misspelt column or key (``latncy``) would leave its value at the default: refuse it."""
    unknown = [str(key) for key in keys if key not in PROFILE_COLUMNS]
    if unknown:
        raise ProfileError(f"{source}: {where}unknown {what} {unknown[0]!r}; allowed: {', '.join(PROFILE_COLUMNS)}")


def read_profiles(path: str | Path) -> ClientProfiles:
    """Read a ``.csv`` or ``.json`` profile file (module docstring)."""
    path = Path(path)
    source = str(path)
    text = read_input_text(path, ProfileError)
    if path.suffix == ".json":
        data = parse_input_json(text, source, ProfileError)
        if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT or not isinstance(data.get("clients"), list):
            raise ProfileError(f'{source}: expected {{"format": "{PROFILE_FORMAT}", "clients": [...]}} (docs/system.md)')
        rows = data["clients"]
        if not all(isinstance(row, dict) for row in rows):
            raise ProfileError(f"{source}: every entry of \"clients\" must be an object")
        for row in rows:
            _refuse_unknown_keys(source, "key", row, f"client {row.get('client')!r}: ")
        return profiles_from_rows(rows, source)
    if path.suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        if reader.fieldnames is None or "client" not in reader.fieldnames:
            raise ProfileError(f"{source}: the first line must be the header {','.join(PROFILE_COLUMNS)}")
        _refuse_unknown_keys(source, "column", reader.fieldnames)
        rows = list(reader)
        for line_number, row in enumerate(rows, start=2):
            if None in row:     # DictReader's key for values beyond the header
                raise ProfileError(f"{source}: line {line_number}: more values than the header has columns")
        return profiles_from_rows(rows, source)
    raise ProfileError(f"{source}: a profile file is .csv or .json")


def write_profiles(profiles: ClientProfiles, path: str | Path) -> None:
    """Write ``profiles`` atomically as fedhet's ``.csv`` or ``.json`` schema."""
    path = Path(path)
    rows = []
    for client in range(profiles.num_clients):
        row: dict[str, Any] = {"client": client}
        for key in PROFILE_COLUMNS[1:]:
            value = float(getattr(profiles, key)[client])
            row[key] = None if math.isnan(value) else value
        rows.append(row)
    if path.suffix == ".json":
        atomic_write_text(path, json.dumps({"format": PROFILE_FORMAT, "version": 1, "clients": rows}, indent=1) + "\n")
    elif path.suffix == ".csv":
        lines = [",".join(PROFILE_COLUMNS)]
        lines += [",".join("" if row[key] is None else repr(row[key]) for key in PROFILE_COLUMNS) for row in rows]
        atomic_write_text(path, "\n".join(lines) + "\n")
    else:
        raise ProfileError(f"{path}: write profiles as .csv or .json")


def load_profiles(options: SystemOptions, num_clients: int, seed: int) -> ClientProfiles:
    """The run's profiles; a profile file must list exactly ``num_clients`` clients."""
    if options.profiles != "file":
        return draw_profiles(options, num_clients, seed)
    profiles = read_profiles(options.profile_file)
    if profiles.num_clients != num_clients:
        raise ConfigError("system.profile_file", options.profile_file,
                          f"lists {profiles.num_clients} clients but the partition has {num_clients}")
    return profiles
