"""FedScale's device and availability pickles to fedhet's plain files (``fedhet traces convert``).

FedScale (SymbioticLab/FedScale) ships two pickles (docs/system.md, "Converting FedScale's traces"):

- ``client_device_capacity``: ``{client_id: {"computation": m, "communication": b}}``, ``m`` the
  model's inference milliseconds per example and ``b`` the bandwidth in kbit/s
  (``fedscale/cloud/internal/client_metadata.py``). It becomes a profile file with
  ``seconds_per_sample = 3 m / 1000`` (FedScale's ``augmentation_factor`` 3 for forward plus
  backward), ``uplink_bps = downlink_bps = 1000 b`` and ``latency = 0``, so fedhet's completion time
  is FedScale's (:mod:`fedhet.system.time_model`).
- ``client_behave_trace``: ``{client_id: {"active": [a_1, ...], "inactive": [i_1, ...],
  "finish_time": P, ...}}``; FedScale's ``is_active(t)`` is ``a_j <= t mod P <= i_j`` for some j.
  It becomes an availability trace with on-intervals ``[a_j, i_j]`` and period ``P``.

The pickles are read with :func:`fedhet.core.safe_pickle.load_plain_pickle`, which admits only
dicts, lists, strings and numbers. Clients are renumbered 0..N-1 in ascending order of FedScale's
ids (``clients`` keeps the first N of them).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

from fedhet.core.client_ids import parse_client_id
from fedhet.core.safe_pickle import load_plain_pickle
from fedhet.core.traces import AvailabilityTrace, TraceError, trace_from_spans, write_trace
from fedhet.system.profiles import ClientProfiles, ProfileError, profiles_from_rows, write_profiles

KINDS = ("capacity", "behavior")


def detect_kind(data: Any, source: str) -> str:
    """``capacity`` or ``behavior`` from the structure of a loaded pickle."""
    if not isinstance(data, dict) or not data:
        raise ProfileError(f"{source}: expected a non-empty dict of clients (FedScale's client_device_capacity "
                           "or client_behave_trace)")
    first = next(iter(data.values()))
    if isinstance(first, dict) and {"computation", "communication"} <= set(first):
        return "capacity"
    if isinstance(first, dict) and {"active", "inactive", "finish_time"} <= set(first):
        return "behavior"
    raise ProfileError(f"{source}: neither FedScale file: a client's entry has keys "
                       f"{sorted(map(str, first)) if isinstance(first, dict) else type(first).__name__}; expected "
                       "computation/communication (capacity) or active/inactive/finish_time (behavior)")


def _ordered_clients(data: dict, source: str, clients: Optional[int]) -> list[Any]:
    """The file's keys in ascending order of their ids; an id is an integer or its decimal text
    (fedhet.core.client_ids), and two keys of one id (``1`` and ``"1"``) are refused."""
    ids: dict[int, Any] = {}
    for key in data:
        number = parse_client_id(key)
        if number is None:
            raise ProfileError(f"{source}: client id {key!r}: FedScale client ids must be integers")
        if number in ids:
            raise ProfileError(f"{source}: client id {number} is listed twice ({ids[number]!r} and {key!r})")
        ids[number] = key
    keys = [ids[number] for number in sorted(ids)]
    if clients is not None:
        if clients > len(keys):
            raise ProfileError(f"{source}: --clients {clients} but the file has {len(keys)} clients")
        keys = keys[:clients]
    return keys


def _as_float(value: int | float, error: type[Exception], where: str) -> float:
    """``float(value)``; an integer beyond float64 (a pickle may hold any size) is the file's error."""
    try:
        return float(value)
    except OverflowError:
        raise error(f"{where} = an integer of {int(value).bit_length()} bits: too large for a number of seconds, "
                    "milliseconds or kbit/s") from None


def capacity_to_profiles(data: dict, source: str, clients: Optional[int] = None) -> ClientProfiles:
    rows = []
    for number, key in enumerate(_ordered_clients(data, source, clients)):
        entry = data[key]
        if not isinstance(entry, dict) or not {"computation", "communication"} <= set(entry):
            raise ProfileError(f"{source}: client {key!r}: expected computation and communication")
        computation, communication = entry["computation"], entry["communication"]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (computation, communication)):
            raise ProfileError(f"{source}: client {key!r}: computation and communication must be numbers")
        computation = _as_float(computation, ProfileError, f"{source}: client {key!r}: computation")
        communication = _as_float(communication, ProfileError, f"{source}: client {key!r}: communication")
        rows.append({"client": number, "seconds_per_sample": 3.0 * computation / 1000.0,
                     "uplink_bps": 1000.0 * communication, "downlink_bps": 1000.0 * communication,
                     "latency": 0.0})
    return profiles_from_rows(rows, source)


def behavior_to_trace(data: dict, source: str, clients: Optional[int] = None) -> AvailabilityTrace:
    spans, periods = [], []
    for key in _ordered_clients(data, source, clients):
        entry = data[key]
        if not isinstance(entry, dict) or not {"active", "inactive", "finish_time"} <= set(entry):
            raise TraceError(f"{source}: client {key!r}: expected active, inactive and finish_time")
        active, inactive = entry["active"], entry["inactive"]
        if not isinstance(active, (list, tuple)) or not isinstance(inactive, (list, tuple)) or len(active) != len(inactive):
            raise TraceError(f"{source}: client {key!r}: active and inactive must be lists of the same length")
        spans.append(list(zip(active, inactive)))
        finish = entry["finish_time"]
        # FedScale replays a client at t mod finish_time; with an infinite finish_time that is t itself:
        # a client that is not replayed, fedhet's "no period" (an infinite period is not a valid file).
        periods.append(None if isinstance(finish, float) and finish == math.inf else finish)
    for client, (pairs, period) in enumerate(zip(spans, periods)):
        values = [v for pair in pairs for v in pair] + ([] if period is None else [period])
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise TraceError(f"{source}: client {client}: times must be numbers")
        spans[client] = [(_as_float(a, TraceError, f"{source}: client {client}: time"),
                          _as_float(b, TraceError, f"{source}: client {client}: time")) for a, b in pairs]
        if period is not None:
            periods[client] = _as_float(period, TraceError, f"{source}: client {client}: finish_time")
    return trace_from_spans(spans, periods, source)


def convert(path: str | Path, out: str | Path, *, kind: Optional[str] = None,
            clients: Optional[int] = None) -> str:
    """Convert FedScale pickle ``path`` to ``out`` (a profile or trace file by kind); returns a
    one-line description of what was written."""
    source = str(path)
    data = load_plain_pickle(path)
    found = detect_kind(data, source)
    if kind is not None and kind != found:
        raise ProfileError(f"{source}: --kind {kind} but the file's structure is FedScale's {found} file")
    if found == "capacity":
        profiles = capacity_to_profiles(data, source, clients)
        write_profiles(profiles, out)
        return f"{out}: profiles of {profiles.num_clients} clients (from FedScale's client_device_capacity)"
    trace = behavior_to_trace(data, source, clients)
    write_trace(trace, out)
    return f"{out}: availability of {trace.num_clients} clients (from FedScale's client_behave_trace)"
