"""Availability traces: when each client is on, in virtual seconds (docs/system.md, "Traces").

A trace gives every client ``n = 0..N-1`` a list of on-intervals ``[start, end]`` (seconds from the
start of the run; closed, as FedScale's ``ClientMetadata.is_active`` tests
``active <= t <= inactive``) and optionally a period ``P_n``: a periodic client is on at ``t`` when
``t mod P_n`` lies in one of its intervals (FedScale replays its traces modulo ``finish_time``).

Three file forms, chosen by suffix, all plain text:

- ``.json`` (fedhet's schema)::

      {"format": "fedhet-availability", "version": 1,
       "clients": [{"client": 0, "period": 86400, "on": [[0, 3600], [7200, 9000]]}, ...]}

  ``period`` may be omitted or ``null`` (not periodic);
- ``.csv`` (the same schema, one interval a row): header ``client,start,end[,period]``; an empty
  ``period`` is no period; ``end`` may be ``inf`` for a client that stays on;
- ``.txt`` (Plato-style, TL-System/plato issue #101): one line per client,
  ``<id>: on|off, [t1, t2, ...]``, the client's status at time 0 and the times at which it flips;
  ids count from 1 as Plato numbers its clients (fedhet client ``id - 1``).

Every client from 0 to N-1 must appear; a negative or non-finite start, an end not after its start
(an empty window), overlapping intervals, a non-positive period or an interval beyond its period
are refused with one line naming the file, the client and the value.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from fedhet.core.client_ids import first_missing_id
from fedhet.core.input_files import parse_input_json, read_input_text
from fedhet.core.io import atomic_write_text
from fedhet.errors import FedhetError

TRACE_FORMAT = "fedhet-availability"
TRACE_SUFFIXES = (".json", ".csv", ".txt")


class TraceError(FedhetError, ValueError):
    """An availability trace file is malformed; the message names the file, the client and the value."""


@dataclasses.dataclass(frozen=True)
class AvailabilityTrace:
    """On-intervals per client (``intervals[n]``: sorted, disjoint ``(start, end)``) and periods
    (``periods[n]``: seconds, or None for a trace that is not replayed)."""

    intervals: tuple[tuple[tuple[float, float], ...], ...]
    periods: tuple[Optional[float], ...]

    @property
    def num_clients(self) -> int:
        return len(self.intervals)

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """Flat float64 tensors (``owner``, ``start``, ``end`` per interval; ``period`` per client,
        ``inf`` for none): the form a participation state and a checkpoint hold."""
        owner = [n for n, spans in enumerate(self.intervals) for _ in spans]
        starts = [s for spans in self.intervals for s, _ in spans]
        ends = [e for spans in self.intervals for _, e in spans]
        return {"owner": torch.tensor(owner, dtype=torch.int64),
                "start": torch.tensor(starts, dtype=torch.float64),
                "end": torch.tensor(ends, dtype=torch.float64),
                "period": torch.tensor([math.inf if p is None else p for p in self.periods], dtype=torch.float64)}


def available_at(owner: torch.Tensor, start: torch.Tensor, end: torch.Tensor, period: torch.Tensor,
                 seconds: float) -> torch.Tensor:
    """``[N]`` bool: client n is on at virtual time ``seconds`` (``t mod P_n`` for a periodic client)."""
    num_clients = int(period.numel())
    client_period = period[owner]
    local = torch.where(torch.isinf(client_period), torch.full_like(start, float(seconds)),
                        torch.remainder(torch.full_like(start, float(seconds)), client_period))
    inside = (start <= local) & (local <= end)
    on = torch.zeros(num_clients, dtype=torch.bool)
    on[owner[inside]] = True
    return on


def _fail(source: str, message: str) -> TraceError:
    return TraceError(f"{source}: {message}")


def _number(source: str, where: str, value: Any, *, allow_inf: bool = False) -> float:
    if isinstance(value, bool):
        raise _fail(source, f"{where} = {value!r}: expected a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _fail(source, f"{where} = {value!r}: expected a number") from None
    except OverflowError:     # a JSON integer beyond float64
        raise _fail(source, f"{where} = an integer of {int(value).bit_length()} bits: must be a finite number") from None
    if math.isnan(number) or (math.isinf(number) and not (allow_inf and number > 0)):
        raise _fail(source, f"{where} = {value!r}: must be a finite number" + (" or inf" if allow_inf else ""))
    return number


def build_trace(per_client: dict[int, list[tuple[float, float]]], periods: dict[int, Optional[float]],
                source: str) -> AvailabilityTrace:
    """Validate ``{client: [(start, end), ...]}`` into a trace (the module docstring's rules)."""
    if not per_client:
        raise _fail(source, "the trace lists no client")
    if min(per_client) < 0:
        raise _fail(source, f"client {min(per_client)}: client ids must be 0 or more")
    missing = first_missing_id(per_client)
    if missing is not None:
        raise _fail(source, f"client {missing} is missing: clients must be numbered 0..N-1 "
                            f"(N = {max(per_client) + 1} from the largest id)")
    num_clients = len(per_client)
    intervals, period_list = [], []
    for client in range(num_clients):
        period = periods.get(client)
        if period is not None:
            # The converters and generators come here without a parser: the same number rules.
            period = _number(source, f"client {client} period", period)
            if not period > 0:
                raise _fail(source, f"client {client}: period = {period!r}: must be positive")
        spans = sorted((_number(source, f"client {client} start", start),
                        _number(source, f"client {client} end", end, allow_inf=True))
                       for start, end in per_client[client])
        for start, end in spans:
            if start < 0:
                raise _fail(source, f"client {client}: start = {start!r}: a negative time")
            if not end > start:
                raise _fail(source, f"client {client}: window [{start!r}, {end!r}] is empty: end must be after start")
            if period is not None and end > period:
                raise _fail(source, f"client {client}: window [{start!r}, {end!r}] ends after the period {period!r}")
        for (_, previous_end), (start, _) in zip(spans, spans[1:]):
            if start <= previous_end:
                raise _fail(source, f"client {client}: windows overlap at {start!r}; merge them")
        intervals.append(tuple((float(s), float(e)) for s, e in spans))
        period_list.append(None if period is None else float(period))
    return AvailabilityTrace(tuple(intervals), tuple(period_list))


def parse_json_trace(text: str, source: str) -> AvailabilityTrace:
    data = parse_input_json(text, source, TraceError)
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
        raise _fail(source, f'expected a JSON object with "format": "{TRACE_FORMAT}" (docs/system.md)')
    clients = data.get("clients")
    if not isinstance(clients, list):
        raise _fail(source, '"clients" must be a list of {"client", "on", "period"} objects')
    per_client: dict[int, list[tuple[float, float]]] = {}
    periods: dict[int, Optional[float]] = {}
    for entry in clients:
        if not isinstance(entry, dict) or not isinstance(entry.get("client"), int) or isinstance(entry.get("client"), bool):
            raise _fail(source, f"entry {entry!r}: expected an object with an integer \"client\"")
        client = entry["client"]
        unknown = sorted(set(map(str, entry)) - {"client", "on", "period"})
        if unknown:
            raise _fail(source, f"client {client}: unknown key {unknown[0]!r}; an entry has \"client\", \"on\" and "
                                "\"period\"")
        if client in per_client:
            raise _fail(source, f"client {client} is listed twice")
        spans = entry.get("on", [])
        if not isinstance(spans, list) or not all(isinstance(s, list) and len(s) == 2 for s in spans):
            raise _fail(source, f"client {client}: \"on\" must be a list of [start, end] pairs")
        per_client[client] = [(_number(source, f"client {client} start", s),
                               _number(source, f"client {client} end", e, allow_inf=True)) for s, e in spans]
        period = entry.get("period")
        periods[client] = None if period is None else _number(source, f"client {client} period", period)
    return build_trace(per_client, periods, source)


def parse_csv_trace(text: str, source: str) -> AvailabilityTrace:
    rows = list(csv.reader(io.StringIO(text)))
    header = [c.strip() for c in rows[0]] if rows else []
    if header not in (["client", "start", "end"], ["client", "start", "end", "period"]):
        raise _fail(source, f"the first line must be the header client,start,end[,period] (found {','.join(header)!r})")
    has_period = len(header) == 4
    per_client: dict[int, list[tuple[float, float]]] = {}
    periods: dict[int, Optional[float]] = {}
    for line_number, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        if len(row) < 3 or len(row) > len(header):
            # A row longer than the header would have its extra value (a period) silently dropped.
            raise _fail(source, f"line {line_number}: {len(row)} values for the header {','.join(header)}; "
                                "expected client,start,end[,period] as the header names them")
        try:
            client = int(row[0])
        except ValueError:
            raise _fail(source, f"line {line_number}: client = {row[0]!r}: expected an integer") from None
        start = _number(source, f"line {line_number} start", row[1].strip())
        end = _number(source, f"line {line_number} end", row[2].strip(), allow_inf=True)
        per_client.setdefault(client, []).append((start, end))
        text_period = row[3].strip() if has_period and len(row) > 3 else ""
        period = _number(source, f"line {line_number} period", text_period) if text_period else None
        if client in periods and periods[client] != period:
            raise _fail(source, f"line {line_number}: client {client} has two periods ({periods[client]!r}, {period!r})")
        periods[client] = period
    return build_trace(per_client, periods, source)


_PLATO_LINE = re.compile(r"^\s*(\d+)\s*:\s*(on|off)\s*,\s*\[(.*)\]\s*$")


def parse_plato_trace(text: str, source: str) -> AvailabilityTrace:
    """``<id>: on|off, [t1, t2, ...]`` per line (ids from 1): status at 0 and the times it flips."""
    per_client: dict[int, list[tuple[float, float]]] = {}
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _PLATO_LINE.match(line)
        if match is None:
            raise _fail(source, f"line {line_number}: expected '<client id>: on|off, [t1, t2, ...]'")
        plato_id = int(match.group(1))
        if plato_id < 1:
            raise _fail(source, f"line {line_number}: client id {plato_id}: Plato ids count from 1")
        client = plato_id - 1
        if client in per_client:
            raise _fail(source, f"line {line_number}: client {plato_id} is listed twice")
        body = match.group(3).strip()
        flips = [_number(source, f"line {line_number} time", item.strip()) for item in body.split(",")] if body else []
        if any(b <= a for a, b in zip(flips, flips[1:])):
            raise _fail(source, f"line {line_number}: the transition times must increase")
        if flips and flips[0] <= 0:
            raise _fail(source, f"line {line_number}: time {flips[0]!r}: transitions come after time 0")
        on = match.group(2) == "on"
        edges = [0.0, *flips, math.inf]
        spans = []
        for begin, finish in zip(edges, edges[1:]):
            if on:
                spans.append((begin, finish))
            on = not on
        per_client[client] = spans
    return build_trace(per_client, {}, source)


def read_trace(path: str | Path) -> AvailabilityTrace:
    """Read a trace file in any of the three forms (by suffix); :class:`TraceError` when malformed."""
    path = Path(path)
    if path.suffix not in TRACE_SUFFIXES:
        raise TraceError(f"{path}: unknown trace form; allowed suffixes: {', '.join(TRACE_SUFFIXES)}")
    text = read_input_text(path, TraceError)
    parser = {".json": parse_json_trace, ".csv": parse_csv_trace, ".txt": parse_plato_trace}[path.suffix]
    return parser(text, str(path))


def trace_to_json(trace: AvailabilityTrace) -> str:
    clients = []
    for client, (spans, period) in enumerate(zip(trace.intervals, trace.periods)):
        entry: dict[str, Any] = {"client": client, "on": [[s, e if math.isfinite(e) else "inf"] for s, e in spans]}
        if period is not None:
            entry["period"] = period
        clients.append(entry)
    # One client a line: readable and diffable for thousands of clients.
    lines = ",\n  ".join(json.dumps(entry, allow_nan=False) for entry in clients)
    return f'{{"format": "{TRACE_FORMAT}", "version": 1, "clients": [\n  {lines}\n]}}\n'


def trace_to_csv(trace: AvailabilityTrace) -> str:
    lines = ["client,start,end,period"]
    for client, (spans, period) in enumerate(zip(trace.intervals, trace.periods)):
        for start, end in spans:
            lines.append(f"{client},{start!r},{end!r},{'' if period is None else repr(period)}")
    return "\n".join(lines) + "\n"


def write_trace(trace: AvailabilityTrace, path: str | Path) -> None:
    """Write ``trace`` atomically as ``.json`` or ``.csv`` (fedhet's schema). The text is first read
    back with the parser that ``fedhet check`` and a run use, so a file that they would refuse is
    never written (the error names the file and the value instead)."""
    path = Path(path)
    if path.suffix not in (".json", ".csv"):
        raise TraceError(f"{path}: write a trace as .json or .csv")
    try:
        text = trace_to_json(trace) if path.suffix == ".json" else trace_to_csv(trace)
    except ValueError as error:      # json's allow_nan=False: a NaN or infinity where JSON has none
        raise TraceError(f"{path}: not written: {error}") from None
    (parse_json_trace if path.suffix == ".json" else parse_csv_trace)(text, str(path))
    atomic_write_text(path, text)


def trace_from_spans(spans: Sequence[Sequence[tuple[float, float]]], periods: Sequence[Optional[float]],
                     source: str = "trace") -> AvailabilityTrace:
    """A validated trace from per-client spans (the generators' and converters' entry point)."""
    return build_trace({n: list(s) for n, s in enumerate(spans)}, dict(enumerate(periods)), source)
